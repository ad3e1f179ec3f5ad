package fusefs

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/fuseserver"
)

// FS serves a sluice file system over FUSE: it implements
// fuse.RawFileSystem. Create it with New (or let Mount do it). Its methods
// are called by go-fuse, each request on its own goroutine.
type FS struct {
	fuse.RawFileSystem // ENOSYS for what sluice does not serve (POSIX locks, BMAP, ...)

	eng  *sluice.FS // Immutable.
	opts Options    // Immutable, defaults filled.

	// ioUnit and memAlign are the engine's O_DIRECT alignment for offsets
	// and lengths and for buffer addresses. Immutable.
	ioUnit   int64
	memAlign int

	// Reply timeouts, split once into seconds and nanoseconds. Immutable.
	entryTTL, attrTTL, negTTL ttl

	metrics  *Metrics // Immutable; nil when not recording.
	handles  handleTable
	ioErrLog ioErrorLog
	bounce   bouncePool

	// srv is the server of the mount, for notifications and the mount's
	// device number. Set by Attach before the first request is served,
	// then immutable; nil when FS is served by no fuseserver (tests).
	srv *fuseserver.Server

	// panicHook, when set (tests only), runs at the start of Lookup with
	// the looked-up name: a test makes it panic to check that the mount
	// survives.
	panicHook atomic.Pointer[func(name string)]
	// writeHook, when set (tests only), runs at the start of Write with
	// the request, and the function it returns runs when Write is done
	// with the engine, before the reply: a test counts the WRITEs of an
	// inode in flight at the daemon, and may hold them there.
	writeHook atomic.Pointer[func(in *fuse.WriteIn) (done func())]
}

// FS overrides go-fuse's defaults with go-fuse's own signatures
// (CopyFileRange, Statx, ...), so it stays a fuse.RawFileSystem.
var (
	_ fuse.RawFileSystem  = (*FS)(nil)
	_ fuseserver.SyncFSer = (*FS)(nil)
	_ fuseserver.Attacher = (*FS)(nil)
)

// ttl is a timeout as the FUSE protocol carries it.
type ttl struct {
	sec  uint64
	nsec uint32
}

func toTTL(d time.Duration) ttl {
	return ttl{sec: uint64(d / time.Second), nsec: uint32(d % time.Second)}
}

// New returns the FUSE face of eng. The caller keeps eng: closing it after
// the mount ends is the caller's job (Mount's Server does it on request).
func New(eng *sluice.FS, o *Options) (*FS, error) {
	opts := *o.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	fs := &FS{
		RawFileSystem: fuse.NewDefaultRawFileSystem(),
		eng:           eng,
		opts:          opts,
		ioUnit:        int64(eng.IOUnit()),
		memAlign:      device.MemAlign(eng.IOUnit()),
		entryTTL:      toTTL(opts.EntryTimeout),
		attrTTL:       toTTL(opts.AttrTimeout),
		negTTL:        toTTL(opts.NegativeTimeout),
		metrics:       opts.Metrics,
	}
	if fs.metrics != nil {
		fs.metrics.watch(eng)
	}
	return fs, nil
}

// Attach is called by fuseserver.Mount once INIT is answered, before any
// other request: FS keeps the server to send it notifications
// (InvalidateInode after an exchange) and to know the mount's device.
func (fs *FS) Attach(s *fuseserver.Server) { fs.srv = s }

// Engine returns the file system being served.
func (fs *FS) Engine() *sluice.FS { return fs.eng }

// Options returns the options in force, defaults filled.
func (fs *FS) Options() Options { return fs.opts }

// String names the file system type: the mount shows as fuse.sluice.
func (fs *FS) String() string { return "sluice" }

// panicHandler answers a request whose handler panicked: EIO for the
// caller, the stack for the log, and the mount keeps serving.
func (fs *FS) panicHandler(r any) fuse.Status {
	buf := make([]byte, 64<<10)
	buf = buf[:runtime.Stack(buf, false)]
	fs.opts.Logger.Printf("sluice: panic in a FUSE handler (answered EIO): %v\n%s", r, buf)
	if fs.metrics != nil {
		fs.metrics.panics.Inc()
	}
	return fuse.EIO
}

