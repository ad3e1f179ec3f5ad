package fusefs

import (
	"errors"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// copyChunkBytes is the most CopyFileRange reads and writes at once: the
// size of its (pooled, aligned) buffer.
const copyChunkBytes = 1 << 20

// CopyFileRange answers COPY_FILE_RANGE (copy_file_range(2)), and
// COPY_FILE_RANGE_64 for a server that clamps Len so that the count fits
// in 32 bits (Len is clamped here too). It copies in.Len bytes from
// in.OffIn of the file open as in.FhIn to in.OffOut of the file open as
// in.FhOut, as XFS does without reflink (splice_copy_file_range):
//
//   - flags other than 0: EINVAL; a source not open for reading or a
//     destination not open for writing: EBADF (an O_APPEND destination
//     the kernel refuses itself, generic_copy_file_checks); a
//     directory: EISDIR; another non-regular file: EINVAL;
//   - the count is cut at the source's end of file: a copy from past it
//     copies 0 bytes, one across it is short;
//   - a range of one file overlapping the other range of the same file
//     (after that cut): EINVAL;
//   - the destination grows as needed; its mtime and ctime change and its
//     set-user-ID, set-group-ID (with group execute) and capabilities go,
//     as a write's do (generic_copy_file_checks, file_modified);
//   - an error after some bytes were copied ends the copy with the count
//     so far, as the kernel expects; a cancelled request too (EINTR if
//     nothing was copied yet).
//
// It clones first, as XFS's vfs_copy_file_range does
// (sluice.File.CloneBlocks, REMAP_FILE_CAN_SHORTEN): with block-aligned
// offsets, the largest whole-block prefix the clone rules allow (the
// source's EOF block too when the copy reaches both files' ends) is
// shared, not copied, and that prefix is the count returned: the caller's
// next call copies the rest. So cp --reflink=auto makes a reflink copy.
// What cannot be shared is copied at byte level inside the daemon: the
// data goes from the engine into a buffer and back into the engine, in
// pieces of copyChunkBytes, without a round trip through the kernel.
// Holes are not copied as data: SEEK_DATA and SEEK_HOLE on the source find
// them, a hole over data in the destination is punched there, one over a
// hole or past the destination's end of file is left alone (File.Extend
// grows the file when the copy ends in one), so a sparse source stays
// sparse.
//
// Reads use the source handle's engine file: on an engine-direct handle
// the engine's direct path, into the aligned buffer, reading the covering
// aligned range as Read does; otherwise the engine's buffered path. Writes
// whose offset, length and data are aligned go to the destination
// handle's direct path; the rest to its buffered companion, as Write does
// for unaligned writes (also under StrictDirectIO: copy_file_range has no
// alignment rule).
//
// FUSE does not say whether the caller has CAP_FSETID (no
// WRITE_KILL_SUIDGID for a copy), so privileges are always cleared, as
// for an unprivileged writer: the safe side. XFS keeps them for a caller
// with CAP_FSETID.
//
// The kernel holds the destination's inode lock across the request
// (fuse_copy_file_range), so the destination's size moves only through
// the copy itself; the copy is not atomic against other writers, as on
// XFS.
func (fs *FS) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	t := fs.start()
	defer fs.done(opCopyFileRange, t)
	if in.Flags != 0 {
		return 0, fuse.EINVAL
	}
	src, st := fs.getHandle(in.FhIn)
	if !st.Ok() {
		return 0, st
	}
	dst, st := fs.getHandle(in.FhOut)
	if !st.Ok() {
		return 0, st
	}
	if src.accMode == sluice.O_WRONLY || dst.accMode == sluice.O_RDONLY {
		return 0, fuse.EBADF
	}
	if in.OffIn > math.MaxInt64 || in.OffOut > math.MaxInt64 {
		return 0, fuse.EINVAL
	}
	offIn, offOut := int64(in.OffIn), int64(in.OffOut)
	n := int64(min(in.Len, math.MaxUint32))
	if offIn+n < offIn || offOut+n < offOut {
		return 0, fuse.Status(syscall.EOVERFLOW)
	}
	sa, err := src.f.Stat()
	if err != nil {
		return 0, fs.toStatus("copy_file_range", in.NodeId, err)
	}
	da, err := dst.f.Stat()
	if err != nil {
		return 0, fs.toStatus("copy_file_range", in.NodeIdOut, err)
	}
	for _, a := range []*sluice.Attr{&sa, &da} {
		if a.IsDir() {
			return 0, fuse.Status(syscall.EISDIR)
		}
		if !a.IsRegular() {
			return 0, fuse.EINVAL
		}
	}
	n = max(0, min(n, sa.Size-offIn))
	if sa.Ino == da.Ino && offOut+n > offIn && offOut < offIn+n {
		return 0, fuse.EINVAL
	}
	if n == 0 {
		return 0, fuse.OK
	}
	// A clone first, as vfs_copy_file_range tries remap_file_range with
	// REMAP_FILE_CAN_SHORTEN on XFS: the largest block-aligned prefix is
	// shared and returned as a short count (the caller's next call copies
	// the rest); if nothing can be shared, or the clone fails, copy.
	if cloned, err := dst.f.CloneBlocks(src.f, offIn, offOut, n); err == nil && cloned > 0 {
		return uint32(cloned), fuse.OK
	}
	if err := dst.f.Modified(0); err != nil {
		return 0, fs.toStatus("copy_file_range", in.NodeIdOut, err)
	}
	done, err := fs.copyRange(cancel, src, offIn, dst, offOut, n)
	if done > 0 {
		if err != nil && !errors.Is(err, syscall.EINTR) {
			fs.toStatus("copy_file_range", in.NodeIdOut, err) // logs an I/O error
		}
		return uint32(done), fuse.OK
	}
	return 0, fs.toStatus("copy_file_range", in.NodeIdOut, err)
}

