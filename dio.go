package sluice

import (
	"errors"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
)

// The direct-I/O path: seeds 001 (shared-lock direct reads) and 000
// (optimistic unaligned direct writes). See the package doc for the lock
// rules and the completion order, and the iolock package doc for the table
// of which operation takes which mode.
//
// Each direction reads top-down: the entry (directRead, directWrite), the
// lock route (directWriteAligned, directWriteUnaligned), submission
// (submitDirectWrite), planning and allocation (planWrite), then the
// completion (dioOp.batchDone, finishDirectWrite). Below it are only
// mechanisms: writechecks.go, invalidate.go, allocate.go, convert.go,
// request.go, lockio.go, geometry.go.

// directRead is the O_DIRECT read path (analogous to xfs_file_dio_read
// and iomap_dio_rw).
//
// Concurrent policy: the I/O lock is taken shared, so readers never queue
// behind each other; dirty cached pages of the range are written back
// first. Classic policy (before seed 001): the lock is taken exclusive,
// which waits for every in-flight direct I/O, the file's cached pages are
// written back and dropped, and the lock is demoted to shared for the read.
//
// Either way the lock is dropped once the device reads are submitted; the
// in-flight count (in.dio) keeps truncate and punch out until they
// complete. Holes and unwritten extents read as zeros without device I/O;
// the result is clipped to the size sampled at submission.
func (in *inode) directRead(k *kiocb) (int, error) {
	fs := in.fs
	if len(k.buf) == 0 {
		return 0, nil
	}
	// Alignment is checked, as by iomap, only once the read is known to
	// reach mapped blocks: reads at or past EOF return 0, and reads of
	// holes return zeros, whatever their alignment.
	misaligned := fs.checkDirect(k.buf, k.off)
	fs.counters.DirectReads.Add(1)
	// The size the read is clipped to, sampled before the range's dirty
	// pages are written back (or, classic, before the lock is demoted): a
	// parallel buffered append may publish its size meanwhile with its
	// bytes in the cache only, and the read must not reach past what it
	// wrote back.
	size := int64(-1)
	if fs.policy.SharedDirectReads {
		if err := in.lockIO(iolock.Shared, k.nowait); err != nil {
			return 0, err
		}
		fs.counters.LockSharedDirectRead.Add(1)
		size = in.size()
		if err := in.writebackRange(k.off, k.off+int64(len(k.buf)), k.nowait); err != nil {
			in.io.Unlock(iolock.Shared)
			return 0, err
		}
	} else {
		if err := in.lockIO(iolock.Exclusive, k.nowait); err != nil {
			return 0, err
		}
		fs.counters.LockExclDirectRead.Add(1)
		if k.nowait && in.dio.InFlight() > 0 {
			in.io.Unlock(iolock.Exclusive)
			return 0, fs.nowaitEAGAIN(nwDrain)
		}
		if k.nowait && in.cachedInRange(0, maxFileSize) {
			in.io.Unlock(iolock.Exclusive)
			return 0, fs.nowaitEAGAIN(nwCachedPages)
		}
		in.drain()
		if err := in.invalidateRange(0, maxFileSize); err != nil {
			in.io.Unlock(iolock.Exclusive)
			return 0, err
		}
		// Before the demote: appends may run, and publish, after it.
		size = in.size()
		in.io.Demote()
	}
	// From here the lock is held shared.
	in.mu.Lock()
	if size < 0 {
		size = int64(in.attr.Size)
	}
	if k.off >= size {
		in.mu.Unlock()
		in.io.Unlock(iolock.Shared)
		return 0, nil
	}
	n := min(int64(len(k.buf)), size-k.off)
	span := roundUp(n, fs.ioUnit)
	if misaligned != nil {
		span = n
	}
	m, err := in.extentsLocked()
	if err != nil {
		in.mu.Unlock()
		in.io.Unlock(iolock.Shared)
		return 0, err
	}
	first, nb := fs.blockRange(k.off, k.off+span)
	op := newDioOp(in, k)
	segs := m.Lookup(first, nb, op.segs[:0])
	in.mu.Unlock()
	if misaligned != nil {
		for _, s := range segs {
			if !s.Hole && s.State == meta.Written {
				in.io.Unlock(iolock.Shared)
				op.free()
				return 0, misaligned
			}
		}
	}

	b := &op.b
	for _, s := range segs {
		lo, hi := fs.clip(s, k.off, k.off+span)
		part := k.buf[lo-k.off : hi-k.off]
		if s.Hole || s.State != meta.Written {
			clear(part)
			fs.counters.DirectZeroFill.Add(1)
			continue
		}
		b.addRead(in, lo, part, fs.devOffset(s, lo))
	}
	if len(b.reqs) == 0 {
		in.io.Unlock(iolock.Shared)
		op.free()
		return int(n), nil
	}
	op.n = int(n)
	async := k.done != nil
	in.dioBegin()
	b.submit()
	in.io.Unlock(iolock.Shared)
	if async {
		return 0, errQueued // op belongs to the completion now
	}
	return op.wait()
}

