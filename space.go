package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/iolock"
)

// Space operations: truncate, fallocate (allocate, punch, zero range,
// collapse range, insert range), SEEK_DATA/SEEK_HOLE (the in-place zeroing they need is in zero.go, block
// allocation in allocate.go). Each takes the I/O lock
// exclusive and drains in-flight direct I/O before it changes size or
// blocks, so no direct write lands on a block after it was freed and no
// completion moves the size after it was set.

// truncate sets the file's size (xfs_setattr_size): shrinking frees the
// blocks past the new EOF and zeroes the rest of the new EOF block;
// growing zeroes the old EOF block's tail so no stale byte shows.
func (in *inode) truncate(size int64) error { return in.setSize(size, false) }

// extend grows the file to size, as truncate does, and leaves a file of
// size bytes or more alone (times included). The size is compared under
// the I/O lock, so it never cuts off what a concurrent write put past
// size.
func (in *inode) extend(size int64) error { return in.setSize(size, true) }

// setSize is truncate, or extend when growOnly is set.
func (in *inode) setSize(size int64, growOnly bool) error {
	fs := in.fs
	if size > maxFileSize {
		return syscall.EFBIG
	}
	if err := fs.writable(); err != nil {
		return err
	}
	in.lockSpace()
	defer in.io.Unlock(iolock.Exclusive)
	old := in.size()
	if growOnly && size <= old {
		return nil
	}
	bs := fs.blockSize
	switch {
	case size < old:
		// The block holding the new EOF is written back and dropped, and
		// its tail zeroed on the device (the part that can fail, so it
		// comes first); then the pages past the new EOF go, without
		// writeback: their data is cut off.
		if size%bs != 0 {
			blk := size / bs
			if err := in.invalidateRange(blk*bs, (blk+1)*bs); err != nil {
				return err
			}
			if _, err := in.zeroBlockRange(uint64(blk), size%bs, bs); err != nil {
				return err
			}
		}
		ps := int64(fs.cache.PageSize())
		in.dropPages(uint64(roundUp(size, ps)/ps), ^uint64(0))
		in.waitBlocksIdle(uint64(roundUp(size, bs)/bs), ^uint64(0))
		in.releaseDelalloc(uint64(roundUp(size, bs) / bs))
	case size > old:
		if err := in.zeroEOFTail(old); err != nil {
			return err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return err
	}
	t0 := now()
	return fs.transact(func(t *txn) error {
		if size < old {
			first := uint64(roundUp(size, bs) / bs)
			if err := t.freeBlocks(m.Remove(first, ^uint64(0)-first, t.extents(in))); err != nil {
				return err
			}
		}
		in.attr.Size = uint64(size)
		in.attr.Mtime, in.attr.Ctime = t0, t0
		t.putAttr(in)
		in.attrDirty = false
		return nil
	})
}

// fallocate implements fallocate(2) for the modes sluice supports:
// default (allocate unwritten blocks and extend), KEEP_SIZE, PUNCH_HOLE|
// KEEP_SIZE, ZERO_RANGE (with or without KEEP_SIZE), COLLAPSE_RANGE and
// INSERT_RANGE (shiftRange).
func (in *inode) fallocate(mode uint32, off, n int64) error {
	fs := in.fs
	if err := checkFallocate(mode, off, n); err != nil {
		return err
	}
	if off+n > maxFileSize || off+n < off {
		return syscall.EFBIG
	}
	if err := fs.writable(); err != nil {
		return err
	}
	in.mu.Lock()
	fmode := in.attr.Mode
	in.mu.Unlock()
	if isDir(fmode) {
		return syscall.EISDIR
	}
	if !isReg(fmode) {
		return syscall.ENODEV
	}
	if mode == FallocWriteZeroes {
		return syscall.EOPNOTSUPP // xfs_file_fallocate: not in XFS_FALLOC_FL_SUPPORTED on 6.18
	}
	if mode == FallocCollapseRange || mode == FallocInsertRange {
		return in.shiftRange(mode == FallocCollapseRange, off, n)
	}
	in.lockSpace()
	defer in.io.Unlock(iolock.Exclusive)
	end := off + n
	bs := fs.blockSize
	old := in.size()
	keep := mode&FallocKeepSize != 0
	if keep && mode&(FallocPunchHole|FallocZeroRange) == 0 && end > old {
		in.mu.Lock()
		in.explicitPrealloc = true // no speculative blocks to give back
		in.mu.Unlock()
	}
	if mode&(FallocPunchHole|FallocZeroRange) != 0 {
		if err := in.invalidateRange(off, end); err != nil {
			return err
		}
		// Partial blocks at the edges are zeroed in place.
		fb, lb := off/bs, (end-1)/bs
		if off%bs != 0 {
			if _, err := in.zeroBlockRange(uint64(fb), off%bs, min(bs, end-fb*bs)); err != nil {
				return err
			}
		}
		if end%bs != 0 && (lb != fb || off%bs == 0) {
			if _, err := in.zeroBlockRange(uint64(lb), 0, end%bs); err != nil {
				return err
			}
		}
	}
	if mode&FallocUnshareRange != 0 && off < old {
		// xfs_reflink_unshare, within EOF; then mode 0.
		first, nb := fs.blockRange(off, min(end, old))
		if err := in.unshareLocked(first, nb); err != nil {
			return err
		}
	}
	if !keep && end > old {
		if err := in.zeroEOFTail(old); err != nil {
			return err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return err
	}
	t0 := now()
	return fs.transact(func(t *txn) error {
		full0, full1 := uint64(roundUp(off, bs)/bs), uint64(end/bs) // whole blocks
		switch {
		case mode&FallocPunchHole != 0:
			if full1 > full0 {
				if err := t.freeBlocks(m.Remove(full0, full1-full0, t.extents(in))); err != nil {
					return err
				}
			}
		case mode&FallocZeroRange != 0:
			if full1 > full0 {
				// Shared blocks leave the file (a block of its own
				// takes their place): made unwritten, they would be
				// written in place by the next write.
				for _, s := range in.sharedSegsLocked(full0, full1-full0) {
					if err := t.freeBlocks(m.Remove(s.FileBlock, s.Len, t.extents(in))); err != nil {
						return err
					}
				}
				for _, r := range m.Unconvert(full0, full1-full0, t.extents(in)) {
					if err := t.remapped(r); err != nil {
						return err
					}
				}
				if err := in.allocateLocked(t, full0, full1-full0, 0); err != nil {
					return err
				}
			}
		default:
			first, nb := fs.blockRange(off, end)
			if err := in.allocateLocked(t, first, nb, 0); err != nil {
				return err
			}
		}
		if !keep && uint64(end) > in.attr.Size {
			in.attr.Size = uint64(end)
		}
		if mode != 0 && mode != FallocKeepSize {
			in.attr.Mtime = t0
		}
		in.attr.Ctime = t0
		t.putAttr(in)
		in.attrDirty = false
		return nil
	})
}

// checkFallocate validates fallocate(2) arguments in Linux's order
// (vfs_fallocate checks them before the file's access mode). Modes are
// exclusive, KEEP_SIZE aside, and as vfs_fallocate on 6.18 (since 6.13) a
// mode combined with another, PUNCH_HOLE without KEEP_SIZE, and
// COLLAPSE_RANGE, INSERT_RANGE or WRITE_ZEROES with KEEP_SIZE, are
// EOPNOTSUPP (before 6.13 the first two were EINVAL). WRITE_ZEROES passes
// here, as in the VFS, and is refused later, as by XFS.
func checkFallocate(mode uint32, off, n int64) error {
	if off < 0 || n <= 0 {
		return syscall.EINVAL
	}
	keep := mode&FallocKeepSize != 0
	switch mode &^ FallocKeepSize {
	case 0, FallocZeroRange, FallocUnshareRange:
	case FallocPunchHole:
		if !keep {
			return syscall.EOPNOTSUPP
		}
	case FallocCollapseRange, FallocInsertRange, FallocWriteZeroes:
		if keep {
			return syscall.EOPNOTSUPP
		}
	default:
		return syscall.EOPNOTSUPP
	}
	return nil
}

// shiftRange implements FALLOC_FL_COLLAPSE_RANGE (collapse set) and
// FALLOC_FL_INSERT_RANGE with XFS's rules (xfs_falloc_collapse_range,
// xfs_falloc_insert_range): off and n must be multiples of the block size
// (EINVAL); a collapse must end before EOF (EINVAL: reaching it would be a
// truncate); an insert must start before EOF (EINVAL) and leave the size
// within the largest (EFBIG). Under the exclusive I/O lock with direct I/O
// drained, it writes back and drops the cached pages from off to EOF and
// past (xfs_flush_unmap_range), waits for block writebacks there, then
// moves the extents (extmap CollapseRange, InsertRange), frees the
// collapsed blocks and changes the size in one metadata transaction: after
// a crash the file is wholly as before or wholly as after (XFS shifts one
// extent per transaction, and sets an insert's size in a transaction of
// its own first).
func (in *inode) shiftRange(collapse bool, off, n int64) error {
	fs := in.fs
	in.lockSpace()
	defer in.io.Unlock(iolock.Exclusive)
	bs := fs.blockSize
	size := in.size()
	switch {
	case off%bs != 0 || n%bs != 0:
		return syscall.EINVAL
	case collapse && off+n >= size:
		return syscall.EINVAL
	case !collapse && maxFileSize-size < n:
		return syscall.EFBIG
	case !collapse && off >= size:
		return syscall.EINVAL
	}
	// No cached page, dirty or clean, may stay where its bytes no longer
	// are; writeback first, so every byte past off has its blocks.
	if err := in.invalidateRange(off, maxFileSize); err != nil {
		return err
	}
	fb, nb := uint64(off/bs), uint64(n/bs)
	in.waitBlocksIdle(fb, ^uint64(0))
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return err
	}
	t0 := now()
	return fs.transact(func(t *txn) error {
		if collapse {
			if err := t.freeBlocks(m.CollapseRange(fb, nb, t.extents(in))); err != nil {
				return err
			}
			in.attr.Size -= uint64(n)
		} else {
			if err := m.InsertRange(fb, nb, t.extents(in)); err != nil {
				return err
			}
			in.attr.Size += uint64(n)
		}
		in.attr.Mtime, in.attr.Ctime = t0, t0
		t.putAttr(in)
		in.attrDirty = false
		return nil
	})
}

// seekData implements SEEK_DATA (data true) and SEEK_HOLE from off. Dirty
// pages are written back first so that every cached byte has its blocks.
// Unwritten extents count as data.
func (in *inode) seekData(off int64, data bool) (int64, error) {
	if err := in.writeback(0, maxFileSize, true); err != nil {
		return 0, err
	}
	bs := in.fs.blockSize
	in.mu.Lock()
	defer in.mu.Unlock()
	size := int64(in.attr.Size)
	if off < 0 || off >= size {
		return 0, syscall.ENXIO
	}
	m, err := in.extentsLocked()
	if err != nil {
		return 0, err
	}
	fb := uint64(off / bs)
	if data {
		d, ok := m.NextData(fb)
		if !ok {
			return 0, syscall.ENXIO
		}
		pos := max(off, int64(d)*bs)
		if pos >= size {
			return 0, syscall.ENXIO
		}
		return pos, nil
	}
	h := m.NextHole(fb)
	return min(max(off, int64(h)*bs), size), nil
}

// lockSpace takes the I/O lock exclusive for a space operation and drains
// direct I/O.
func (in *inode) lockSpace() {
	in.io.Lock(iolock.Exclusive)
	in.fs.counters.LockExclSpace.Add(1)
	in.drain()
}
