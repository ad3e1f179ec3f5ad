package sluice

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/iolock"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/refcount"
)

// Reflink: FICLONE, FICLONERANGE and FIDEDUPERANGE (and the clone that
// copy_file_range tries first) share a source range's blocks into a
// destination file instead of copying them, with XFS's rules
// (xfs_file_remap_range over the VFS's generic_remap_file_range_prep).
// Every later write into a shared block goes out of place (cow.go).

// ErrRangesDiffer is DedupeRange's answer when the two ranges do not hold
// the same bytes (FILE_DEDUPE_RANGE_DIFFERS): nothing was shared.
var ErrRangesDiffer = errors.New("sluice: dedupe ranges differ")

// remapFlags are the VFS's REMAP_FILE_* flags.
type remapFlags uint8

const (
	// remapDedupe shares only if the ranges hold the same bytes, and
	// leaves the destination's size and times alone (REMAP_FILE_DEDUP).
	remapDedupe remapFlags = 1 << iota
	// remapCanShorten lets the range shrink to whole blocks instead of
	// failing (REMAP_FILE_CAN_SHORTEN, copy_file_range and dedupe).
	remapCanShorten
)

// CloneRange shares the blocks of src's bytes [srcOff, srcOff+n) into f at
// dstOff (FICLONERANGE, f the destination): afterwards both files hold
// the bytes, on the same device blocks until either is written. n == 0
// means up to src's EOF. Offsets must be block-aligned, and so must n
// unless the range ends at src's EOF and reaches or passes f's EOF; the
// ranges of one file must not overlap; f grows to dstOff+n if it is
// shorter, and its mtime and ctime change (set-user-ID and capabilities
// are cleared as a write clears them). Errors are those of Linux's
// vfs_clone_file_range on XFS: EBADF unless src is open for reading and f
// for writing without O_APPEND, EISDIR, EINVAL, EXDEV across file
// systems, EFBIG past the largest size, ENOSPC.
func (f *File) CloneRange(src *File, srcOff, dstOff, n int64) error {
	cloned, err := f.remap(src, srcOff, dstOff, n, 0, "clone")
	if err == nil && n != 0 && cloned != n {
		err = pathErr("clone", f.name, syscall.EINVAL) // ioctl_file_clone
	}
	return err
}

// Clone shares all of src's blocks into f (FICLONE): CloneRange(src, 0,
// 0, 0).
func (f *File) Clone(src *File) error { return f.CloneRange(src, 0, 0, 0) }

// CloneBlocks is the clone copy_file_range tries first (vfs_copy_file_range
// with REMAP_FILE_CAN_SHORTEN): it shares what it can of src's
// [srcOff, srcOff+n) into f at dstOff as whole blocks, and returns how
// many bytes it shared: fewer than n when the range does not end on a
// block boundary (the caller copies the rest), 0 when the offsets are not
// block-aligned or src is empty there. Its errors are CloneRange's.
func (f *File) CloneBlocks(src *File, srcOff, dstOff, n int64) (int64, error) {
	if n == 0 {
		return 0, nil
	}
	bs := f.fs.blockSize
	if srcOff%bs != 0 || dstOff%bs != 0 {
		return 0, nil
	}
	return f.remap(src, srcOff, dstOff, n, remapCanShorten, "clone")
}