// directWrite is the O_DIRECT write path (xfs_file_dio_write): aligned
// writes (whole blocks) and sub-block writes take different routes.
func (in *inode) directWrite(k *kiocb) (int, error) {
	fs := in.fs
	if len(k.buf) == 0 {
		return 0, nil
	}
	off := k.off
	if k.append {
		off = 0 // replaced by EOF in writeChecks, which checks it
	}
	if err := fs.checkDirect(k.buf, off); err != nil {
		return 0, err
	}
	fs.counters.DirectWrites.Add(1)
	if (off|int64(len(k.buf)))&(fs.blockSize-1) != 0 {
		return in.directWriteUnaligned(k)
	}
	return in.directWriteAligned(k)
}

// directWriteAligned writes whole blocks (xfs_file_dio_write_aligned): the
// lock is shared unless the write checks need exclusive (a gap past EOF
// to zero, privileges to strip, an append), and only appends keep it
// exclusive during the I/O.
func (in *inode) directWriteAligned(k *kiocb) (int, error) {
	fs := in.fs
	mode := iolock.Shared
	if k.append {
		mode = iolock.Exclusive
	}
	if err := in.lockIO(mode, k.nowait); err != nil {
		return 0, err
	}
	if k.append && fs.policy.ParallelAppends {
		in.drain() // parallel appends in flight move EOF until published
	}
	mode, err := in.writeChecks(k, mode)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	if mode == iolock.Exclusive && !k.append {
		in.io.Demote()
		mode = iolock.Shared
	}
	if mode == iolock.Shared {
		fs.counters.LockSharedDirectWrite.Add(1)
	} else {
		fs.counters.LockExclDirectWrite.Add(1)
	}
	// Shared blocks are written out of place (planWrite), their range
	// held until the remap, so that two writes of one shared block take
	// turns: the second finds it remapped, and writes it in place.
	var rng *iolock.Range
	first, nb := fs.blockRange(k.off, k.off+int64(len(k.buf)))
	if in.writesOutOfPlace(k) {
		// Untorn, or checksummed: every written block goes out of place
		// (atomic.go, sums.go), the range held until the remap, as for
		// shared blocks.
		if k.append && k.off&(fs.blockSize-1) != 0 {
			// An append at an EOF inside a block (its route was taken
			// from its length): the sub-block exclusive route reads the
			// rest of the EOF block (widenToBlocks).
			if k.nowait {
				in.io.Unlock(mode)
				return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
			}
			return in.submitExclusive(k)
		}
		if k.atomic && k.nowait {
			in.io.Unlock(mode)
			return 0, fs.nowaitEAGAIN(nwAllocate)
		}
		if rng = in.lockRange(first, nb, k.nowait); rng == nil {
			in.io.Unlock(mode)
			return 0, fs.nowaitEAGAIN(nwRangeBusy)
		}
		fs.counters.LockRangeCow.Add(1)
	} else if shared, err := in.sharedIn(first, nb); err != nil || shared {
		if err == nil && k.append && k.off&(fs.blockSize-1) != 0 {
			// An append is routed by its length: its offset, EOF, is
			// known only after the checks (as the kernel's ki_pos). At an
			// EOF inside a shared block it writes part of that block,
			// which only a copy makes its own: the sub-block exclusive
			// route, under the exclusive lock the append holds, which
			// a NOWAIT caller does not take.
			if k.nowait {
				in.io.Unlock(mode)
				return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
			}
			return in.submitExclusive(k)
		}
		if err == nil && k.nowait {
			err = fs.nowaitEAGAIN(nwAllocate)
		}
		if err != nil {
			in.io.Unlock(mode)
			return 0, err
		}
		rng = in.ranges.Lock(first, nb)
		fs.counters.LockRangeCow.Add(1)
	}
	// An append keeps the lock exclusive until its size is published, so
	// that the next appender sees it: appenders never overlap.
	return in.submitDirectWrite(k, mode, k.append, rng)
}

