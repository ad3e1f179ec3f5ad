package sluice

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
)

// Unwritten to written: convertWritten is the one place extents are
// converted once the device holds their data, for direct-write completion
// and writeback alike. It calls only the extent map and the transaction.

// fileRange is a run of file blocks.
type fileRange struct{ first, n uint64 }

// convertWritten is the one place unwritten extents become written, once
// the device holds their data (a direct write's completion, a writeback's):
// the ranges conv are converted in core at once, so reads see the data,
// stamped with the current conversion epoch, so that their records say
// written only after the sync point whose device flush made the data
// durable (extmap epochs; see the package doc's Durability). The
// copy-on-write runs cow, whose staging blocks hold their data now, are
// remapped the same way, with the same epoch (extmap Remap). With
// publish, the size is raised to end (never shrinking: racing completions
// leave the largest end). Nothing of it is committed before the next sync
// point (see convertWrittenLocked); the inode joins the dirty set.
func (in *inode) convertWritten(conv []fileRange, cow []cowRange, end int64, publish bool) error {
	in.mu.Lock()
	dirty, err := in.convertWrittenLocked(conv, cow, end, publish)
	in.mu.Unlock()
	if dirty {
		in.fs.markDirty(in)
	}
	return err
}

// convertWrittenLocked is convertWritten, reporting instead of doing
// whether the inode must join the dirty set (conversions, remaps, record
// changes or attributes are pending).
//
// It commits nothing, as a rule: a conversion and a remap change no
// record's content until the sync point (the records still say unwritten,
// or still name the shared blocks), so the record splits and merges they
// make wait in in.recs (the next transaction of the inode, or the sync
// point, writes them first), and the size it publishes waits as the
// attributes that writes change do (attrDirty). A crash before the sync
// point finds the records as they were, which say the same. Staged
// blocks that a remap displaced (a block copied on write twice before a
// sync point) wait in in.displaced for the sync point's persist, which
// frees them. A transaction every maxDeferredRecs changes or displaced
// runs bounds in.recs and in.displaced.
//
// Preconditions: in.mu is held.
func (in *inode) convertWrittenLocked(conv []fileRange, cow []cowRange, end int64, publish bool) (dirty bool, err error) {
	fs := in.fs
	if err := fs.writable(); err != nil {
		return false, err
	}
	epoch := fs.convEpoch.Load()
	rec := deferRecords{in}
	for _, r := range conv {
		in.ext.Convert(r.first, r.n, epoch, rec)
	}
	var freed []extmap.DevRange
	for _, c := range cow {
		f, err := in.ext.Remap(c.fb, c.n, c.dev, epoch, rec)
		if err != nil {
			return true, fs.shutdownWith(fmt.Errorf("remapping inode %d: %w", in.ino, err))
		}
		freed = append(freed, f...)
		fs.counters.CowRemaps.Add(1)
	}
	if publish && uint64(end) > in.attr.Size {
		in.attr.Size = uint64(end)
		in.attrDirty = true
	}
	in.displaced = append(in.displaced, freed...)
	if len(in.recs) > maxDeferredRecs || len(in.displaced) > maxDeferredRecs {
		err = fs.transact(func(t *txn) error {
			t.extents(in)
			return in.freeDisplaced(t)
		})
	}
	fs.counters.RecordsDeferred.Add(1)
	return len(in.recs) > 0 || in.attrDirty || in.ext.Pending() || len(in.displaced) > 0, err
}

// maxDeferredRecs bounds the record changes an inode defers (in.recs)
// between transactions.
const maxDeferredRecs = 4096

// convertWrittenBack converts the unwritten blocks a writeback wrote, and
// remaps the blocks it wrote out of place (cow: a checksummed volume). While
// appends are in flight, blocks that lie wholly past the size belong to a
// buffered append not yet published: they stay unwritten, recorded in
// in.appendConv, and the append's publication converts them, so that the
// metadata never says written past the size (appends.go).
func (in *inode) convertWrittenBack(conv []fileRange, cow []cowRange) error {
	fs := in.fs
	in.mu.Lock()
	if in.appends.pending.Load() > 0 {
		fb := uint64(roundUp(int64(in.attr.Size), fs.blockSize) / fs.blockSize)
		keep := conv[:0:0]
		for _, c := range conv {
			if c.first < fb {
				keep = append(keep, fileRange{c.first, min(c.n, fb-c.first)})
			}
			if c.first+c.n > fb {
				lo := max(c.first, fb)
				in.appendConv = append(in.appendConv, fileRange{lo, c.first + c.n - lo})
				fs.counters.AppendConvDeferred.Add(1)
			}
		}
		conv = keep
	}
	var dirty bool
	var err error
	if len(conv) > 0 || len(cow) > 0 {
		dirty, err = in.convertWrittenLocked(conv, cow, 0, false)
	}
	in.mu.Unlock()
	if dirty {
		fs.markDirty(in)
	}
	return err
}

