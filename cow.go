package sluice

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/refcount"
)

// Copy-on-write, the mechanism under every write into a shared block (a
// block two extent records map: reflink, package refcount). A shared block
// is never written in place: its new contents go to staging blocks
// (refcount's staging set, XFS's CoW fork), and once they are on the device
// the file's extent is remapped to them in core, as a pending remap (extmap
// Remap): reads see the new blocks at once, but the extent record keeps
// mapping the shared blocks until a sync point's device flush has made the
// new data durable; then MarkDurable switches the record, and persist drops
// the old blocks' reference and unstages the new ones in the same
// transaction. So a crash shows the old data or the new, never the staging
// blocks' stale bytes, and a write into a shared block costs what a write
// into unwritten blocks costs: no device flush and no commit (the remap,
// as a conversion, changes no record's content before the sync point, so
// its record splits wait for it: convertWrittenLocked).
//
// Two routes lead here. An aligned direct write stages whole blocks and
// writes the caller's data there (planWrite, under the shared I/O lock, its
// shared blocks held in the block-range lock so that two writes of one
// shared block take turns); every other write copies first: unshareLocked
// reads the shared blocks, writes them to staging blocks and remaps, under
// the exclusive I/O lock, and the write then finds blocks of its own
// (sub-block direct writes, buffered writes, in-place zeroing, and
// FALLOC_FL_UNSHARE_RANGE). Writeback and direct planning refuse to write
// a shared block in place (errSharedInPlace): the routes above make that
// unreachable.
//
// Staging blocks are allocated ahead, cowChunkBlocks at a time, in one
// transaction that records them staged (FS.cow), so that a write rarely
// commits for its staging; blocks a crash leaves staged are freed at the
// next open (recoverStaging, as xfs_reflink_recover_cow), and Close frees
// those never handed out.

// cowChunkBlocks is how many staging blocks a refill allocates at least.
const cowChunkBlocks = 256

// cowRange is one run of a copy-on-write: file blocks [fb, fb+n) written
// to the staging blocks from dev, to be remapped once the data is on the
// device.
type cowRange struct{ fb, n, dev uint64 }

// cowPool holds staging blocks allocated ahead and not yet handed to a
// write. They are in the staging set (staged records), so a crash frees
// them at the next open.
type cowPool struct {
	mu lockrank.Mutex[lockrank.Leaf]
	// free holds the pool's runs. Protected by mu.
	free []refcount.Range
}

// take moves up to n blocks from the pool to out and returns how many.
func (p *cowPool) take(n uint64, out []refcount.Range) ([]refcount.Range, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var got uint64
	for got < n && len(p.free) > 0 {
		r := &p.free[len(p.free)-1]
		k := min(r.Len, n-got)
		out = append(out, refcount.Range{Start: r.Start, Len: k})
		r.Start += k
		r.Len -= k
		got += k
		if r.Len == 0 {
			p.free = p.free[:len(p.free)-1]
		}
	}
	return out, got
}

// has reports whether the pool holds n blocks now (a NOWAIT write takes
// them only if no refill, a transaction, is needed; a racing taker may
// still leave it short, and the refill then runs).
func (p *cowPool) has(n uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var got uint64
	for _, r := range p.free {
		got += r.Len
	}
	return got >= n
}

// cowBlocks returns how many blocks segs cover.
func cowBlocks(segs []extmap.Segment) uint64 {
	var n uint64
	for _, s := range segs {
		n += s.Len
	}
	return n
}

// put adds runs to the pool.
func (p *cowPool) put(rs []refcount.Range) {
	p.mu.Lock()
	// Last in, first out: take hands out the runs put last, from their
	// start, so a file's consecutive copies stay consecutive on the device.
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Len > 0 {
			p.free = append(p.free, rs[i])
		}
	}
	p.mu.Unlock()
}

// returnStaging gives the staging blocks of cow back to the pool: the
// write they were taken for failed, and nothing maps them.
func (fs *FS) returnStaging(cow []cowRange) {
	rs := make([]refcount.Range, len(cow))
	for i, c := range cow {
		rs[i] = refcount.Range{Start: c.dev, Len: c.n}
	}
	fs.cow.put(rs)
}

// drain empties the pool and returns its runs.
func (p *cowPool) drain() []refcount.Range {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := p.free
	p.free = nil
	return rs
}