// directWriteUnaligned writes a sub-block range
// (xfs_file_dio_write_unaligned, seed 000).
//
// Concurrent policy: a write that lies within EOF first runs under the
// shared lock in overwrite-only mode: if its range is not covered by one
// written extent (so that it would allocate, convert an unwritten extent or
// zero part of a block) it fails (errNeedExclusive, the kernel's -EAGAIN)
// before doing anything, then retries exclusive, drains in-flight direct I/O and completes
// synchronously. A write that extends the file or touches its EOF block
// goes exclusive at once. Classic policy: every sub-block write is
// exclusive + drain + synchronous. NOWAIT callers get EAGAIN wherever the
// exclusive route would be needed.
func (in *inode) directWriteUnaligned(k *kiocb) (int, error) {
	fs := in.fs
	if fs.sums != nil {
		// Checksummed: blocks are written whole, never in place
		// (sums.go); the exclusive route reads the rest of them.
		if k.nowait {
			return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
		}
	} else if fs.policy.BlockRangeExclusion && !k.append {
		n, err := in.directWriteRange(k)
		if err != errNeedExclusive {
			return n, err
		}
		// It extends the file.
		if k.nowait {
			return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
		}
	} else if fs.policy.OptimisticUnalignedWrites && !k.append {
		size := in.size()
		end := k.off + int64(len(k.buf))
		if k.off <= size && end < size {
			n, err := in.directWriteOverwriteOnly(k)
			if err != errNeedExclusive {
				return n, err
			}
			if k.nowait {
				return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
			}
			fs.counters.UnalignedEAGAINRetries.Add(1)
		} else if k.nowait {
			return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
		}
	} else if k.nowait {
		return 0, fs.nowaitEAGAIN(nwSubBlockExcl)
	}
	// The exclusive route.
	in.io.Lock(iolock.Exclusive)
	fs.counters.LockExclUnaligned.Add(1)
	if k.append && fs.policy.ParallelAppends {
		in.drain() // parallel appends in flight move EOF until published
	}
	mode, err := in.writeChecks(k, iolock.Exclusive)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	return in.submitExclusive(k)
}

// submitExclusive is the exclusive route of a sub-block direct write, the
// I/O lock held exclusive and the write checks done: drain, copy the
// shared blocks it touches (unshareRange), submit, and hold the lock until
// completion.
func (in *inode) submitExclusive(k *kiocb) (int, error) {
	// This must be the only direct I/O in flight: a concurrent sub-block
	// write into the same unwritten block would zero our bytes (or we
	// theirs) before either conversion ran (IOMAP_DIO_FORCE_WAIT).
	in.drain()
	var err error
	if in.fs.sums != nil {
		err = in.widenToBlocks(k)
	} else {
		err = in.unshareRange(k.off, k.off+int64(len(k.buf)))
	}
	if err != nil {
		in.io.Unlock(iolock.Exclusive)
		return 0, err
	}
	return in.submitDirectWrite(k, iolock.Exclusive, true, nil)
}

