package fusefs

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// File operations: open, create, read, write, release, flush, fsync,
// fallocate, lseek. See the package doc for how O_DIRECT and buffered opens
// map to the engine.

// openFlags are the open(2) flags the engine sees; the kernel passes the
// rest (O_CREAT, O_EXCL only on create) or handles them itself.
const openFlags = syscall.O_ACCMODE | sluice.O_TRUNC | sluice.O_SYNC | sluice.O_DSYNC | sluice.O_DIRECT | sluice.O_NOATIME

// plan says how an open maps to the engine and what the kernel is told.
type plan struct {
	engineFlags int    // flags for the engine file
	bufFlags    int    // flags for the buffered companion
	direct      bool   // the application opened O_DIRECT
	engDirect   bool   // the engine file is O_DIRECT
	openFlags   uint32 // FOPEN_* for the kernel, without the parallel bit
	append      bool   // the application opened O_APPEND
	accMode     int    // the application's access mode (O_ACCMODE)
}

// planOpen maps the application's open flags to the engine's and to the
// FOPEN flags.
//
// O_APPEND never reaches the engine: for O_APPEND writes the kernel sends
// the offset of the end of file (it holds the inode lock exclusive for
// them), and kernel writeback and mmap write dirty pages through any
// writable handle of the inode, which must write where they say.
//
// With the writeback cache an O_WRONLY open is O_RDWR in the engine: a
// write that covers part of a page the kernel does not cache makes it read
// the page first through the handle the write came with
// (fuse_write_begin), write-only or not. The kernel has checked the
// caller's access; the daemon's own checks use the application's mode
// (handle.accMode). libfuse's passthrough does the same.
func (fs *FS) planOpen(flags uint32) plan {
	f := int(flags) & openFlags
	p := plan{direct: f&sluice.O_DIRECT != 0, append: flags&sluice.O_APPEND != 0, accMode: f & syscall.O_ACCMODE}
	p.bufFlags = f &^ (sluice.O_DIRECT | sluice.O_TRUNC)
	switch {
	case p.direct:
		p.engDirect = true
		p.openFlags = fuse.FOPEN_DIRECT_IO
	case fs.opts.Cache == SluiceCache:
		p.openFlags = fuse.FOPEN_DIRECT_IO
	default:
		// KernelCache: the kernel caches; the daemon reads and writes
		// through, on the direct path when the kernel's page-sized
		// requests are aligned to the device's I/O unit (not on a
		// block-granular device with a larger unit, where the engine's
		// buffered path does the read-modify-write once per unit).
		p.engDirect = fs.ioUnit <= 4096
		p.openFlags = fuse.FOPEN_KEEP_CACHE
	}
	p.engineFlags = f &^ sluice.O_DIRECT
	if fs.opts.WritebackCache && p.accMode == sluice.O_WRONLY {
		p.engineFlags = p.engineFlags&^syscall.O_ACCMODE | sluice.O_RDWR
	}
	if p.engDirect {
		p.engineFlags |= sluice.O_DIRECT
	}
	return p
}

// finishOpen registers the engine file f under a new handle and fills the
// reply.
func (fs *FS) finishOpen(i sluice.Ino, f *sluice.File, p plan, out *fuse.OpenOut) {
	h := &handle{ino: i, f: f, direct: p.direct, engineDirect: p.engDirect, bufFlags: p.bufFlags, append: p.append, accMode: p.accMode}
	out.Fh = fs.handles.add(h)
	out.OpenFlags = p.openFlags
	if p.direct && f.ParallelDirectWrites() {
		out.OpenFlags |= fuse.FOPEN_PARALLEL_DIRECT_WRITES
	}
}

// Open answers OPEN. With CAP_ATOMIC_O_TRUNC, O_TRUNC arrives here and
// the engine truncates; with CAP_HANDLE_KILLPRIV_V2 the kernel asks for
// set-user-ID to be dropped when an unprivileged caller truncates.
func (fs *FS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := fs.start()
	defer fs.done(opOpen, t)
	p := fs.planOpen(in.Flags)
	i := ino(in.NodeId)
	if in.Mode&fuse.OPEN_KILL_SUIDGID != 0 && p.engineFlags&sluice.O_TRUNC != 0 {
		if m, ok, err := fs.killSuidgid(i); err != nil {
			return fs.toStatus("open", in.NodeId, err)
		} else if ok {
			if _, err := fs.eng.Setattr(i, sluice.SetAttr{Mode: &m}); err != nil {
				return fs.toStatus("open", in.NodeId, err)
			}
		}
	}
	f, err := fs.eng.OpenIno(i, p.engineFlags)
	if err != nil {
		return fs.toStatus("open", in.NodeId, err)
	}
	fs.finishOpen(i, f, p, out)
	return fuse.OK
}