// takeStaging returns staging blocks for n file blocks, as device runs
// that add up to n, refilling the pool (one transaction) when it runs
// short. hint is where new staging blocks should go.
//
// Preconditions: commitMu is not held (in.mu may be).
func (fs *FS) takeStaging(n, hint uint64) ([]refcount.Range, error) {
	out, got := fs.cow.take(n, nil)
	for got < n {
		if err := fs.refillStaging(n-got, hint); err != nil {
			fs.cow.put(out)
			return nil, err
		}
		var more uint64
		out, more = fs.cow.take(n-got, out)
		got += more
	}
	fs.counters.CowStagedBlocks.Add(int64(n))
	return out, nil
}

// refillStaging allocates at least need blocks (cowChunkBlocks if there is
// room) near hint, records them staged and adds them to the pool.
func (fs *FS) refillStaging(need, hint uint64) error {
	want := max(need, cowChunkBlocks)
	return fs.transact(func(t *txn) error {
		if fs.alloc.Reserve(want) != nil {
			want = need
			if fs.alloc.Reserve(want) != nil {
				return errnof(syscall.ENOSPC, "allocating %d copy-on-write blocks", need)
			}
		}
		var got []refcount.Range
		for left := want; left > 0; {
			e, err := fs.allocNear(hint, left)
			if err != nil {
				_ = fs.alloc.Unreserve(left)
				for _, g := range got {
					_ = fs.alloc.Cancel(allocExtent(g.Start, g.Len))
				}
				return err
			}
			got = append(got, refcount.Range{Start: uint64(e.Start), Len: e.Len})
			left -= e.Len
			hint = uint64(e.Start) + e.Len
		}
		for _, g := range got {
			fs.shared.Stage(g, t.refs())
		}
		fs.cow.put(got)
		fs.counters.CowRefills.Add(1)
		return nil
	})
}

// ReleaseStagingPool gives the staging blocks allocated ahead for
// copy-on-write (and for untorn and checksummed writes) back to free space,
// as Close does: for tools and tests that compare free space before and
// after some writes.
func (fs *FS) ReleaseStagingPool() error {
	if err := fs.writable(); err != nil {
		return err
	}
	return fs.releaseStaging()
}

// releaseStaging frees the staging blocks the pool holds (Close).
func (fs *FS) releaseStaging() error { return fs.freeStaging(fs.cow.drain()) }

// recoverStaging frees every staging block at open: none is handed to a
// write yet, so they are what a crash left between a copy-on-write's data
// and its remap's durability (xfs_reflink_recover_cow).
func (fs *FS) recoverStaging() error { return fs.freeStaging(fs.shared.StagedRanges()) }

// freeStaging frees staging blocks no write holds, in one transaction.
func (fs *FS) freeStaging(rs []refcount.Range) error {
	if len(rs) == 0 {
		return nil
	}
	return fs.transact(func(t *txn) error {
		for _, r := range rs {
			if err := t.freeBlocks([]extmap.DevRange{{Start: r.Start, Len: r.Len}}); err != nil {
				return err
			}
		}
		return nil
	})
}

// errSharedInPlace is what a write path returns if it ever meets a shared
// block it would write in place (the routes above make it unreachable; it
// is counted as SharedWriteRefused).
var errSharedInPlace = errors.New("sluice: refusing to write a shared block in place")

func (fs *FS) sharedInPlace(what string, in *inode, fb uint64) error {
	fs.counters.SharedWriteRefused.Add(1)
	return eio(fmt.Errorf("%s of inode %d, file block %d: %w", what, in.ino, fb, errSharedInPlace))
}