// directWriteRange writes a sub-block range within EOF under block-range
// exclusion (Policy.BlockRangeExclusion; no kernel does this): the I/O lock
// is taken shared, and a write that is not a pure overwrite of one written
// extent (it must allocate, convert an unwritten extent or zero part of a
// block) locks the blocks it touches (in.ranges) until its conversion is
// done, instead of draining every direct I/O of the file under the
// exclusive lock. Two such writes into one block are so ordered, and the
// second finds the block written; writes into other blocks, and every
// other shared holder, go on. A pure overwrite takes no range, as seed
// 000's overwrite-only mode, unless it touches the EOF block while appends
// may run (see lockEOFBlock). A write that extends the file returns
// errNeedExclusive, with nothing done: the exclusive route takes it.
func (in *inode) directWriteRange(k *kiocb) (int, error) {
	fs := in.fs
	end := k.off + int64(len(k.buf))
	if end > in.size() { // unlocked, as the kernel's pos+count > i_size
		return 0, errNeedExclusive
	}
	if err := in.lockIO(iolock.Shared, k.nowait); err != nil {
		return 0, err
	}
	mode, err := in.writeChecks(k, iolock.Shared)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	if mode == iolock.Exclusive {
		// The checks took the lock exclusive (privileges to strip): the
		// exclusive route from here, as if it had been chosen at once.
		fs.counters.LockExclUnaligned.Add(1)
		return in.submitExclusive(k)
	}
	// The size only grows under the shared lock, so the write stays
	// within EOF.
	overwrite, eofBlock, shared, err := in.subBlockMapping(k.off, end)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	if shared {
		// A shared block is copied first, under the exclusive lock.
		in.io.Unlock(mode)
		return 0, errNeedExclusive
	}
	var rng *iolock.Range
	if !overwrite || in.lockEOFBlock(eofBlock) {
		first, nb := fs.blockRange(k.off, end)
		if rng = in.lockRange(first, nb, k.nowait); rng == nil {
			in.io.Unlock(mode)
			return 0, fs.nowaitEAGAIN(nwRangeBusy)
		}
		fs.counters.LockRangeUnaligned.Add(1)
	} else {
		fs.counters.LockSharedUnaligned.Add(1)
	}
	return in.submitDirectWrite(k, mode, false, rng)
}

// subBlockMapping reports whether [off, end), within EOF, lies in one
// written extent of blocks of the file's own (so a sub-block write there is
// a pure overwrite), whether it touches the block holding EOF when EOF is
// not block-aligned, and whether it touches a shared block (which only the
// exclusive route writes: it copies it first).
func (in *inode) subBlockMapping(off, end int64) (overwrite, eofBlock, shared bool, err error) {
	fs := in.fs
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return false, false, false, err
	}
	first, nb := fs.blockRange(off, end)
	var one [2]extmap.Segment
	segs := m.Lookup(first, nb, one[:0])
	shared = len(in.sharedSegsLocked(first, nb)) > 0
	overwrite = len(segs) == 1 && !segs[0].Hole && segs[0].State == meta.Written && !shared
	size := int64(in.attr.Size)
	eofBlock = size%fs.blockSize != 0 && uint64(size/fs.blockSize) < first+nb
	return overwrite, eofBlock, shared, nil
}

// lockEOFBlock reports whether a sub-block write that touches the EOF
// block must hold its blocks' range although it overwrites written blocks
// only: with parallel appends, a buffered append can hold the same block in
// a page and write it back whole, I/O unit by I/O unit, so the write and
// the append are ordered by the range (the append holds it until its size
// is published; the write then writes the page back and drops it before
// its own I/O).
func (in *inode) lockEOFBlock(eofBlock bool) bool {
	return eofBlock && in.fs.policy.ParallelAppends
}

// lockRange locks the file blocks [first, first+n), or with nowait only if
// they are free now (nil otherwise).
func (in *inode) lockRange(first, n uint64, nowait bool) *iolock.Range {
	if nowait {
		return in.ranges.TryLock(first, n)
	}
	return in.ranges.Lock(first, n)
}

// errNeedExclusive is the overwrite-only attempt's answer (the kernel's
// -EAGAIN from IOMAP_DIO_OVERWRITE_ONLY): the write must take the exclusive
// route. It never leaves the engine: directWriteUnaligned retries exclusive,
// or turns it into the NOWAIT EAGAIN.
var errNeedExclusive = errors.New("sluice: sub-block write needs the exclusive route")