// Create answers CREATE: create (O_EXCL: exclusively) and open.
func (fs *FS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	t := fs.start()
	defer fs.done(opCreate, t)
	p := fs.planOpen(in.Flags)
	parent := ino(in.NodeId)
	own, _, err := fs.ownerFor(parent, &in.Caller)
	if err != nil {
		return fs.toStatus("create", in.NodeId, err)
	}
	flags := p.engineFlags | sluice.O_CREAT | int(in.Flags)&sluice.O_EXCL
	f, a, err := fs.eng.CreateIno(parent, name, flags, in.Mode&0o7777, own)
	if err != nil {
		return fs.toStatus("create", in.NodeId, err)
	}
	fs.fillEntry(&a, &out.EntryOut)
	fs.finishOpen(a.Ino, f, p, &out.OpenOut)
	return fuse.OK
}

// Release answers RELEASE: the last close of an open file description.
// Closing the engine file frees an unlinked file.
func (fs *FS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	t := fs.start()
	defer fs.done(opRelease, t)
	if h := fs.handles.remove(in.Fh); h != nil {
		if err := h.close(); err != nil {
			fs.toStatus("release", in.NodeId, err)
		}
	}
}

// Flush answers FLUSH (each close(2)) with ENOSYS, which the kernel
// remembers (fc->no_flush): no close sends it again. Data written through
// sluice is in the engine already (with the writeback cache the kernel
// writes its dirty pages back before it would send FLUSH, whatever the
// answer), durability is fsync's business, and the kernel keeps POSIX
// and flock locks itself (no CAP_POSIX_LOCKS), so FLUSH has nothing to
// carry; it only cost a round trip per close.
func (fs *FS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	t := fs.start()
	defer fs.done(opFlush, t)
	return fuse.ENOSYS
}

// aligned reports whether [off, off+n) is aligned to the I/O unit.
func (fs *FS) aligned(off int64, n int) bool {
	return off%fs.ioUnit == 0 && int64(n)%fs.ioUnit == 0
}

// directOK reports whether b at off can go to the engine's direct path as
// it is: the range aligned to the I/O unit and the buffer to the memory
// alignment.
func (fs *FS) directOK(b []byte, off int64) bool {
	return fs.aligned(off, len(b)) && device.IsAligned(b, fs.memAlign)
}

// writeFlags are the engine flags of a WRITE: with
// CAP_HANDLE_KILLPRIV_V2 the kernel says, per write, whether the writer
// lacks CAP_FSETID and set-user-ID and friends must go.
func writeFlags(in *fuse.WriteIn) sluice.RWFlags {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID == 0 {
		return sluice.RWFKeepPrivs
	}
	return 0
}

// Read answers READ. On an engine-direct handle, an aligned read goes to
// the engine's direct path straight into go-fuse's reply buffer (no copy);
// an unaligned one reads the covering aligned range into a bounce buffer
// and copies out, so that O_DIRECT data never enters a cache.
func (fs *FS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := fs.start()
	defer fs.done(opRead, t)
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return nil, st
	}
	off, size := int64(in.Offset), int(in.Size)
	if size > len(buf) {
		size = len(buf)
	}
	dst := buf[:size]
	if !h.engineDirect {
		n, err := h.f.Pread(dst, off, 0)
		if err != nil {
			return nil, fs.toStatus("read", in.NodeId, err)
		}
		return fuse.ReadResultData(dst[:n]), fuse.OK
	}
	if fs.directOK(dst, off) {
		n, err := h.f.Pread(dst, off, 0)
		if err != nil {
			return nil, fs.toStatus("read", in.NodeId, err)
		}
		return fuse.ReadResultData(dst[:n]), fuse.OK
	}
	if !fs.aligned(off, size) {
		if h.direct && fs.opts.StrictDirectIO {
			return nil, fuse.EINVAL
		}
		if fs.metrics != nil {
			fs.metrics.unaligned.Inc()
		}
	}
	lo := off / fs.ioUnit * fs.ioUnit
	hi := (off + int64(size) + fs.ioUnit - 1) / fs.ioUnit * fs.ioUnit
	b := fs.bounce.get(int(hi - lo))
	defer fs.bounce.put(b)
	n, err := h.f.Pread(b, lo, 0)
	if err != nil {
		return nil, fs.toStatus("read", in.NodeId, err)
	}
	k := 0
	if skip := int(off - lo); n > skip {
		k = copy(dst, b[skip:n])
	}
	return fuse.ReadResultData(dst[:k]), fuse.OK
}

// writeFile picks the engine file that takes a WRITE of data at off on h:
// h's own, or, for a write not aligned to the I/O unit on an engine-direct
// handle, its buffered companion (EINVAL for O_DIRECT with
// StrictDirectIO). bounce says the data, aligned in range but not in
// memory, must be copied to an aligned buffer for the direct path.
func (fs *FS) writeFile(h *handle, data []byte, off int64) (f *sluice.File, bounce bool, err error) {
	if !h.engineDirect || fs.directOK(data, off) {
		return h.f, false, nil
	}
	if fs.aligned(off, len(data)) {
		return h.f, true, nil
	}
	if h.direct && fs.opts.StrictDirectIO {
		return nil, false, syscall.EINVAL
	}
	f, err = h.companion(fs.eng)
	return f, false, err
}