// sharing reports whether some block of the file may be shared, loading
// its extents if needed: one atomic load when the volume shares nothing.
func (in *inode) sharing() bool {
	if !in.fs.shared.Any() {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sharingLocked()
}

// sharingLocked is sharing with in.mu held.
//
// Preconditions: in.mu is held.
func (in *inode) sharingLocked() bool {
	if !in.fs.shared.Any() {
		return false
	}
	if _, err := in.extentsLocked(); err != nil {
		return true // let the path that loads them report the error
	}
	return in.mayShare
}

// noteSharingLocked sets in.mayShare if an extent of m maps a shared
// block: at load, when some block of the volume is shared.
//
// Preconditions: in.mu is held.
func (in *inode) noteSharingLocked(m *extmap.Map) {
	if in.mayShare || !in.fs.shared.Any() {
		return
	}
	for _, e := range m.Extents() {
		if e.State == meta.Written && in.fs.shared.Shared(refcount.Range{Start: e.DevBlock, Len: e.Len}) {
			in.mayShare = true
			return
		}
	}
}

// sharedSegs returns the file blocks of [first, first+n) that map shared
// blocks, as segments (their DevBlock the shared blocks).
//
// Preconditions: in.mu is held; the extents are loaded.
func (in *inode) sharedSegsLocked(first, n uint64) []extmap.Segment {
	if !in.sharingLocked() {
		return nil
	}
	var out []extmap.Segment
	var rs []refcount.Range
	for _, s := range in.ext.Lookup(first, n, nil) {
		if s.Hole || s.State != meta.Written {
			continue
		}
		rs = in.fs.shared.SharedRanges(refcount.Range{Start: s.DevBlock, Len: s.Len}, rs[:0])
		for _, r := range rs {
			out = append(out, extmap.Segment{FileBlock: s.FileBlock + (r.Start - s.DevBlock), Len: r.Len, DevBlock: r.Start, State: meta.Written})
		}
	}
	return out
}

// sharedIn reports whether some block of [first, first+n) maps a shared
// block.
func (in *inode) sharedIn(first, n uint64) (bool, error) {
	if !in.fs.shared.Any() {
		return false, nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, err := in.extentsLocked(); err != nil {
		return false, err
	}
	return len(in.sharedSegsLocked(first, n)) > 0, nil
}

// unshareRange copies the shared blocks of the byte range [off, end) to
// blocks of the file's own (unshareLocked): what every write that is not
// an aligned direct write does before it writes in place.
//
// Preconditions: in.io is held exclusive and direct I/O is drained.
func (in *inode) unshareRange(off, end int64) error {
	if off >= end || !in.fs.shared.Any() {
		return nil
	}
	first, n := in.fs.blockRange(off, end)
	return in.unshareLocked(first, n)
}

// unshareLocked makes the file's blocks [first, first+n) its own: each run
// of shared blocks is read, written to staging blocks and remapped (a
// pending remap: the record switches at the next sync point). Holes,
// unwritten and unshared blocks are left alone. Cached pages stay valid:
// the contents do not change.
//
// Preconditions: in.io is held exclusive (the name's Locked) and direct
// I/O is drained.
func (in *inode) unshareLocked(first, n uint64) error {
	fs := in.fs
	in.mu.Lock()
	if _, err := in.extentsLocked(); err != nil {
		in.mu.Unlock()
		return err
	}
	segs := in.sharedSegsLocked(first, n)
	in.mu.Unlock()
	bs := fs.blockSize
	for _, s := range segs {
		for done := uint64(0); done < s.Len; {
			// At most 1 MiB at a time: the bounce buffer.
			k := min(s.Len-done, uint64(max(1, (1<<20)/bs)))
			fb, old := s.FileBlock+done, s.DevBlock+done
			stage, err := fs.takeStaging(k, old)
			if err != nil {
				return err
			}
			buf := device.AlignedBuf(int(int64(k) * bs))
			if err := in.readVerified(buf, old, int64(fb)*bs); err != nil {
				fs.cow.put(stage)
				return err
			}
			var cow []cowRange
			at := uint64(0)
			b := newBatch(fs)
			for _, r := range stage {
				b.add(device.OpWrite, buf[int64(at)*bs:int64(at+r.Len)*bs], int64(r.Start)*bs)
				cow = append(cow, cowRange{fb: fb + at, n: r.Len, dev: r.Start})
				at += r.Len
			}
			if err := b.run(); err != nil {
				fs.cow.put(stage)
				return eio(err)
			}
			if err := in.convertWritten(nil, cow, 0, false); err != nil {
				return err
			}
			fs.counters.CowCopiedBlocks.Add(int64(k))
			done += k
		}
	}
	return nil
}

// settleRemaps makes the remaps that persist at the next sync point
// durable now: the operations that move or swap extent records as they
// are (clone, exchange) want records that say what the file holds.
func (in *inode) settleRemaps() error {
	in.mu.Lock()
	pending := in.ext != nil && in.ext.Pending()
	in.mu.Unlock()
	if !pending {
		return nil
	}
	return in.fs.group.sync()
}