// directWriteOverwriteOnly is the optimistic shared attempt of a sub-block
// write (IOMAP_DIO_OVERWRITE_ONLY): errNeedExclusive, with nothing done,
// unless the range lies within EOF and inside one written extent.
func (in *inode) directWriteOverwriteOnly(k *kiocb) (int, error) {
	fs := in.fs
	if err := in.lockIO(iolock.Shared, k.nowait); err != nil {
		return 0, err
	}
	fs.counters.LockSharedUnaligned.Add(1)
	mode, err := in.writeChecks(k, iolock.Shared)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	end := k.off + int64(len(k.buf))
	if end > in.size() {
		in.io.Unlock(mode)
		return 0, errNeedExclusive
	}
	ok, eofBlock, _, err := in.subBlockMapping(k.off, end)
	if err != nil {
		in.io.Unlock(mode)
		return 0, err
	}
	if !ok {
		in.io.Unlock(mode)
		return 0, errNeedExclusive
	}
	var rng *iolock.Range
	if mode == iolock.Shared && in.lockEOFBlock(eofBlock) {
		first, nb := fs.blockRange(k.off, end)
		if rng = in.lockRange(first, nb, k.nowait); rng == nil {
			in.io.Unlock(mode)
			return 0, fs.nowaitEAGAIN(nwRangeBusy)
		}
	}
	return in.submitDirectWrite(k, mode, mode == iolock.Exclusive, rng)
}

// submitDirectWrite maps the range (allocating holes as unwritten), drops
// cached pages, submits the device writes and arranges the completion.
// The lock is released after submission, or after completion when wait is
// set (the exclusive sub-block route and appends). A block range rng, if
// not nil, is released at completion, once the conversion is done (or
// here, on an error).
//
// Preconditions: in.io is held in mode; writeChecks ran.
func (in *inode) submitDirectWrite(k *kiocb, mode iolock.Mode, wait bool, rng *iolock.Range) (int, error) {
	fs := in.fs
	end := k.off + int64(len(k.buf))
	unlock := func() {
		if rng != nil {
			in.ranges.Unlock(rng)
		}
		in.io.Unlock(mode)
	}
	lo, hi := in.wholeBlocks(k.off, end)
	if k.nowait && in.cachedInRange(lo, hi) {
		// Invalidating cached pages may wait for their locks or their
		// writeback (kiocb_invalidate_pages gives -EAGAIN under NOWAIT).
		unlock()
		return 0, fs.nowaitEAGAIN(nwCachedPages)
	}
	if err := in.invalidateRange(lo, hi); err != nil {
		unlock()
		return 0, err
	}
	op := newDioOp(in, k)
	pbuf, poff := k.buf, k.off
	if k.rmw != nil {
		pbuf, poff = k.rmw, k.rmwOff
	}
	conv, err := in.planWrite(op, pbuf, poff, k.nowait, 0)
	if err != nil {
		unlock()
		op.free()
		return 0, err
	}
	op.write, op.off, op.end, op.conv, op.mode, op.holdLock = true, k.off, end, conv, mode, wait
	op.rng = rng
	async := k.done != nil
	in.dioBegin()
	if wait {
		in.io.Handoff() // finishWrite unlocks it
	}
	if rng != nil {
		in.ranges.Handoff(rng) // finishWrite unlocks it
	}
	op.b.submit()
	if !wait {
		in.io.Unlock(mode)
	}
	if async {
		return 0, errQueued // op belongs to the completion now
	}
	return op.wait()
}

// wholeBlocks returns [off, end) widened to whole blocks: the range whose
// cached pages a direct write writes back and drops before its I/O. A
// sub-block write into an unwritten block writes the whole block, zeros
// around its bytes (planWrite), so a dirty page of the same block outside
// its bytes (blocks larger than pages) must reach the device first: its
// writeback, racing the direct write, would write the whole block too,
// and the one landing last would wipe the other
// (TestTargetedDirectWriteVsWritebackOfOneBlock).
func (in *inode) wholeBlocks(off, end int64) (lo, hi int64) {
	bs := in.fs.blockSize
	return roundDown(off, bs), roundUp(end, bs)
}

