package sluice

import (
	"errors"
	"syscall"

	"github.com/sluicefs/sluice/alloc"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// Block allocation, for every path that maps holes: allocateLocked maps
// holes to new unwritten extents (direct writes, writeback, fallocate),
// allocNear takes blocks from the allocator, and the delayed-allocation
// reservations of buffered writes (reserveDelalloc) are consumed by
// writeback or given back. It calls no path: only the allocator, the extent
// map and the metadata (the transaction it is given, and a sync when every
// free block is busy).

// allocateLocked maps every hole in file blocks [first, first+n) to newly
// allocated device blocks, as unwritten extents, recording the changes in
// t. reserved says how many of the holes' blocks the caller already holds
// a reservation for (delayed allocation); that reservation is used up,
// or on error given back. On error nothing else in core has changed.
//
// Preconditions: in.mu is held; called inside fs.transact.
func (in *inode) allocateLocked(t *txn, first, n, reserved uint64) error {
	fs := in.fs
	m := in.ext
	segs := m.Lookup(first, n, nil)
	var need uint64
	for _, s := range segs {
		if s.Hole {
			need += s.Len
		}
	}
	if need == 0 {
		return nil
	}
	reserved = min(reserved, need)
	if err := fs.alloc.Reserve(need - reserved); err != nil {
		_ = fs.alloc.Unreserve(reserved)
		return syscall.ENOSPC
	}
	var done []extmap.Extent
	undo := func() {
		for _, e := range done {
			m.Remove(e.FileBlock, e.Len, nil)
			_ = fs.alloc.Cancel(allocExtent(e.DevBlock, e.Len))
		}
	}
	rec := t.extents(in)
	for _, s := range segs {
		if !s.Hole {
			continue
		}
		fb, left := s.FileBlock, s.Len
		for left > 0 {
			e, err := fs.allocNear(in.allocHint(fb), left)
			if err != nil {
				_ = fs.alloc.Unreserve(left + holesAfter(segs, s))
				undo()
				return err
			}
			x := extmap.Extent{FileBlock: fb, DevBlock: uint64(e.Start), Len: e.Len, State: meta.Unwritten}
			if err := m.Insert(x, rec); err != nil {
				_ = fs.alloc.Cancel(e)
				undo()
				return eio(err)
			}
			done = append(done, x)
			fs.counters.BlocksAllocated.Add(int64(e.Len))
			fb += e.Len
			left -= e.Len
		}
	}
	t.putAttr(in)
	in.attrDirty = false
	return nil
}

// holesAfter sums the hole lengths in segs after segment s.
func holesAfter(segs []extmap.Segment, s extmap.Segment) uint64 {
	var n uint64
	for _, x := range segs {
		if x.Hole && x.FileBlock > s.FileBlock {
			n += x.Len
		}
	}
	return n
}

// allocHint returns the device block a new extent at file block fb should
// start at to stay contiguous with the file's previous block.
//
// Preconditions: in.mu is held.
func (in *inode) allocHint(fb uint64) uint64 {
	if fb > 0 {
		var one [1]extmap.Segment
		if s := in.ext.Lookup(fb-1, 1, one[:0]); len(s) == 1 && !s[0].Hole {
			return s[0].DevBlock + 1
		}
	}
	if end, ok := in.ext.LastBlock(); ok && end > 0 {
		var one [1]extmap.Segment
		if s := in.ext.Lookup(end-1, 1, one[:0]); len(s) == 1 && !s[0].Hole {
			return s[0].DevBlock + 1
		}
	}
	// Spread files over the device so that files written at once do not
	// interleave their blocks.
	span := in.fs.devBlocks - in.fs.dataStart
	return in.fs.dataStart + (uint64(in.ino)*2654435761)%span
}

// allocNear allocates up to want blocks from the caller's reservation,
// near hint. When every free block is busy (freed by transactions not yet
// durable), it makes them durable and retries.
//
// Preconditions: called inside fs.transact (commitMu held).
func (fs *FS) allocNear(hint, want uint64) (alloc.Extent, error) {
	if hint < fs.dataStart || hint >= fs.devBlocks {
		hint = fs.dataStart
	}
	e, err := fs.alloc.AllocReserved(alloc.BlockNum(hint), want)
	if errors.Is(err, alloc.ErrBusy) {
		if serr := fs.kv.Sync(); serr != nil {
			return e, eio(serr)
		}
		fs.alloc.Unbusy(fs.commit.seq)
		fs.shared.Unrelease(fs.commit.seq)
		e, err = fs.alloc.AllocReserved(alloc.BlockNum(hint), want)
	}
	if err != nil {
		return e, errnof(syscall.ENOSPC, "allocating %d blocks: %v", want, err)
	}
	return e, nil
}

func allocExtent(dev, n uint64) alloc.Extent {
	return alloc.Extent{Start: alloc.BlockNum(dev), Len: n}
}

// reserveDelalloc reserves space for file block blk, which a buffered
// write is about to dirty, if it is a hole not reserved yet (delayed
// allocation): a buffered write gets ENOSPC now rather than its writeback
// later. It reports whether it made a new reservation, which the writer
// gives back (unreserveDelalloc) if it then dirties nothing.
func (in *inode) reserveDelalloc(blk uint64) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.delalloc[blk]; ok {
		return false, nil
	}
	m, err := in.extentsLocked()
	if err != nil {
		return false, err
	}
	var one [1]extmap.Segment
	if s := m.Lookup(blk, 1, one[:0]); !s[0].Hole {
		return false, nil
	}
	if err := in.fs.alloc.Reserve(1); err != nil {
		return false, syscall.ENOSPC
	}
	if in.delalloc == nil {
		in.delalloc = map[uint64]struct{}{}
	}
	in.delalloc[blk] = struct{}{}
	return true, nil
}

// unreserveDelalloc gives back the reservation reserveDelalloc just made
// for blk, when the write that asked for it dirtied nothing (it failed,
// or a NOWAIT write gave up): no dirty page of blk needs it, since the
// reservation was new and buffered writes hold the I/O lock exclusive.
func (in *inode) unreserveDelalloc(blk uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.takeDelallocLocked(blk) {
		_ = in.fs.alloc.Unreserve(1)
	}
}

// takeDelallocLocked reports whether blk held a reservation, and forgets
// it (the caller's allocation consumes it).
//
// Preconditions: in.mu is held.
func (in *inode) takeDelallocLocked(blk uint64) bool {
	if _, ok := in.delalloc[blk]; ok {
		delete(in.delalloc, blk)
		return true
	}
	return false
}

// releaseDelalloc gives back the reservations of blocks >= from (their
// dirty pages were dropped: truncate, unlink).
func (in *inode) releaseDelalloc(from uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var n uint64
	for blk := range in.delalloc {
		if blk >= from {
			delete(in.delalloc, blk)
			n++
		}
	}
	if n > 0 {
		_ = in.fs.alloc.Unreserve(n)
	}
}
