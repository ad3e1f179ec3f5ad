package sluice

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/sluicefs/sluice/alloc"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/refcount"
)

// txn collects the metadata changes of one transaction. It is only used
// inside FS.transact, under commitMu.
type txn struct {
	fs  *FS
	kv  meta.Txn
	seq uint64 // the sequence number this transaction commits as
	// flushed are the inodes whose deferred record changes (inode.recs)
	// this transaction writes: cleared once it commits.
	flushed []*inode
}

// transact runs fn under commitMu and commits what it recorded, together
// with the allocator changes it made, as one metadata transaction (not
// synced: see the durability rules in the package doc).
//
// fn must make no in-core change it cannot keep if it returns an error, and
// the in-core changes it makes must be exactly what it records. If the
// commit itself fails, in-core state and metadata may disagree, so the file
// system shuts down (every later change fails) and the metadata on disk
// stays as it was: consistent.
//
// Preconditions: the caller holds the mu of every inode fn changes (lock
// order: inode.mu before commitMu).
func (fs *FS) transact(fn func(t *txn) error) error {
	if err := fs.writable(); err != nil {
		return err
	}
	fs.commitMu.Lock()
	defer fs.commitMu.Unlock()
	if err := fs.shutdownErr(); err != nil {
		return err
	}
	t := &txn{fs: fs, kv: fs.kv.NewTxn(), seq: fs.commit.seq + 1}
	if err := fn(t); err != nil {
		t.kv.Abort()
		// Allocator changes were undone by fn; drop nothing else.
		return err
	}
	fs.alloc.Changes(
		func(e alloc.Extent) { t.kv.Set(meta.FreeKey(uint64(e.Start)), meta.EncodeFree(e.Len)) },
		func(start alloc.BlockNum) { t.kv.Delete(meta.FreeKey(uint64(start))) },
	)
	if fs.sums != nil {
		// Every checksum set so far, so that no record can say a block
		// is written before its checksum is recorded (package checksum).
		fs.sums.Flush(t.kv.Set)
	}
	if t.kv.Len() == 0 {
		t.kv.Abort()
		return nil
	}
	if err := t.kv.Commit(false); err != nil {
		return fs.shutdownWith(fmt.Errorf("committing metadata: %w", err))
	}
	for _, in := range t.flushed {
		in.clearRecs()
	}
	fs.commit.seq = t.seq
	fs.committedSeq.Store(t.seq)
	fs.counters.MetaCommits.Add(1)
	return nil
}

// shutdownWith stops the file system after an unrecoverable error and
// returns the error every later change gets (EIO, wrapping ErrShutdown and
// the first cause).
func (fs *FS) shutdownWith(err error) error {
	var e error = &ioError{fmt.Errorf("%w: %w", ErrShutdown, err)}
	fs.shutdown.CompareAndSwap(nil, &e)
	return *fs.shutdown.Load()
}

// putInode records in's attributes.
func (t *txn) putInode(in *meta.Inode) { t.kv.Set(meta.InodeKey(in.Ino), meta.EncodeInode(in)) }

// putAttr records in's attributes (in.attr) and notes that its record is
// in this transaction (inode.metaSeq, committedSize).
//
// Preconditions: in.mu is held.
func (t *txn) putAttr(in *inode) {
	t.putInode(&in.attr)
	in.metaSeq, in.committedSize = t.seq, in.attr.Size
}

// extents returns a Recorder that writes in's extent-record changes, after
// the changes deferred in in.recs, which the transaction writes first (and
// clears once it commits), so that the records take every change in order.
//
// Preconditions: in.mu is held.
func (t *txn) extents(in *inode) extmap.Recorder {
	r := extentRecorder{t.kv, in.ino}
	in.metaSeq = t.seq
	if len(in.recs) > 0 && !slices.Contains(t.flushed, in) {
		for _, op := range in.recs {
			if op.del {
				r.Delete(op.fb)
			} else {
				t.kv.Set(meta.ExtentKey(in.ino, op.fb), meta.EncodeExtent(op.ext))
			}
		}
		t.flushed = append(t.flushed, in)
	}
	return r
}

type extentRecorder struct {
	kv  meta.Txn
	ino meta.Ino
}

func (r extentRecorder) Put(e extmap.Extent) {
	r.kv.Set(meta.ExtentKey(r.ino, e.FileBlock), meta.EncodeExtent(e.Persisted()))
}
func (r extentRecorder) Delete(fileBlock uint64) { r.kv.Delete(meta.ExtentKey(r.ino, fileBlock)) }