// planWrite maps the byte range [off, off+len(buf)) for a direct write and
// adds the device writes to op's batch. Holes are allocated first, as unwritten
// extents, under the inode lock (never held across data-device I/O). Blocks in
// written extents get exactly the caller's bytes. Blocks in unwritten
// extents that the write covers only partly are written whole, with zeros
// around the caller's bytes (head and tail zeroing), from a bounce buffer.
// It returns the unwritten block ranges to convert at completion. With
// nowait, a hole gives EAGAIN (allocation may block). When it allocates,
// it also allocates the holes up to file block allocTo, if that is past
// the range (a parallel append allocating for the appends reserved after
// it, which would each commit an allocation of their own otherwise).
func (in *inode) planWrite(op *dioOp, buf []byte, off int64, nowait bool, allocTo uint64) ([]fileRange, error) {
	fs := in.fs
	b := &op.b
	end := off + int64(len(buf))
	first, nb := fs.blockRange(off, end)
	in.mu.Lock()
	m, err := in.extentsLocked()
	if err != nil {
		in.mu.Unlock()
		return nil, err
	}
	segs := m.Lookup(first, nb, op.segs[:0])
	// Sizes only grow while the write is in flight (truncate drains), so a
	// write within the size now needs no size update at completion.
	op.extends = end > int64(in.attr.Size)
	holes := false
	for _, s := range segs {
		holes = holes || s.Hole
	}
	if holes {
		if nowait {
			in.mu.Unlock()
			return nil, fs.nowaitEAGAIN(nwAllocate)
		}
		n := max(nb, allocTo-min(allocTo, first))
		err := fs.transact(func(t *txn) error { return in.allocateLocked(t, first, n, 0) })
		if err != nil {
			in.mu.Unlock()
			return nil, err
		}
		segs = m.Lookup(first, nb, segs[:0])
	}
	if in.writesOutOfPlace(op.k) {
		cow := cowSegsLocked(segs)
		if op.k.atomic && len(cow) == 0 {
			fs.counters.AtomicWritesInPlace.Add(1)
		} else if op.k.atomic {
			fs.counters.AtomicWritesOutOfPlace.Add(1)
		}
		if len(cow) > 0 {
			if nowait && !fs.cow.has(cowBlocks(cow)) {
				in.mu.Unlock()
				return nil, fs.nowaitEAGAIN(nwAllocate)
			}
			if segs, err = in.planCow(op, segs, cow, off, end); err != nil {
				in.mu.Unlock()
				return nil, err
			}
		}
	} else if shared := in.sharedSegsLocked(first, nb); len(shared) > 0 {
		if nowait {
			in.mu.Unlock()
			return nil, fs.nowaitEAGAIN(nwAllocate)
		}
		segs, err = in.planCow(op, segs, shared, off, end)
		if err != nil {
			in.mu.Unlock()
			return nil, err
		}
	}
	in.mu.Unlock()
	conv := op.convBuf[:0]
	bs := fs.blockSize
	for _, s := range segs {
		lo, hi := fs.clip(s, off, end)
		if s.State == meta.Written {
			b.add(device.OpWrite, buf[lo-off:hi-off], fs.devOffset(s, lo))
			continue
		}
		conv = append(conv, fileRange{s.FileBlock, s.Len})
		// Head: a partial first block.
		if lo%bs != 0 || hi-roundDown(lo, bs) < bs {
			blk := roundDown(lo, bs)
			bounce := device.AlignedBuf(int(bs))
			bhi := min(hi, blk+bs)
			copy(bounce[lo-blk:], buf[lo-off:bhi-off])
			b.add(device.OpWrite, bounce, fs.devOffset(s, blk))
			lo = blk + bs
		}
		if lo >= hi {
			continue
		}
		// Middle: whole blocks straight from the caller's buffer.
		if mid := roundDown(hi, bs); mid > lo {
			b.add(device.OpWrite, buf[lo-off:mid-off], fs.devOffset(s, lo))
			lo = mid
		}
		// Tail: a partial last block.
		if lo < hi {
			bounce := device.AlignedBuf(int(bs))
			copy(bounce, buf[lo-off:hi-off])
			b.add(device.OpWrite, bounce, fs.devOffset(s, lo))
		}
	}
	return conv, nil
}

