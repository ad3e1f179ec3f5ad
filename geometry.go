package sluice

import "github.com/sluicefs/sluice/extmap"

// Byte, block, page and device-offset arithmetic shared by every path. It
// calls nothing.

// blockRange returns the file blocks [first, first+n) that cover the byte
// range [off, end).
func (fs *FS) blockRange(off, end int64) (first, n uint64) {
	first = uint64(off >> fs.blockShift)
	last := uint64((end + fs.blockSize - 1) >> fs.blockShift)
	return first, last - first
}

// clip returns the byte range where segment s meets [off, end).
func (fs *FS) clip(s extmap.Segment, off, end int64) (lo, hi int64) {
	lo = max(off, int64(s.FileBlock)<<fs.blockShift)
	hi = min(end, int64(s.FileBlock+s.Len)<<fs.blockShift)
	return lo, hi
}

// devOffset returns the device byte offset of file byte pos, which lies in
// mapped segment s.
func (fs *FS) devOffset(s extmap.Segment, pos int64) int64 {
	return int64(s.DevBlock)<<fs.blockShift + pos - int64(s.FileBlock)<<fs.blockShift
}

// pageRange returns the indexes of the first and last pages that hold
// bytes of [off, end) (end > off).
func (in *inode) pageRange(off, end int64) (first, last uint64) {
	ps := int64(in.fs.cache.PageSize())
	if end <= off {
		end = off + 1
	}
	return uint64(off / ps), uint64((end - 1) / ps)
}

// pageLen returns how many bytes of page idx lie below EOF size (the NFS
// client's nfs_folio_length): 0 for a page wholly past EOF.
func (in *inode) pageLen(idx uint64, size int64) int {
	ps := int64(in.fs.cache.PageSize())
	start := int64(idx) * ps
	if size <= start {
		return 0
	}
	return int(min(ps, size-start))
}

func roundUp(x, to int64) int64   { return (x + to - 1) / to * to }
func roundDown(x, to int64) int64 { return x / to * to }
