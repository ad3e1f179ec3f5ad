package sluice

import (
	"slices"
	"syscall"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/refcount"
)

// FIEMAP (FS_IOC_FIEMAP): the file's extents over a byte range, as XFS
// reports them through iomap_fiemap and xfs_read_iomap_begin. It reads the
// extent map and the delayed-allocation reservations under inode.mu only
// (XFS takes the ILOCK shared, not the I/O lock), after writing the file
// back when asked (FIEMAP_FLAG_SYNC). It calls down into writeback.

// FIEMAP request flags (struct fiemap's fm_flags, linux/fiemap.h).
const (
	FiemapFlagSync  = 0x1 // FIEMAP_FLAG_SYNC: write the file's dirty pages back first
	FiemapFlagXattr = 0x2 // FIEMAP_FLAG_XATTR: map the extended-attribute fork instead
)

// FIEMAP extent flags (struct fiemap_extent's fe_flags, linux/fiemap.h).
const (
	FiemapExtentLast      = 0x1   // FIEMAP_EXTENT_LAST: the last extent reported
	FiemapExtentUnknown   = 0x2   // FIEMAP_EXTENT_UNKNOWN: no physical location yet
	FiemapExtentDelalloc  = 0x4   // FIEMAP_EXTENT_DELALLOC: dirty cached data, blocks not allocated (with UNKNOWN)
	FiemapExtentUnwritten = 0x800 // FIEMAP_EXTENT_UNWRITTEN: allocated, reads as zeros
	FiemapExtentMerged    = 0x1000
	// FiemapExtentShared (FIEMAP_EXTENT_SHARED) marks blocks that more
	// than one extent maps (reflink).
	FiemapExtentShared = 0x2000
)

// fiemapFlagsCompat are the request flags Fiemap takes; any other gives
// EBADR (fiemap_prep with XFS's set: FIEMAP_FLAG_SYNC and FIEMAP_FLAG_XATTR).
const fiemapFlagsCompat = FiemapFlagSync | FiemapFlagXattr

// FiemapExtent is one extent Fiemap reports, as struct fiemap_extent: byte
// offsets in the file (Logical) and on the data device (Physical; 0 for a
// delayed allocation), and its length in bytes.
type FiemapExtent struct {
	Logical, Physical, Length uint64
	Flags                     uint32
}

// Fiemap implements the FS_IOC_FIEMAP ioctl: it returns the extents that
// back the file's bytes in [start, start+length), in file order, as XFS
// reports them (iomap_fiemap over xfs_read_iomap_begin):
//
//   - one FiemapExtent per run of blocks that are contiguous on the device
//     and in the same state (written, unwritten); extents are whole blocks,
//     the first starting at the block that holds start and the last ending
//     at the block that holds start+length-1 (XFS trims each mapping to
//     the blocks of the range asked for);
//   - unwritten (preallocated) blocks carry FiemapExtentUnwritten; blocks
//     past EOF are reported like any other (XFS shows its preallocation);
//   - dirty cached data over a hole, whose blocks are reserved but not yet
//     allocated, is FiemapExtentDelalloc|FiemapExtentUnknown with Physical
//     0, one extent per run of file blocks; FiemapFlagSync writes the file
//     back first, so that it is allocated and reported where it lies;
//   - holes are not reported; the last extent reported carries
//     FiemapExtentLast (iomap_fiemap marks the last mapping it found in the
//     range, even when the file has more past it);
//   - written blocks that more than one extent maps (a clone's) carry
//     FiemapExtentShared, and an extent is split where sharing starts or
//     ends (xfs_reflink_trim_around_shared); the count is the shared-block
//     table's, so blocks the other file copied on write still count as
//     shared until the sync point that persists its copy;
//   - FiemapExtentMerged is never set (sluice's extents are merged in core
//     as XFS's are, so an extent is a real one).
//
// With FiemapFlagXattr it returns no extents: extended attributes live in
// the metadata store, not on the data device (as XFS with a local or
// absent attribute fork). Directories, symlinks and special files have no
// data extents either. Errors, as ioctl_fiemap: length 0 gives EINVAL, a
// start past the largest file size EFBIG, a flag other than these two
// EBADR (the kernel then also returns the offending flags in fm_flags; here
// they are lost). A range running past the largest file size is clipped.
// The kernel's fm_extent_count cap is the caller's: slice the result.
//
// Through a FUSE mount the kernel never asks: FUSE has no fiemap inode
// operation, so ioctl_fiemap answers EOPNOTSUPP itself (see fusefs).
func (f *File) Fiemap(start, length uint64, flags uint32) ([]FiemapExtent, error) {
	if err := f.begin(); err != nil {
		return nil, pathErr("fiemap", f.name, err)
	}
	defer f.end()
	exts, err := f.in.fiemap(start, length, flags)
	return exts, pathErr("fiemap", f.name, err)
}