// copyRange copies n bytes from off of src to doff of dst, region by
// region of the source's data and holes, and returns how many it copied.
func (fs *FS) copyRange(cancel <-chan struct{}, src *handle, off int64, dst *handle, doff, n int64) (int64, error) {
	chunk := max(copyChunkBytes, fs.ioUnit)
	buf := fs.bounce.get(int(chunk))
	defer fs.bounce.put(buf)
	end := off + n
	pos := off
	endsInHole := false
	for pos < end {
		select {
		case <-cancel:
			return pos - off, syscall.EINTR
		default:
		}
		data, err := src.f.Seek(pos, sluice.SeekData)
		if errors.Is(err, syscall.ENXIO) {
			// No data from pos on: a hole up to the end of file,
			// which may have moved since the count was cut.
			a, err := src.f.Stat()
			if err != nil {
				return pos - off, err
			}
			end = min(end, max(a.Size, pos))
			data = end
		} else if err != nil {
			return pos - off, err
		}
		data = min(data, end)
		if data > pos {
			if err := fs.copyHole(dst, doff+pos-off, data-pos); err != nil {
				return pos - off, err
			}
			pos = data
			endsInHole = true
			continue
		}
		hole, err := src.f.Seek(pos, sluice.SeekHole)
		if err != nil {
			return pos - off, err
		}
		hole = min(hole, end)
		if hole <= pos {
			return pos - off, nil // the source changed between the seeks
		}
		for pos < hole {
			// Pieces end at multiples of chunk, so that the covering
			// aligned range of a piece fits in buf.
			m := min(hole, (pos/chunk+1)*chunk) - pos
			b, err := fs.copyRead(src, buf, pos, int(m))
			if err != nil {
				return pos - off, err
			}
			if len(b) == 0 {
				return pos - off, nil // the source shrank
			}
			w, err := fs.copyWrite(dst, b, doff+pos-off)
			pos += int64(w)
			if err != nil {
				return pos - off, err
			}
			if int64(len(b)) < m {
				return pos - off, nil // the source shrank
			}
		}
		endsInHole = false
	}
	if endsInHole {
		if err := dst.f.Extend(doff + pos - off); err != nil {
			// The trailing hole was copied only as far as the
			// destination reaches.
			a, serr := dst.f.Stat()
			if serr != nil {
				return 0, err
			}
			return min(pos-off, max(0, a.Size-doff)), err
		}
	}
	return pos - off, nil
}

// copyHole makes [off, off+n) of dst read as zeros without writing zeros:
// data there is punched out, a hole or the range past the end of file is
// left (the caller extends the file at the end of the copy).
func (fs *FS) copyHole(dst *handle, off, n int64) error {
	data, err := dst.f.Seek(off, sluice.SeekData)
	if errors.Is(err, syscall.ENXIO) {
		return nil // no data from off on
	}
	if err != nil {
		return err
	}
	if data >= off+n {
		return nil
	}
	a, err := dst.f.Stat()
	if err != nil {
		return err
	}
	end := min(off+n, a.Size)
	if end <= data {
		return nil
	}
	return dst.f.Fallocate(sluice.FallocPunchHole|sluice.FallocKeepSize, data, end-data)
}

// copyRead reads up to m bytes at off of h for a copy and returns them, a
// slice of buf: fewer at the end of file. On an engine-direct handle it
// reads the covering aligned range into buf (which holds it: the caller's
// pieces do not cross a multiple of len(buf)).
func (fs *FS) copyRead(h *handle, buf []byte, off int64, m int) ([]byte, error) {
	if !h.engineDirect {
		k, err := h.f.Pread(buf[:m], off, 0)
		return buf[:k], err
	}
	lo := off / fs.ioUnit * fs.ioUnit
	hi := (off + int64(m) + fs.ioUnit - 1) / fs.ioUnit * fs.ioUnit
	k, err := h.f.Pread(buf[:hi-lo], lo, 0)
	if err != nil {
		return nil, err
	}
	skip := int(off - lo)
	if k <= skip {
		return nil, nil
	}
	return buf[skip:min(k, skip+m)], nil
}

// copyWrite writes b at off of h for a copy, as Write would: on an
// engine-direct handle the aligned part of an aligned start goes to the
// direct path, the rest to the buffered companion. Privileges are always
// cleared (see CopyFileRange).
func (fs *FS) copyWrite(h *handle, b []byte, off int64) (int, error) {
	if !h.engineDirect {
		return h.f.Pwrite(b, off, 0)
	}
	done := 0
	if off%fs.ioUnit == 0 && device.IsAligned(b, fs.memAlign) {
		k := int(int64(len(b)) / fs.ioUnit * fs.ioUnit)
		if k > 0 {
			w, err := h.f.Pwrite(b[:k], off, 0)
			done += w
			if err != nil || w < k || k == len(b) {
				return done, err
			}
		}
	}
	c, err := h.companion(fs.eng)
	if err != nil {
		return done, err
	}
	w, err := c.Pwrite(b[done:], off+int64(done), 0)
	return done + w, err
}