// countUnaligned counts a WRITE served on h's buffered companion f (see
// writeFile) in the unaligned O_DIRECT metric, once per WRITE: by the
// call that serves it.
func (fs *FS) countUnaligned(h *handle, f *sluice.File) {
	if f != h.f && h.direct && fs.metrics != nil {
		fs.metrics.unaligned.Inc()
	}
}

// Write answers WRITE. go-fuse places a WRITE's payload at a 4 KiB
// boundary, so an aligned write on an engine-direct handle goes to the
// engine's direct path without a copy. An unaligned one goes to the
// engine's buffered path through the handle's companion, which the engine
// keeps coherent with its direct path (a direct read writes back dirty
// cached pages of its range first; a direct write drops them).
func (fs *FS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := fs.start()
	defer fs.done(opWrite, t)
	if hook := fs.writeHook.Load(); hook != nil {
		defer (*hook)(in)()
	}
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return 0, st
	}
	off := int64(in.Offset)
	f, bounce, err := fs.writeFile(h, data, off)
	if err != nil {
		return 0, fs.toStatus("write", in.NodeId, err)
	}
	fs.countUnaligned(h, f)
	src := data
	if bounce {
		src = fs.bounce.get(len(data))
		defer fs.bounce.put(src)
		copy(src, data)
	}
	n, err := f.Pwrite(src, off, writeFlags(in))
	if err != nil && n == 0 {
		return 0, fs.toStatus("write", in.NodeId, err)
	}
	return uint32(n), fuse.OK
}

// Fsync answers FSYNC (fsync, and fdatasync when bit 0 of the flags is
// set): the engine writes back dirty pages, flushes the device and syncs
// the metadata.
func (fs *FS) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := fs.start()
	defer fs.done(opFsync, t)
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	var err error
	if in.FsyncFlags&1 != 0 {
		err = h.f.Fdatasync()
	} else {
		err = h.f.Fsync()
	}
	return fs.toStatus("fsync", in.NodeId, err)
}

// Fallocate answers FALLOCATE: the kernel passes only the modes FUSE knows
// (default, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, ZERO_RANGE with or without
// KEEP_SIZE), all of which the engine implements; COLLAPSE_RANGE and
// INSERT_RANGE never arrive (fuse_file_fallocate refuses them, see the
// package doc), and would be served if a kernel sent them.
func (fs *FS) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	t := fs.start()
	defer fs.done(opFallocate, t)
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	err := h.f.Fallocate(in.Mode, int64(in.Offset), int64(in.Length))
	return fs.toStatus("fallocate", in.NodeId, err)
}

// Lseek answers LSEEK, which the kernel sends for SEEK_DATA and
// SEEK_HOLE without writing its dirty pages back first (fuse_lseek). With
// the writeback cache the data written last may be only in the kernel's
// pages, where the engine would report a hole or ENXIO (and cp would skip
// it): LSEEK is answered ENOSYS, and the kernel then treats the file as
// all data up to the size it keeps (generic_file_llseek), which is
// coarse but true. Without it writes reach the engine before they return;
// pages dirtied through a shared mmap and not yet written back are the
// exception, as the package doc says.
func (fs *FS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := fs.start()
	defer fs.done(opLseek, t)
	if fs.opts.WritebackCache {
		return fuse.ENOSYS
	}
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	pos, err := h.f.Seek(int64(in.Offset), int(in.Whence))
	if err != nil {
		return fs.toStatus("lseek", in.NodeId, err)
	}
	out.Offset = uint64(pos)
	return fuse.OK
}

// tmpfileSeq numbers the hidden names Tmpfile creates.
var tmpfileSeq atomic.Uint64

// Tmpfile answers TMPFILE (open(2) with O_TMPFILE): an open file in no
// directory. The engine has no call for it, so the file is created under a
// hidden unique name and unlinked at once; a crash in between leaves that
// name behind, a crash after it leaves an orphan that the next mount frees.
func (fs *FS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	t := fs.start()
	defer fs.done(opCreate, t)
	p := fs.planOpen(in.Flags)
	parent := ino(in.NodeId)
	own, _, err := fs.ownerFor(parent, &in.Caller)
	if err != nil {
		return fs.toStatus("tmpfile", in.NodeId, err)
	}
	name := fmt.Sprintf(".sluice-tmpfile-%d-%d", os.Getpid(), tmpfileSeq.Add(1))
	f, _, err := fs.eng.CreateIno(parent, name, p.engineFlags|sluice.O_CREAT|sluice.O_EXCL, in.Mode&0o7777, own)
	if err != nil {
		return fs.toStatus("tmpfile", in.NodeId, err)
	}
	if err := fs.eng.UnlinkIno(parent, name); err != nil {
		f.Close()
		return fs.toStatus("tmpfile", in.NodeId, err)
	}
	a, err := f.Stat()
	if err != nil {
		f.Close()
		return fs.toStatus("tmpfile", in.NodeId, err)
	}
	fs.fillEntry(&a, &out.EntryOut)
	fs.finishOpen(a.Ino, f, p, &out.OpenOut)
	return fuse.OK
}