// planCow replaces the shared blocks in segs (shared, from
// sharedSegsLocked) with staging blocks, recording each run in op.cow for
// the remap at completion: the write goes out of place. The write must
// cover each shared block whole (only aligned direct writes come here;
// every other route copies shared blocks first).
//
// Preconditions: in.mu is held.
func (in *inode) planCow(op *dioOp, segs, shared []extmap.Segment, off, end int64) ([]extmap.Segment, error) {
	fs := in.fs
	bs := fs.blockSize
	var n uint64
	for _, s := range shared {
		if int64(s.FileBlock)*bs < off || int64(s.End())*bs > end {
			return nil, fs.sharedInPlace("direct write", in, s.FileBlock)
		}
		n += s.Len
	}
	stage, err := fs.takeStaging(n, shared[0].DevBlock)
	if err != nil {
		return nil, err
	}
	out := make([]extmap.Segment, 0, len(segs)+2*len(shared))
	for _, s := range segs {
		cur := s.FileBlock
		for len(shared) > 0 && shared[0].FileBlock < s.End() {
			sh := shared[0]
			if cur < sh.FileBlock {
				out = append(out, segPiece(s, cur, sh.FileBlock))
				cur = sh.FileBlock
			}
			// The shared run, onto staging runs.
			for cur < sh.End() {
				r := &stage[0]
				k := min(r.Len, sh.End()-cur)
				out = append(out, extmap.Segment{FileBlock: cur, Len: k, DevBlock: r.Start, State: meta.Written})
				op.cow = append(op.cow, cowRange{fb: cur, n: k, dev: r.Start})
				r.Start += k
				r.Len -= k
				if r.Len == 0 {
					stage = stage[1:]
				}
				cur += k
			}
			shared = shared[1:]
		}
		if cur < s.End() {
			out = append(out, segPiece(s, cur, s.End()))
		}
	}
	fs.counters.CowWrites.Add(1)
	return out, nil
}

// segPiece returns the part of segment s that covers file blocks [lo, hi).
func segPiece(s extmap.Segment, lo, hi uint64) extmap.Segment {
	p := s
	p.FileBlock, p.Len = lo, hi-lo
	if !s.Hole {
		p.DevBlock = s.DevBlock + (lo - s.FileBlock)
	}
	return p
}

// batchDone runs when the op's device requests have completed.
func (op *dioOp) batchDone(err error) {
	if !op.write {
		op.in.dio.End()
		if err != nil {
			op.complete(0, err)
		} else {
			op.complete(op.n, nil)
		}
		return
	}
	in := op.in
	if len(op.conv) > 0 || len(op.cow) > 0 || op.k.dsync || op.extends || in.pages.Len() > 0 || op.app != nil {
		// Work that may block (a metadata commit, a sync, page
		// invalidation) runs off the device's completion goroutine: in
		// a synchronous request's waiter, else on a goroutine of its
		// own (the kernel's s_dio_done_wq).
		if !op.finishInWaiter(stepFinishWrite, nil, err) {
			go op.finishWrite(err)
		}
	} else {
		op.finishWrite(err)
	}
}

func (op *dioOp) finishWrite(err error) {
	in := op.in
	if op.app != nil {
		// A parallel append: its publication, in reservation order,
		// converts and publishes, then calls finishAppended.
		op.app.written(op, err)
		return
	}
	in.finishDirectWrite(&op.cr, op.off, op.end, op.conv, op.cow, op.extends, err)
	if op.rng != nil {
		in.ranges.Unlock(op.rng)
	}
	if err == nil && op.k.dsync {
		err = op.k.syncWritten()
	}
	if op.holdLock {
		in.io.Unlock(op.mode)
	}
	if err != nil {
		op.complete(0, err)
	} else {
		op.complete(int(op.end-op.off), nil)
	}
}