// start begins timing request o; the returned value goes to done.
func (fs *FS) start() time.Time {
	if fs.metrics == nil {
		return time.Time{}
	}
	return time.Now()
}

func (fs *FS) done(o op, t time.Time) {
	if fs.metrics != nil {
		fs.metrics.observe(o, t)
	}
}

// fillAttr converts engine attributes to the wire format.
func fillAttr(a *sluice.Attr, out *fuse.Attr) {
	*out = fuse.Attr{
		Ino:       uint64(a.Ino),
		Size:      uint64(a.Size),
		Blocks:    uint64(a.Blocks),
		Atime:     uint64(a.Atime.Unix()),
		Atimensec: uint32(a.Atime.Nanosecond()),
		Mtime:     uint64(a.Mtime.Unix()),
		Mtimensec: uint32(a.Mtime.Nanosecond()),
		Ctime:     uint64(a.Ctime.Unix()),
		Ctimensec: uint32(a.Ctime.Nanosecond()),
		Mode:      a.Mode,
		Nlink:     a.Nlink,
		Owner:     fuse.Owner{Uid: a.Uid, Gid: a.Gid},
		Rdev:      a.Rdev,
		Blksize:   uint32(a.Blksize),
	}
}

// fillEntry answers a lookup (or a create) with a, using the engine's inode
// number as the node ID: the kernel's and the engine's inode numbers are
// the same, so no table maps one to the other.
func (fs *FS) fillEntry(a *sluice.Attr, out *fuse.EntryOut) {
	out.NodeId = uint64(a.Ino)
	out.Generation = a.Gen
	out.EntryValid, out.EntryValidNsec = fs.entryTTL.sec, fs.entryTTL.nsec
	out.AttrValid, out.AttrValidNsec = fs.attrTTL.sec, fs.attrTTL.nsec
	fillAttr(a, &out.Attr)
}

func (fs *FS) fillAttrOut(a *sluice.Attr, out *fuse.AttrOut) {
	out.AttrValid, out.AttrValidNsec = fs.attrTTL.sec, fs.attrTTL.nsec
	fillAttr(a, &out.Attr)
}

// ino converts a FUSE node ID to an engine inode number. They are equal:
// the root's node ID (FUSE_ROOT_ID, 1) is sluice.RootIno.
func ino(nodeID uint64) sluice.Ino { return sluice.Ino(nodeID) }

// handle is an open file or directory: what a FUSE file handle (Fh)
// stands for.
type handle struct {
	ino sluice.Ino // Immutable.
	// f is the engine file. It is open O_DIRECT in the engine when
	// engineDirect is set. Immutable.
	f *sluice.File
	// direct says the application opened the file O_DIRECT (the open was
	// answered FOPEN_DIRECT_IO). Immutable.
	direct bool
	// engineDirect says f is open O_DIRECT in the engine: for O_DIRECT
	// opens, and for buffered opens in KernelCache mode, whose reads are
	// page-aligned and whose data the kernel caches. Immutable.
	engineDirect bool
	// bufFlags are the flags to open the buffered companion with.
	// Immutable.
	bufFlags int
	// append says the file was opened O_APPEND, which OPEN and CREATE
	// carry but never reaches the engine (planOpen); a later
	// fcntl(F_SETFL) is not sent to the daemon, so it is the open's.
	// Immutable.
	append bool
	// accMode is the application's access mode (O_ACCMODE), which f's
	// may exceed (planOpen: O_WRONLY is O_RDWR with the writeback cache).
	// Immutable.
	accMode int

	mu struct {
		sync.Mutex
		// buffered is the companion engine file without O_DIRECT that
		// serves writes not aligned to the I/O unit on an engineDirect
		// handle, opened on first use. Protected by mu (set once; read
		// after mu).
		buffered *sluice.File
		// ents is the directory listing being read, with "." and ".."
		// first; entry i has offset i+1. It is taken at the first
		// READDIR and again at every READDIR from offset 0, so that
		// offsets stay valid for seekdir. Protected by mu.
		ents []sluice.DirEntry
	}
}

