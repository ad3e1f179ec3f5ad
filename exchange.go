package sluice

import (
	"syscall"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// Exchange-range: XFS_IOC_EXCHANGE_RANGE, XFS's atomic exchange of two
// files' contents (fs/xfs/xfs_exchrange.c): the mappings of two block
// ranges change places in one metadata transaction, so that a crash shows
// both files wholly before or wholly after. Blocks change owner, not
// reference count.

// XFS_IOC_EXCHANGE_RANGE flags (xfs_fs.h).
const (
	// ExchangeToEOF exchanges up to the end of both files (the length
	// given is ignored) and swaps the two files' sizes.
	ExchangeToEOF = 0x1
	// ExchangeDsync makes the exchange durable before it returns.
	ExchangeDsync = 0x2
	// ExchangeDryRun checks the arguments and does nothing.
	ExchangeDryRun = 0x4
	// ExchangeFile1Written exchanges only where file1 has written blocks.
	ExchangeFile1Written = 0x8

	exchangeAll = ExchangeToEOF | ExchangeDsync | ExchangeDryRun | ExchangeFile1Written
)

// ExchangeRange exchanges the bytes [off1, off1+n) of file1 with the bytes
// [off2, off2+n) of f (XFS_IOC_EXCHANGE_RANGE, issued on f, file2), with
// XFS's rules (xfs_exchange_range_checks): both files open for reading and
// writing and not O_APPEND (EBADF), regular (EISDIR, EINVAL), on this file
// system (EXDEV); block-aligned offsets, each range within its file's EOF,
// a length that is whole blocks unless it reaches or passes both files'
// EOF, no overlap within one file (EINVAL); flags from the Exchange*
// constants (EINVAL otherwise). Both files' mtime and ctime change (also
// for n == 0, but not for ExchangeDryRun), and their set-user-ID,
// set-group-ID and capabilities go, as a write's.
func (f *File) ExchangeRange(file1 *File, off1, off2, n int64, flags uint64) error {
	const op = "exchange range"
	// The ioctl's own descriptor first, then the flags, then file1's
	// (xfs_ioc_exchange_range).
	if err := f.begin(); err != nil {
		return pathErr(op, f.name, err)
	}
	defer f.end()
	if flags&^exchangeAll != 0 {
		return pathErr(op, f.name, syscall.EINVAL)
	}
	if file1 != f {
		if err := file1.begin(); err != nil {
			return pathErr(op, file1.name, err)
		}
		defer file1.end()
	}
	if file1.fs != f.fs {
		return pathErr(op, f.name, syscall.EXDEV)
	}
	if err := regularPair(file1.in, f.in); err != nil {
		return pathErr(op, f.name, err)
	}
	for _, x := range []*File{file1, f} {
		if x.flags&syscall.O_ACCMODE != O_RDWR || x.flags&O_APPEND != 0 {
			return pathErr(op, f.name, syscall.EBADF)
		}
	}
	if flags&ExchangeToEOF == 0 && (off1 < 0 || off2 < 0 || n < 0 || off1+n < off1 || off2+n < off2) {
		return pathErr(op, f.name, syscall.EINVAL)
	}
	if err := f.fs.writable(); err != nil {
		return pathErr(op, f.name, err)
	}
	return pathErr(op, f.name, f.fs.exchangeRange(file1.in, f.in, off1, off2, n, flags))
}

// exchangeRange is ExchangeRange under both I/O locks (xfs_exchrange_prep,
// xfs_exchrange_mappings).
func (fs *FS) exchangeRange(in1, in2 *inode, off1, off2, n int64, flags uint64) error {
	in1.eofTailClean.Store(false) // each may get the other's EOF block (checkEOFTail)
	in2.eofTailClean.Store(false)
	unlock := lockIO2(in1, in2)
	defer unlock()
	n, err := fs.exchangePrep(in1, in2, off1, off2, n, flags)
	if err != nil {
		return err
	}
	if flags&ExchangeDryRun != 0 {
		return nil
	}
	bs := fs.blockSize
	nb := uint64(roundUp(n, bs) / bs)
	fb1, fb2 := uint64(off1/bs), uint64(off2/bs)
	toEOF := flags&ExchangeToEOF != 0
	if n > 0 || toEOF {
		// No page may outlive its blocks' move (nor, TO_EOF, the size
		// change: each file's range runs to its new EOF and past);
		// pending conversions and remaps become durable first, so the
		// records moved say what the blocks hold.
		for _, x := range []struct {
			in  *inode
			off int64
		}{{in1, off1}, {in2, off2}} {
			hi := x.off + int64(nb)*bs
			if toEOF {
				hi = maxFileSize
			}
			if err := x.in.invalidateRange(x.off, hi); err != nil {
				return err
			}
			x.in.waitBlocksIdle(uint64(x.off/bs), uint64(hi/bs))
		}
		for _, in := range []*inode{in1, in2} {
			if err := in.settleRemaps(); err != nil {
				return err
			}
		}
	}
	for _, in := range []*inode{in1, in2} {
		if in.needsPrivStrip() {
			if err := in.stripPrivs(); err != nil {
				return err
			}
		}
	}
	if err := fs.exchangeMappings(in1, in2, fb1, fb2, nb, flags); err != nil {
		return err
	}
	fs.counters.Exchanges.Add(1)
	if flags&ExchangeDsync != 0 {
		return fs.group.sync()
	}
	return nil
}

// exchangeMappings exchanges file blocks [fb1, fb1+nb) of in1 with
// [fb2, fb2+nb) of in2 and sets the sizes and times, in one transaction.
//
// Preconditions: both I/O locks are held exclusive, direct I/O drained,
// and neither range has a cached page or a pending conversion or remap.
func (fs *FS) exchangeMappings(in1, in2 *inode, fb1, fb2, nb uint64, flags uint64) error {
	bs := fs.blockSize
	unlockMu := lockInodes(in1, in2)
	defer unlockMu()
	m1, err := in1.extentsLocked()
	if err != nil {
		return err
	}
	m2, err := in2.extentsLocked()
	if err != nil {
		return err
	}
	t0 := now()
	return fs.transact(func(t *txn) error {
		if nb > 0 {
			// The runs to exchange: all of it, or with FILE1_WRITTEN only
			// where file1 has written blocks.
			runs := []fileRange{{0, nb}}
			if flags&ExchangeFile1Written != 0 {
				runs = runs[:0]
				for _, s := range m1.Lookup(fb1, nb, nil) {
					if !s.Hole && s.State == meta.Written {
						runs = append(runs, fileRange{s.FileBlock - fb1, s.Len})
					}
				}
			}
			for _, r := range runs {
				segs1 := m1.Lookup(fb1+r.first, r.n, nil)
				segs2 := m2.Lookup(fb2+r.first, r.n, nil)
				m1.Remove(fb1+r.first, r.n, t.extents(in1))
				m2.Remove(fb2+r.first, r.n, t.extents(in2))
				if err := moveSegs(m2, t.extents(in2), segs1, fb1, fb2); err != nil {
					return err
				}
				if err := moveSegs(m1, t.extents(in1), segs2, fb2, fb1); err != nil {
					return err
				}
			}
			if in1.mayShare || in2.mayShare {
				in1.mayShare, in2.mayShare = true, true
			}
		}
		if flags&ExchangeToEOF != 0 {
			// Each file ends where the other's EOF lands in it
			// (both offsets 0: the sizes swap), as XFS on Linux
			// 6.18.44 does; earlier kernels swapped the sizes as they
			// were whatever the offsets.
			off1, off2 := fb1*uint64(bs), fb2*uint64(bs)
			s1, s2 := in1.attr.Size, in2.attr.Size
			// Within one file, file1's size is the one that stays, as
			// on XFS (TestExchangeToEOFWithinOneFile).
			in2.attr.Size = off2 + s1 - off1
			in1.attr.Size = off1 + s2 - off2
			// Written blocks the exchange leaves past a file's new
			// EOF could never be read (an extending truncate or
			// write zeroes what it exposes), and go.
			for _, x := range []struct {
				in *inode
				m  *extmap.Map
			}{{in1, m1}, {in2, m2}} {
				first := uint64(roundUp(int64(x.in.attr.Size), bs) / bs)
				for _, s := range x.m.Lookup(first, ^uint64(0)-first, nil) {
					if !s.Hole && s.State == meta.Written {
						if err := t.freeBlocks(x.m.Remove(s.FileBlock, s.Len, t.extents(x.in))); err != nil {
							return err
						}
					}
				}
			}
		}
		for _, in := range []*inode{in1, in2} {
			in.attr.Mtime, in.attr.Ctime = t0, t0
			t.putAttr(in)
			in.attrDirty = false
			if in1 == in2 {
				break
			}
		}
		return nil
	})
}

// moveSegs maps the mapped segments segs (looked up at file block from)
// into m at file block to, as they were: an exchange moves blocks between
// files, written or unwritten.
func moveSegs(m *extmap.Map, rec extmap.Recorder, segs []extmap.Segment, from, to uint64) error {
	for _, s := range segs {
		if s.Hole {
			continue
		}
		e := extmap.Extent{FileBlock: s.FileBlock - from + to, DevBlock: s.DevBlock, Len: s.Len, State: s.State}
		if err := m.Insert(e, rec); err != nil {
			return eio(err)
		}
	}
	return nil
}

// exchangePrep applies xfs_exchange_range_checks in their order and
// returns the length to exchange.
//
// Preconditions: both I/O locks are held.
func (fs *FS) exchangePrep(in1, in2 *inode, off1, off2, n int64, flags uint64) (int64, error) {
	bs := fs.blockSize
	size1, size2 := in1.size(), in2.size()
	if off1 > size1 || off2 > size2 {
		return 0, syscall.EINVAL
	}
	if flags&ExchangeToEOF != 0 {
		n = max(size1-off1, size2-off2)
		if off1 < 0 || off2 < 0 || off1+n < off1 || off2+n < off2 {
			return 0, syscall.EINVAL
		}
	}
	if off1%bs != 0 || off2%bs != 0 {
		return 0, syscall.EINVAL
	}
	if off1+n < off1 || off2+n < off2 {
		return 0, syscall.EINVAL
	}
	if flags&ExchangeToEOF == 0 && (off1+n > size1 || off2+n > size2) {
		return 0, syscall.EINVAL
	}
	if off1+n > maxFileSize || off2+n > maxFileSize {
		return 0, syscall.EFBIG
	}
	// The EOF rule: a length that is not whole blocks must end at EOF.
	blen := n
	switch {
	case off1+n == size1:
		blen = roundUp(size1, bs) - off1
	case off2+n == size2:
		blen = roundUp(size2, bs) - off2
	case n%bs != 0:
		return 0, syscall.EINVAL
	}
	if in1 == in2 && off2+blen > off1 && off2 < off1+blen {
		return 0, syscall.EINVAL
	}
	// A partial EOF block must reach or pass EOF in both files.
	if n%bs != 0 && (off1+n < size1 || off2+n < size2) {
		return 0, syscall.EINVAL
	}
	return n, nil
}