// convGroup gathers the conversions of direct writes to one inode that
// complete together into one metadata transaction, as the appends'
// publication does for appends (and as a log's group commit does: XFS's
// CIL). A completion queues its request without taking a lock; the first
// to find no leader becomes the leader: under in.mu it commits every
// request queued (its own and those queued meanwhile) in one
// convertWritten transaction, wakes their waiters, and goes on while
// requests keep coming, but once its own is done it hands the next batch
// to that batch's newest request, whose waiter leads from then on, so no
// caller serves others for long. Each request's data is on the device
// before it queues, so the epoch current at the commit is right for every
// request of the batch (extmap epochs), and the size is the largest end
// (never shrinking, as before).
type convGroup struct {
	queue  atomic.Pointer[convReq] // requests waiting for a leader, newest first
	leader atomic.Bool             // a goroutine is committing batches
}

// convReq is one direct write's conversion. It belongs to the write's
// dioOp; the leader that takes it touches it only until it sends on done.
type convReq struct {
	conv []fileRange
	cow  []cowRange // copy-on-write runs to remap
	end  int64      // the size to publish, at least
	next *convReq
	err  error
	// lead says the waiter is to lead: it commits batch, the requests
	// the previous leader took but left to it (led by this one).
	lead  bool
	batch *convReq
	done  chan struct{} // capacity 1: r's batch is committed, or r leads
}

// convertGrouped converts r.conv and publishes the size r.end, in a
// transaction shared with the direct writes to in that complete meanwhile
// (convGroup), and returns its error once it is committed.
func (in *inode) convertGrouped(r *convReq) error {
	g := &in.convs
	for {
		old := g.queue.Load()
		r.next = old
		if g.queue.CompareAndSwap(old, r) {
			break
		}
	}
	if g.leader.CompareAndSwap(false, true) {
		in.leadConversions(g.queue.Swap(nil), r)
	}
	// A leader commits r (or hands r a batch to lead).
	lockrank.Wait(lockrank.RankInodeMu, uint64(in.ino), nil)
	for {
		<-r.done
		if !r.lead {
			return r.err
		}
		r.lead = false
		batch := r.batch
		r.batch = nil
		in.leadConversions(batch, r)
	}
}

// leadConversions commits batch, then the batches queued after it, for as
// long as requests keep coming and own (the leader's request) is not done;
// then it hands the next batch to its newest request, or steps down.
//
// Preconditions: the caller holds in.convs.leader.
func (in *inode) leadConversions(batch, own *convReq) {
	g := &in.convs
	ownDone := false
	for {
		for batch != nil {
			if ownDone {
				// Hand over: the newest request leads the rest.
				batch.lead, batch.batch = true, batch
				in.fs.counters.ConvLeaderHandoffs.Add(1)
				batch.done <- struct{}{}
				return
			}
			ownDone = in.commitConversions(batch, own)
			batch = g.queue.Swap(nil)
		}
		g.leader.Store(false)
		// A request queued after the last Swap, while the leader was
		// still held: its goroutine failed the CompareAndSwap, so lead it.
		if g.queue.Load() == nil || !g.leader.CompareAndSwap(false, true) {
			return
		}
		batch = g.queue.Swap(nil)
	}
}

// commitConversions commits the conversions of batch in one transaction
// and wakes every request with the result (own's waiter, the caller,
// finds its signal when it waits), reporting whether own was in batch.
func (in *inode) commitConversions(batch, own *convReq) (ownDone bool) {
	var conv []fileRange
	var cow []cowRange
	var end int64
	n := 0
	for r := batch; r != nil; r = r.next {
		if n == 0 && r.next == nil {
			conv, cow = r.conv, r.cow // one request: no copy
		} else {
			conv = append(conv, r.conv...)
			cow = append(cow, r.cow...)
		}
		end = max(end, r.end)
		n++
	}
	if n > 1 {
		in.fs.counters.ConvsBatched.Add(int64(n - 1))
	}
	err := in.convertWritten(conv, cow, end, true)
	for r := batch; r != nil; {
		next := r.next
		r.next, r.err = nil, err
		ownDone = ownDone || r == own
		r.done <- struct{}{} // r may be reused from here on
		r = next
	}
	return ownDone
}