// fiemap is Fiemap (ioctl_fiemap, fiemap_prep, iomap_fiemap).
func (in *inode) fiemap(start, length uint64, flags uint32) ([]FiemapExtent, error) {
	switch {
	case length == 0:
		return nil, syscall.EINVAL
	case start > maxFileSize:
		return nil, syscall.EFBIG
	case flags&^fiemapFlagsCompat != 0:
		return nil, syscall.EBADR
	}
	length = min(length, maxFileSize-start)
	if length == 0 {
		return nil, nil
	}
	if flags&FiemapFlagXattr != 0 {
		return nil, nil
	}
	in.mu.Lock()
	reg := isReg(in.attr.Mode)
	in.mu.Unlock()
	if !reg {
		return nil, nil
	}
	if flags&FiemapFlagSync != 0 {
		if err := in.writeback(0, maxFileSize, true); err != nil {
			return nil, err
		}
	}
	bs := uint64(in.fs.blockSize)
	first, last := start/bs, (start+length-1)/bs
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		return nil, err
	}
	segs := m.Lookup(first, last-first+1, nil)
	delalloc := in.delallocInLocked(first, last)
	var out []FiemapExtent
	add := func(e FiemapExtent) {
		if n := len(out); n > 0 {
			p := &out[n-1]
			contiguous := p.Logical+p.Length == e.Logical &&
				(e.Flags&FiemapExtentDelalloc != 0 || p.Physical+p.Length == e.Physical)
			if contiguous && p.Flags == e.Flags {
				p.Length += e.Length
				return
			}
		}
		out = append(out, e)
	}
	var refs []refcount.Run
	for _, s := range segs {
		if !s.Hole {
			flags := fiemapFlags(s)
			if s.State == meta.Written {
				refs = in.fs.shared.Refs(refcount.Range{Start: s.DevBlock, Len: s.Len}, refs[:0])
			}
			cur := s.DevBlock
			piece := func(dev, n uint64, flags uint32) {
				if n > 0 {
					add(FiemapExtent{Logical: (s.FileBlock + dev - s.DevBlock) * bs, Physical: dev * bs, Length: n * bs, Flags: flags})
				}
			}
			for _, r := range refs {
				piece(cur, r.Start-cur, flags)
				piece(r.Start, r.Len, flags|FiemapExtentShared)
				cur = r.End()
			}
			piece(cur, s.DevBlock+s.Len-cur, flags)
			refs = refs[:0]
			continue
		}
		// Reservations inside the hole: dirty pages not yet allocated.
		i, _ := slices.BinarySearch(delalloc, s.FileBlock)
		for ; i < len(delalloc) && delalloc[i] < s.End(); i++ {
			add(FiemapExtent{Logical: delalloc[i] * bs, Length: bs, Flags: FiemapExtentDelalloc | FiemapExtentUnknown})
		}
	}
	if len(out) > 0 {
		out[len(out)-1].Flags |= FiemapExtentLast
	}
	return out, nil
}

// fiemapFlags returns the FIEMAP flags of a mapped segment
// (iomap_to_fiemap), but FiemapExtentShared, which Fiemap adds per block.
func fiemapFlags(s extmap.Segment) uint32 {
	if s.State == meta.Unwritten {
		return FiemapExtentUnwritten
	}
	return 0
}

// delallocInLocked returns, sorted, the file blocks in [first, last] that
// hold a delayed-allocation reservation (dirty pages over a hole).
//
// Preconditions: in.mu is held.
func (in *inode) delallocInLocked(first, last uint64) []uint64 {
	var out []uint64
	for blk := range in.delalloc {
		if blk >= first && blk <= last {
			out = append(out, blk)
		}
	}
	slices.Sort(out)
	return out
}