// freeBlocks gives up one reference on each block of the device ranges rs
// (the extent records that mapped them are gone): staging blocks leave the
// staging set, shared blocks lose a reference (package refcount), and the
// blocks left with none go back to the allocator, allocatable once this
// transaction is durable (busy extents).
func (t *txn) freeBlocks(rs []extmap.DevRange) error {
	fs := t.fs
	for _, r := range rs {
		staged, rest := fs.shared.SplitStaged(refcount.Range{Start: r.Start, Len: r.Len}, nil, nil)
		for _, s := range staged {
			fs.shared.Unstage(s, t.refs())
			if err := t.free(s); err != nil {
				return err
			}
		}
		for _, x := range rest {
			if !fs.shared.Any() {
				if err := t.free(x); err != nil {
					return err
				}
				continue
			}
			for _, f := range fs.shared.Drop(x, t.seq, t.refs()) {
				if err := t.free(f); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// remapped settles a copy-on-write whose record now maps r.New (extmap
// MarkDurable, Unconvert): the new blocks leave the staging set, and the
// old ones lose the reference the record held.
func (t *txn) remapped(r extmap.Remapping) error {
	t.fs.shared.Unstage(refcount.Range{Start: r.New.Start, Len: r.New.Len}, t.refs())
	return t.freeBlocks([]extmap.DevRange{r.Old})
}

// free returns blocks no record maps any more to the allocator.
func (t *txn) free(r refcount.Range) error {
	if err := t.fs.alloc.Free(alloc.Extent{Start: alloc.BlockNum(r.Start), Len: r.Len}, t.seq); err != nil {
		return fmt.Errorf("freeing blocks: %w", err)
	}
	return nil
}

// refs returns a Recorder that writes the shared-block table's record
// changes (package refcount) into the transaction.
func (t *txn) refs() refcount.Recorder { return refRecorder{t.kv} }

type refRecorder struct{ kv meta.Txn }

func (r refRecorder) PutShared(x refcount.Run) {
	r.kv.Set(meta.SharedKey(x.Start), meta.EncodeShared(x.Len, x.Refs))
}
func (r refRecorder) DeleteShared(start uint64) { r.kv.Delete(meta.SharedKey(start)) }
func (r refRecorder) PutStaged(x refcount.Range) {
	r.kv.Set(meta.StagedKey(x.Start), meta.EncodeStaged(x.Len))
}
func (r refRecorder) DeleteStaged(start uint64) { r.kv.Delete(meta.StagedKey(start)) }

// allocIno hands out a new inode number and records the superblock.
func (t *txn) allocIno() meta.Ino {
	fs := t.fs
	ino := fs.commit.nextIno
	fs.commit.nextIno++
	sb := *fs.vol.Super
	sb.NextIno = fs.commit.nextIno
	t.kv.Set(meta.SuperKey(), meta.EncodeSuperblock(&sb))
	return ino
}

// markDirty notes that in's in-core state is ahead of the metadata, so the
// next sync point persists it.
func (fs *FS) markDirty(in *inode) {
	fs.dirty.mu.Lock()
	fs.dirty.set[in] = struct{}{}
	fs.dirty.mu.Unlock()
}

// syncPoint makes every write that completed before it started, and every
// committed metadata change, durable:
//
//  1. take E = the current conversion epoch and advance it;
//  2. flush the data device (data first);
//  3. for every dirty inode, persist its attributes and mark its
//     conversions stamped <= E written (metadata that exposes the data);
//  4. sync the metadata, then let the allocator hand out blocks freed by
//     now-durable transactions.
//
// It is run by groupSync, one at a time.
func (fs *FS) syncPoint() error {
	if err := fs.writable(); err != nil {
		return err
	}
	epoch := fs.convEpoch.Add(1) - 1
	if err := fs.flushDevice(); err != nil {
		return err
	}
	fs.dirty.mu.Lock()
	inodes := make([]*inode, 0, len(fs.dirty.set))
	for in := range fs.dirty.set {
		inodes = append(inodes, in)
	}
	fs.dirty.mu.Unlock()
	sort.Slice(inodes, func(i, j int) bool { return inodes[i].ino < inodes[j].ino })
	for _, in := range inodes {
		if err := in.persist(epoch); err != nil {
			return err
		}
	}
	fs.commitMu.Lock()
	seq := fs.commit.seq
	fs.commitMu.Unlock()
	if err := fs.kv.Sync(); err != nil {
		return fs.shutdownWith(fmt.Errorf("syncing metadata: %w", err))
	}
	fs.syncedSeq.Store(seq)
	fs.alloc.Unbusy(seq)
	fs.shared.Unrelease(seq)
	fs.counters.SyncPoints.Add(1)
	return nil
}

// flushDevice flushes the data device. A failed flush shuts the file
// system down: nothing is known about which completed writes survived, and
// a later flush would not make up for it (marking their conversions
// durable, or reporting a later fsync as success, could expose stale
// blocks or lose acknowledged data).
func (fs *FS) flushDevice() error {
	if err := device.Flush(fs.dev); err != nil {
		return fs.shutdownWith(fmt.Errorf("device flush failed: %w", err))
	}
	return nil
}

// groupSync shares sync points between concurrent callers: a caller joins
// the next round; the first caller of a round to find no round running
// runs it for everyone who joined before it started (group commit).
type groupSync struct {
	do     func() error
	serial bool // NoGroupCommit: every caller runs its own round
	mu     lockrank.Mutex[lockrank.Leaf]
	cond   sync.Cond
	// Protected by mu.
	running  bool
	next     *syncRound
	serialMu lockrank.Mutex[lockrank.SyncSerial]
}

type syncRound struct {
	finished bool
	err      error
}

func (g *groupSync) init(do func() error, serial bool) {
	g.do, g.serial = do, serial
	g.cond.L = &g.mu
	g.next = &syncRound{}
}

func (g *groupSync) sync() error {
	// A sync point takes inode mutexes and the commit lock (and this
	// goroutine may run it).
	lockrank.Wait(lockrank.RankInodeMu, 0, nil)
	if g.serial {
		g.serialMu.Lock()
		defer g.serialMu.Unlock()
		return g.do()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.next
	for !r.finished {
		if !g.running {
			g.running = true
			g.next = &syncRound{}
			g.mu.Unlock()
			err := g.do()
			g.mu.Lock()
			r.err, r.finished = err, true
			g.running = false
			g.cond.Broadcast()
			break
		}
		g.cond.Wait()
	}
	return r.err
}