// DedupeRange shares f's bytes [srcOff, srcOff+n) into dst at dstOff if
// dst holds the same bytes there (FIDEDUPERANGE for one destination, f the
// source), or returns ErrRangesDiffer (wrapped) with nothing done. Both
// ranges must lie within EOF (EINVAL); n is cut to 1 GiB, and what is
// shared to whole blocks unless both ranges end at their file's EOF. As
// the kernel's bytes_deduped, the count returned is n as cut to 1 GiB,
// not the part shared. Sizes and times do not change. f must be open for
// reading (EINVAL otherwise, as vfs_dedupe_file_range); the library has no
// caller credentials, so any open dst is accepted (may_dedupe_file's
// owner case).
func (f *File) DedupeRange(srcOff, n int64, dst *File, dstOff int64) (int64, error) {
	const op = "dedupe"
	if err := f.begin(); err != nil {
		return 0, pathErr(op, f.name, err)
	}
	defer f.end()
	// vfs_dedupe_file_range: the source, then the length.
	if !f.readable() {
		return 0, pathErr(op, f.name, syscall.EINVAL)
	}
	if err := regularFile(f.in); err != nil {
		return 0, pathErr(op, f.name, err)
	}
	if srcOff < 0 || n < 0 || srcOff+n < srcOff || srcOff+n > f.in.size() {
		return 0, pathErr(op, f.name, syscall.EINVAL)
	}
	n = min(n, 1<<30)
	// vfs_dedupe_file_range_one: the destination, then the length 0.
	if err := dst.begin(); err != nil {
		return 0, pathErr(op, dst.name, err)
	}
	defer dst.end()
	switch {
	case dstOff < 0 || dstOff+n < dstOff:
		return 0, pathErr(op, dst.name, syscall.EINVAL)
	case dst.fs != f.fs:
		return 0, pathErr(op, dst.name, syscall.EXDEV)
	}
	if err := regularFile(dst.in); err != nil {
		return 0, pathErr(op, dst.name, err)
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := dst.remap(f, srcOff, dstOff, n, remapDedupe|remapCanShorten, op); err != nil {
		return 0, err
	}
	return n, nil
}

// remap checks the call as the VFS does, then runs it.
func (f *File) remap(src *File, srcOff, dstOff, n int64, flags remapFlags, op string) (int64, error) {
	if err := f.begin(); err != nil {
		return 0, pathErr(op, f.name, err)
	}
	defer f.end()
	if src != f {
		if err := src.begin(); err != nil {
			return 0, pathErr(op, src.name, err)
		}
		defer src.end()
	}
	if src.fs != f.fs {
		return 0, pathErr(op, f.name, syscall.EXDEV)
	}
	if flags&remapDedupe == 0 {
		// generic_file_rw_checks.
		if err := regularPair(src.in, f.in); err != nil {
			return 0, pathErr(op, f.name, err)
		}
		if !src.readable() || !f.writable() || f.flags&O_APPEND != 0 {
			return 0, pathErr(op, f.name, syscall.EBADF)
		}
	}
	// remap_verify_area.
	if srcOff < 0 || dstOff < 0 || n < 0 || srcOff+n < srcOff || dstOff+n < dstOff {
		return 0, pathErr(op, f.name, syscall.EINVAL)
	}
	if err := f.fs.writable(); err != nil {
		return 0, pathErr(op, f.name, err)
	}
	done, err := f.fs.remapRange(src.in, f.in, srcOff, dstOff, n, flags)
	return done, pathErr(op, f.name, err)
}

// regularPair is the file-type check of a two-file call
// (generic_file_rw_checks, generic_remap_file_range_prep): EISDIR for a
// directory, EINVAL for anything else that is not a regular file.
func regularPair(a, b *inode) error {
	ea, eb := regularFile(a), regularFile(b)
	switch {
	case ea == syscall.EISDIR || eb == syscall.EISDIR:
		return syscall.EISDIR
	case ea != nil:
		return ea
	}
	return eb
}

// regularFile is regularPair's check of one file.
func regularFile(in *inode) error {
	in.mu.Lock()
	m := in.attr.Mode
	in.mu.Unlock()
	switch {
	case isDir(m):
		return syscall.EISDIR
	case !isReg(m):
		return syscall.EINVAL
	}
	return nil
}

// lockIO2 takes the I/O locks of a and b (which may be the same inode)
// exclusive, in inode-number order, drains direct I/O on both, and returns
// the unlock function (xfs_ilock2_io_mmap, inode_dio_wait).
func lockIO2(a, b *inode) func() {
	if a == b {
		a.io.Lock(iolock.Exclusive)
		a.fs.counters.LockExclSpace.Add(1)
		a.drain()
		return func() { a.io.Unlock(iolock.Exclusive) }
	}
	if b.ino < a.ino {
		a, b = b, a
	}
	a.io.LockOrdered(iolock.Exclusive, uint64(a.ino))
	b.io.LockOrdered(iolock.Exclusive, uint64(b.ino))
	a.fs.counters.LockExclSpace.Add(2)
	a.drain()
	b.drain()
	return func() {
		b.io.Unlock(iolock.Exclusive)
		a.io.Unlock(iolock.Exclusive)
	}
}

// remapRange shares src's [srcOff, srcOff+n) into dst at dstOff, as
// xfs_file_remap_range does: both I/O locks exclusive with direct I/O
// drained; the checks of generic_remap_file_range_prep; the source range
// written back and the destination's dropped; for a dedupe, the bytes
// compared; then one metadata transaction adds a reference to the source's
// written blocks (package refcount), maps them into the destination in
// place of what it mapped there (freed through txn.freeBlocks), and sets
// its size and times, so that a crash shows the clone whole or not at all.
// Unwritten source blocks become holes in the destination: both read as
// zeros (XFS shares them instead). It returns the bytes remapped.
func (fs *FS) remapRange(src, dst *inode, srcOff, dstOff, n int64, flags remapFlags) (int64, error) {
	dst.eofTailClean.Store(false) // its EOF block may become the source's (checkEOFTail)
	unlock := lockIO2(src, dst)
	defer unlock()
	if err := regularPair(src, dst); err != nil {
		return 0, err
	}
	n, err := fs.remapPrep(src, dst, srcOff, dstOff, n, flags)
	if err != nil || n == 0 {
		return 0, err
	}
	bs := fs.blockSize
	srcEnd := roundUp(srcOff+n, bs)
	// The source's dirty bytes go to its blocks.
	if err := src.writeback(srcOff, srcEnd, true); err != nil {
		return 0, err
	}
	// No cached page of the destination may outlive the blocks under it;
	// past EOF, the gap up to dstOff too (xfs_reflink_remap_prep).
	dsize := dst.size()
	lo := dstOff
	if flags&remapDedupe == 0 && dstOff > dsize {
		lo = dsize
	}
	if err := dst.invalidateRange(roundDown(lo, bs), roundUp(dstOff+n, bs)); err != nil {
		return 0, err
	}
	dst.waitBlocksIdle(uint64(roundDown(lo, bs)/bs), uint64(roundUp(dstOff+n, bs)/bs))
	if flags&remapDedupe != 0 {
		same, err := fs.sameBytes(src, dst, srcOff, dstOff, n)
		if err != nil {
			return 0, err
		}
		if !same {
			return 0, ErrRangesDiffer
		}
	} else {
		// file_modified: privileges go, times are set with the remap.
		if dst.needsPrivStrip() {
			if err := dst.stripPrivs(); err != nil {
				return 0, err
			}
		}
		// The bytes between the old EOF and dstOff read as zeros
		// (xfs_reflink_zero_posteof).
		if dstOff > dsize {
			if err := dst.zeroEOFTail(dsize); err != nil {
				return 0, err
			}
		}
	}
	// The source's pending conversions and remaps become durable: the
	// records shared must say what the blocks hold. Last, because zeroing
	// the destination's EOF tail may have copied a shared block on write
	// in the source itself (a clone within one file: fstest B25).
	if err := src.settleRemaps(); err != nil {
		return 0, err
	}
	// The destination's blocks [dfb, dfb+nb) get the source's.
	sfb, dfb := uint64(srcOff/bs), uint64(dstOff/bs)
	nb := uint64(roundUp(n, bs) / bs)
	unlockMu := lockInodes(src, dst)
	defer unlockMu()
	sm, err := src.extentsLocked()
	if err != nil {
		return 0, err
	}
	dm, err := dst.extentsLocked()
	if err != nil {
		return 0, err
	}
	t0 := now()
	var shared uint64
	err = fs.transact(func(t *txn) error {
		segs := sm.Lookup(sfb, nb, nil)
		// References first: a block the destination already shares with
		// the source must not reach zero in between.
		for _, s := range segs {
			if s.Hole || s.State != meta.Written {
				continue
			}
			if e, _ := sm.At(s.FileBlock); e.Epoch != 0 {
				return eio(fmt.Errorf("cloning inode %d: block %d not durable (%v)", src.ino, s.FileBlock, e))
			}
			fs.shared.Share(refcount.Range{Start: s.DevBlock, Len: s.Len}, t.refs())
			shared += s.Len
		}
		if err := t.freeBlocks(dm.Remove(dfb, nb, t.extents(dst))); err != nil {
			return err
		}
		for _, s := range segs {
			if s.Hole || s.State != meta.Written {
				continue
			}
			e := extmap.Extent{FileBlock: dfb + (s.FileBlock - sfb), DevBlock: s.DevBlock, Len: s.Len, State: meta.Written}
			if err := dm.Insert(e, t.extents(dst)); err != nil {
				return eio(err)
			}
		}
		src.mayShare, dst.mayShare = true, true
		if flags&remapDedupe == 0 {
			if end := uint64(dstOff + n); end > dst.attr.Size {
				dst.attr.Size = end
			}
			dst.attr.Mtime, dst.attr.Ctime = t0, t0
			t.putAttr(dst)
			dst.attrDirty = false
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	fs.counters.Clones.Add(1)
	fs.counters.ClonedBlocks.Add(int64(shared))
	return n, nil
}

// remapPrep applies the checks of generic_remap_file_range_prep,
// generic_remap_checks and generic_remap_check_len, in their order, and
// returns the length to remap (0: nothing to do).
//
// Preconditions: both I/O locks are held.
func (fs *FS) remapPrep(src, dst *inode, srcOff, dstOff, n int64, flags remapFlags) (int64, error) {
	bs := fs.blockSize
	ssize, dsize := src.size(), dst.size()
	dedupe := flags&remapDedupe != 0
	// Zero length: a dedupe does nothing, a clone goes to EOF.
	if n == 0 {
		if dedupe || srcOff == ssize {
			return 0, nil
		}
		if srcOff > ssize {
			return 0, syscall.EINVAL
		}
		n = ssize - srcOff
	}
	// generic_remap_checks.
	if srcOff%bs != 0 || dstOff%bs != 0 {
		return 0, syscall.EINVAL
	}
	if dedupe && (srcOff >= ssize || srcOff+n > ssize || dstOff >= dsize || dstOff+n > dsize) {
		return 0, syscall.EINVAL
	}
	if srcOff >= ssize {
		return 0, syscall.EINVAL
	}
	count := min(n, ssize-srcOff)
	if dstOff >= maxFileSize {
		return 0, syscall.EFBIG
	}
	count = min(count, maxFileSize-dstOff) // generic_write_check_limits
	var bcount int64
	if srcOff+count == ssize && (!dedupe || dstOff+count == dsize) {
		bcount = roundUp(ssize, bs) - srcOff
	} else {
		count = roundDown(count, bs)
		bcount = count
	}
	if src == dst && dstOff+bcount > srcOff && dstOff < srcOff+bcount {
		return 0, syscall.EINVAL
	}
	if count != n && flags&remapCanShorten == 0 {
		return 0, syscall.EINVAL
	}
	n = count
	if n == 0 {
		return 0, nil
	}
	// generic_remap_check_len: a range that ends inside a block must end
	// at or past the destination's EOF.
	if n%bs != 0 && dstOff+n < dsize {
		switch {
		case flags&remapCanShorten != 0:
			n = roundDown(n, bs)
		case dedupe:
			return 0, ErrRangesDiffer // -EBADE
		default:
			return 0, syscall.EINVAL
		}
	}
	return n, nil
}

// sameBytes reports whether src's [srcOff, srcOff+n) and dst's
// [dstOff, dstOff+n) hold the same bytes, read from the device (both
// ranges are written back: vfs_dedupe_file_range_compare).
//
// Preconditions: both I/O locks are held exclusive, and no page of either
// range is dirty.
func (fs *FS) sameBytes(src, dst *inode, srcOff, dstOff, n int64) (bool, error) {
	if err := dst.writeback(dstOff, dstOff+n, true); err != nil {
		return false, err
	}
	ps := int64(fs.cache.PageSize())
	const chunk = 1 << 20
	a, b := make([]byte, chunk), make([]byte, chunk)
	for done := int64(0); done < n; done += chunk {
		k := min(chunk, n-done)
		kr := roundUp(k, ps)
		if _, err := src.readRangeInto(a[:kr], srcOff+done); err != nil {
			return false, err
		}
		if _, err := dst.readRangeInto(b[:kr], dstOff+done); err != nil {
			return false, err
		}
		if !bytes.Equal(a[:k], b[:k]) {
			return false, nil
		}
	}
	return true, nil
}