// companion returns the buffered companion of h, opening it if needed.
func (h *handle) companion(eng *sluice.FS) (*sluice.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.buffered != nil {
		return h.mu.buffered, nil
	}
	f, err := eng.OpenIno(h.ino, h.bufFlags)
	if err != nil {
		return nil, err
	}
	h.mu.buffered = f
	return f, nil
}

// close closes the engine files of h.
func (h *handle) close() error {
	h.mu.Lock()
	b := h.mu.buffered
	h.mu.buffered = nil
	h.mu.Unlock()
	var err error
	if b != nil {
		err = b.Close()
	}
	if e := h.f.Close(); err == nil {
		err = e
	}
	return err
}

// handleTable maps FUSE file handles to handles. Handle numbers start at
// 1 and are reused after release.
type handleTable struct {
	mu sync.RWMutex
	// hs[i] is the handle numbered i+1, or nil. Protected by mu.
	hs []*handle
	// free lists unused numbers. Protected by mu.
	free []uint64
}

func (t *handleTable) add(h *handle) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		fh := t.free[n-1]
		t.free = t.free[:n-1]
		t.hs[fh-1] = h
		return fh
	}
	t.hs = append(t.hs, h)
	return uint64(len(t.hs))
}

func (t *handleTable) get(fh uint64) *handle {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if fh == 0 || fh > uint64(len(t.hs)) {
		return nil
	}
	return t.hs[fh-1]
}

func (t *handleTable) remove(fh uint64) *handle {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fh == 0 || fh > uint64(len(t.hs)) || t.hs[fh-1] == nil {
		return nil
	}
	h := t.hs[fh-1]
	t.hs[fh-1] = nil
	t.free = append(t.free, fh)
	return h
}

// count returns the number of open handles.
func (t *handleTable) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.hs) - len(t.free)
}

// OpenHandles returns the number of files and directories the kernel has
// open on the mount.
func (fs *FS) OpenHandles() int { return fs.handles.count() }

// getHandle returns the handle fh, or EBADF.
func (fs *FS) getHandle(fh uint64) (*handle, fuse.Status) {
	h := fs.handles.get(fh)
	if h == nil {
		return nil, fuse.EBADF
	}
	return h, fuse.OK
}

// bouncePool hands out aligned buffers for O_DIRECT requests whose
// request buffer is not aligned or whose range is not (rare): one pool
// per power-of-two size from 4 KiB to 4 MiB.
type bouncePool struct {
	pools [11]sync.Pool
}

func sizeClass(n int) int {
	c := 0
	for s := 4096; s < n; s <<= 1 {
		c++
	}
	return c
}

// get returns an aligned buffer of n bytes; put it back with put.
func (p *bouncePool) get(n int) []byte {
	c := sizeClass(n)
	if c >= len(p.pools) {
		return device.AlignedBuf(n)
	}
	if b, ok := p.pools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return device.AlignedBuf(4096 << c)[:n]
}

func (p *bouncePool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.pools) || cap(b) != 4096<<c {
		return
	}
	b = b[:cap(b)]
	p.pools[c].Put(&b)
}

// ownerFor returns who owns a new inode created by caller in directory
// parent, and the set-group-ID bit a new directory inherits: in a
// set-group-ID directory, new inodes take the directory's group, and new
// directories keep the bit (as ext4 and XFS do, inode_init_owner).
func (fs *FS) ownerFor(parent sluice.Ino, caller *fuse.Caller) (sluice.Owner, uint32, error) {
	own := sluice.Owner{Uid: caller.Uid, Gid: caller.Gid}
	a, err := fs.eng.Getattr(parent)
	if err != nil {
		return own, 0, err
	}
	if a.Mode&syscall.S_ISGID != 0 {
		return sluice.Owner{Uid: caller.Uid, Gid: a.Gid}, syscall.S_ISGID, nil
	}
	return own, 0, nil
}