// finishAppended ends a parallel append's request once the append's range
// is published (appends.go): cached pages of the range are dropped again
// while its blocks rng (if not nil) are still held, then they are
// unlocked, the in-flight count ends, and O_DSYNC syncs.
func (op *dioOp) finishAppended(rng *iolock.Range, err error) {
	in := op.in
	if in.pages.Len() > 0 {
		_ = in.invalidateRange(op.off, op.end)
	}
	if rng != nil {
		in.ranges.Unlock(rng)
	}
	in.dio.End()
	if err == nil && op.k.dsync {
		err = op.k.syncWritten()
	}
	if err != nil {
		op.complete(0, err)
	} else {
		op.complete(int(op.end-op.off), nil)
	}
}

// appendCompleter is told when a parallel append's device writes have
// completed (appends.go's appendRes).
type appendCompleter interface {
	written(op *dioOp, err error)
}

// finishDirectWrite is the completion of a direct write, in the kernel's
// order: convert unwritten extents (their data is on the device now) and
// remap the blocks it wrote out of place (cow: copy-on-write), then
// publish the new size (never shrinking: racing completions leave the
// largest end), then drop cached pages of the range again (a buffered read
// racing the write must not keep stale pages), then end the in-flight
// count. The caller then syncs for O_DSYNC. The conversion shares its
// transaction with the writes to in that complete meanwhile (cr, the
// write's own request; convGroup).
func (in *inode) finishDirectWrite(cr *convReq, off, end int64, conv []fileRange, cow []cowRange, extends bool, err error) {
	if err != nil && len(cow) > 0 {
		in.fs.returnStaging(cow) // the staging blocks hold nothing of ours
	}
	if err == nil && (len(conv) > 0 || len(cow) > 0 || extends) {
		cr.conv, cr.cow, cr.end = conv, cow, end
		if cerr := in.convertGrouped(cr); cerr != nil {
			err = cerr
		}
	}
	if in.pages.Len() > 0 {
		_ = in.invalidateRange(off, end)
	}
	in.dio.End()
}

// checkDirect applies O_DIRECT's alignment rules: offset, length and
// buffer address aligned to the device's I/O unit (the address to at most
// 4 KiB), as Linux does; EINVAL otherwise.
func (fs *FS) checkDirect(buf []byte, off int64) error {
	u := fs.ioUnit
	if off%u != 0 || int64(len(buf))%u != 0 || !device.IsAligned(buf, device.MemAlign(int(u))) {
		return errnof(syscall.EINVAL, "O_DIRECT I/O must be aligned to the %d B I/O unit (offset %d, length %d)", u, off, len(buf))
	}
	return nil
}

// dioBegin counts a direct I/O in flight (inode_dio_begin).
func (in *inode) dioBegin() {
	in.dio.Begin()
	storeMax(&in.fs.counters.MaxDirectInFlightFile, int64(in.dio.InFlight()))
}

// widenToBlocks prepares a sub-block direct write for a checksummed
// volume: k.rmw becomes the whole blocks the write touches, the caller's
// bytes merged into what they hold (read and verified; holes and
// unwritten blocks read as zeros), for planWrite to write out of place.
// The range's cached pages are written back first, so the blocks read
// hold their dirty bytes (submitDirectWrite drops the pages after).
//
// Preconditions: in.io is held exclusive and direct I/O is drained.
func (in *inode) widenToBlocks(k *kiocb) error {
	fs := in.fs
	end := k.off + int64(len(k.buf))
	lo, hi := in.wholeBlocks(k.off, end)
	if err := in.writebackRange(lo, hi, false); err != nil {
		return err
	}
	buf := device.AlignedBuf(int(hi - lo))
	bs := fs.blockSize
	edges := []int64{lo}
	if hi-bs != lo {
		edges = append(edges, hi-bs)
	}
	for _, e := range edges {
		if e >= k.off && e+bs <= end {
			continue // the caller's bytes cover it
		}
		if err := in.readBlockInto(buf[e-lo:e-lo+bs], e); err != nil {
			return err
		}
	}
	copy(buf[k.off-lo:], k.buf)
	k.rmw, k.rmwOff = buf, lo
	fs.counters.SumRewrites.Add(1)
	return nil
}
