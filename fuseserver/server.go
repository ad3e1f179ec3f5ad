package fuseserver

import (
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// FileSystem is what a Server serves: go-fuse's raw operations (the wire
// types stay go-fuse's). A FileSystem may also implement SyncFSer and
// Attacher.
// Methods are called from many goroutines at once.
type FileSystem = fuse.RawFileSystem

// SyncFSer is a FileSystem that answers FUSE_SYNCFS, which go-fuse's
// interface lacks; without it SYNCFS gets ENOSYS and the kernel stops
// sending it (sync(1) then makes nothing of the mount durable).
type SyncFSer interface {
	// SyncFS answers FUSE_SYNCFS (syncfs(2), sync(1)): everything written
	// before it is durable when it returns.
	SyncFS(cancel <-chan struct{}, h *fuse.InHeader) fuse.Status
}

// Transport is how requests travel between the kernel and the server.
type Transport int

const (
	// TransportAuto is io_uring when the kernel offers it, /dev/fuse
	// otherwise. It is the default: io_uring served by its owner threads
	// beats /dev/fuse on every O_DIRECT case measured
	// (docs/ARCHITECTURE.md, "FUSE").
	TransportAuto Transport = iota
	// TransportDevFuse reads requests from /dev/fuse and writes replies
	// to it, one system call each.
	TransportDevFuse
	// TransportURing receives requests as io_uring completions and
	// answers each with the command that also fetches the next
	// (FUSE_IO_URING_CMD_COMMIT_AND_FETCH). Mount fails if the kernel
	// cannot.
	TransportURing
)

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportDevFuse:
		return "devfuse"
	case TransportURing:
		return "uring"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// ParseTransport parses auto, uring or devfuse.
func ParseTransport(s string) (Transport, error) {
	for _, t := range []Transport{TransportAuto, TransportDevFuse, TransportURing} {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown FUSE transport %q (want auto, devfuse or uring)", s)
}

// Config configures a mount and its server.
type Config struct {
	// Name is the file system type's subtype: the mount shows as
	// fuse.Name. FsName is the mount's source (what df shows).
	Name, FsName string
	// MaxWrite is the largest WRITE (and READ) the kernel sends, in
	// bytes; a multiple of the page size, at most 1 MiB on Linux.
	MaxWrite int
	// MaxReadAhead is the kernel's readahead window for the mount, in
	// bytes, set through the mount's bdi (read_ahead_kb) when the server
	// runs as root, since INIT can only lower FUSE's 128 KiB (0: the
	// kernel's).
	MaxReadAhead int
	// DirtyRatio is the mount's share, in percent, of the kernel's dirty
	// page limit (the bdi's max_ratio; FUSE's is 1), set when the server
	// runs as root (0: the kernel's).
	DirtyRatio int
	// MaxBackground is how many background requests (readahead,
	// writeback, async direct I/O) the kernel keeps in flight.
	MaxBackground int
	// Capabilities are INIT flags asked for on top of the base set
	// (see doc.go), each granted only if the kernel offers it.
	Capabilities uint64
	// Transport chooses /dev/fuse or io_uring.
	Transport Transport
	// URingDepth is the number of ring entries per kernel queue (one
	// queue per possible CPU); each holds a MaxWrite payload buffer.
	URingDepth int
	// URingIssuer chooses the thread that issues ring commands (see
	// fuseuring.Issuer): by default each queue's owner thread, which also
	// serves the quick requests.
	URingIssuer fuseuring.Issuer
	// URingNoLend keeps device I/O off the queues' rings. By default an
	// owner thread lends its ring to the device reads and writes of the
	// READs and WRITEs it starts (fuseuring.Queue.Lend, uring.Host), so
	// that one io_uring_enter submits replies and device I/O together and
	// the owner reaps both.
	URingNoLend bool
	// MaxReaders bounds the goroutines reading /dev/fuse; they are
	// started as the load needs them.
	MaxReaders int

	// MountFlags are mount(2)'s flags (root mounts).
	MountFlags uintptr
	// Options are the mount options passed by name: FUSE data options
	// for mount(2), or every option for fusermount3.
	Options []string
	// AllowOther lets every user use the mount.
	AllowOther bool
	// Fusermount mounts through fusermount3 (a mount by a user who is
	// not root) instead of calling mount(2).
	Fusermount bool

	// Logger gets problems worth an operator's attention.
	Logger *log.Logger
	// PanicHandler answers a request whose handler panicked (nil: EIO).
	PanicHandler func(any) fuse.Status
	// Debug logs every request and its status.
	Debug bool
}

// Stats counts what a server did.
type Stats struct {
	// DevFuseRequests and URingRequests count requests by the way they
	// arrived, INIT included in DevFuseRequests.
	DevFuseRequests, URingRequests uint64
	// URingInline counts the io_uring requests served on their queue's
	// owner thread, without a hand-off (handler.quick).
	URingInline uint64
	// URingBorrowed counts the device I/Os that travelled on the queues'
	// rings (URingNoLend).
	URingBorrowed uint64
	// Interrupts counts INTERRUPTs; InterruptsMatched those that found
	// their request in flight.
	Interrupts, InterruptsMatched uint64
}

// Server serves one mount.
type Server struct {
	fs     FileSystem
	cfg    Config
	dir    string
	fd     int
	logger *log.Logger

	init      negotiated // Immutable after Mount.
	transport Transport  // Immutable after Mount: the one in use.
	why       string     // Immutable: why that transport.
	stDev     uint64     // Immutable after Mount: the mount's st_dev (Dev).

	slotsMu sync.Mutex
	slots   []*slot

	lastLog                                 atomic.Int64 // unix nanoseconds of logEvery's last line
	devRequests, uringRequests, uringInline atomic.Uint64
	interrupts, matched                     atomic.Uint64

	dev   *devFuse
	uring *uringTransport
	probe pollProbe
	// async is fs as an AsyncIO, if it is one. Immutable.
	async AsyncIO

	done chan struct{} // closed when every transport has ended
}

// Mount mounts fs on dir, answers the kernel's INIT, starts the transports
// and returns the server, which serves until the mount ends (an unmount,
// or an abort of the connection).
func Mount(fs FileSystem, dir string, cfg Config) (*Server, error) {
	if cfg.MaxWrite <= 0 {
		cfg.MaxWrite = 1 << 20
	}
	if cfg.MaxBackground <= 0 {
		cfg.MaxBackground = 128
	}
	if cfg.URingDepth <= 0 {
		cfg.URingDepth = 64
	}
	if cfg.MaxReaders <= 0 {
		cfg.MaxReaders = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = log.New(os.Stderr, "", log.LstdFlags)
	}
	if cfg.Name == "" {
		cfg.Name = "fuse"
	}
	s := &Server{fs: fs, cfg: cfg, dir: dir, logger: cfg.Logger, done: make(chan struct{})}
	s.async, _ = fs.(AsyncIO)
	offer, why, err := s.chooseTransport()
	if err != nil {
		return nil, err
	}
	s.why = why
	fd, err := mount(dir, &cfg)
	if err != nil {
		return nil, err
	}
	s.fd = fd
	s.dev = newDevFuse(s)
	if err := s.dev.answerInit(offer); err != nil {
		s.abort()
		unix.Close(fd)
		return nil, fmt.Errorf("mounting on %s: %w", dir, err)
	}
	if s.stDev, err = mountDev(dir); err != nil {
		s.logger.Printf("fuseserver: the mount's device number: %v", err)
	}
	s.tuneBDI() // after the INIT reply, which would lower the readahead again
	if a, ok := fs.(Attacher); ok {
		a.Attach(s)
	}
	s.transport = TransportDevFuse
	if offer && s.init.flags&capOverIOURing == 0 {
		if cfg.Transport == TransportURing {
			s.abort()
			unix.Close(fd)
			return nil, fmt.Errorf("mounting on %s: the kernel did not offer FUSE over io_uring in INIT", dir)
		}
		s.why = "/dev/fuse: the kernel did not offer io_uring in INIT"
	}
	if s.init.flags&capOverIOURing != 0 {
		u, err := startURing(s)
		switch {
		case err == nil:
			s.uring = u
			s.transport = TransportURing
		case cfg.Transport == TransportURing:
			s.abort()
			unix.Close(fd)
			return nil, fmt.Errorf("mounting on %s: FUSE over io_uring: %w", dir, err)
		default:
			// The kernel falls back to /dev/fuse when a queue cannot
			// register, so the mount still works.
			s.why = fmt.Sprintf("/dev/fuse: io_uring was offered but registering the rings failed (%v)", err)
		}
	}
	s.dev.start()
	if s.uring != nil {
		s.uring.start()
	}
	go s.waitTransports()
	if err := s.probePoll(); err != nil {
		s.logger.Printf("fuseserver: %v (a process that opens files on its own mount may deadlock)", err)
	}
	return s, nil
}

// chooseTransport decides whether to offer io_uring in INIT, enabling the
// kernel's switch when the daemon runs as root, and says why.
func (s *Server) chooseTransport() (offer bool, why string, err error) {
	if s.cfg.Transport == TransportDevFuse {
		return false, "/dev/fuse (asked for)", nil
	}
	if err := uringSupported(); err != nil {
		if s.cfg.Transport == TransportURing {
			return false, "", fmt.Errorf("FUSE over io_uring: %w", err)
		}
		return false, fmt.Sprintf("/dev/fuse: %v", err), nil
	}
	changed, err := uringEnable()
	if err != nil {
		if s.cfg.Transport == TransportURing {
			return false, "", fmt.Errorf("FUSE over io_uring: %w", err)
		}
		return false, fmt.Sprintf("/dev/fuse: %v", err), nil
	}
	why = "io_uring (the kernel offers it)"
	if changed {
		why = "io_uring (enabled /sys/module/fuse/parameters/enable_uring)"
	}
	return true, why, nil
}

// Transport returns the transport in use and why it was chosen.
func (s *Server) Transport() (Transport, string) { return s.transport, s.why }

// Dir returns the mount point.
func (s *Server) Dir() string { return s.dir }

// Done is closed when the mount has ended and every request has been
// answered.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		DevFuseRequests:   s.devRequests.Load(),
		URingRequests:     s.uringRequests.Load(),
		URingInline:       s.uringInline.Load(),
		URingBorrowed:     s.uringBorrowed(),
		Interrupts:        s.interrupts.Load(),
		InterruptsMatched: s.matched.Load(),
	}
}

// waitTransports closes done once every transport goroutine has ended.
func (s *Server) waitTransports() {
	s.dev.wait()
	if s.uring != nil {
		s.uring.wait()
	}
	unix.Close(s.fd)
	s.fs.OnUnmount()
	close(s.done)
}

// abort ends a mount that cannot be completed: it detaches the mount, and
// the caller's close of the /dev/fuse descriptor (the last one) then
// aborts the connection. It never touches the mount point: before INIT is
// answered, a stat of it would wait for an answer nobody gives.
func (s *Server) abort() {
	_ = unix.Unmount(s.dir, unix.MNT_DETACH)
}

// newSlot registers a serving goroutine's interrupt slot.
func (s *Server) newSlot() *slot {
	sl := &slot{}
	s.slotsMu.Lock()
	s.slots = append(s.slots, sl)
	s.slotsMu.Unlock()
	return sl
}

// interrupt closes the cancel channel of the request unique. EAGAIN tells
// the kernel to send the INTERRUPT again: the request may not have reached
// a serving goroutine yet (on io_uring it travels on another channel).
func (s *Server) interrupt(unique uint64) fuse.Status {
	s.interrupts.Add(1)
	s.slotsMu.Lock()
	slots := s.slots
	s.slotsMu.Unlock()
	for _, sl := range slots {
		if sl.interrupt(unique) {
			s.matched.Add(1)
			return fuse.OK
		}
	}
	return fuse.EAGAIN
}

// serve runs the request's handler. It reports whether the kernel expects
// a reply.
func (s *Server) serve(r *request, h *handler) (reply bool) {
	if s.probe.serve(r) {
		return !h.noReply
	}
	if h.noReply {
		s.call(r, h)
		return false
	}
	if h.serve == nil {
		r.status = fuse.ENOSYS
		return true
	}
	r.slot.begin(r.header().Unique)
	s.call(r, h)
	r.slot.end()
	if s.cfg.Debug {
		hdr := r.header()
		s.logger.Printf("fuseserver: %s unique=%d node=%d: %v (%d bytes)", h.name, hdr.Unique, hdr.NodeId, r.status, r.replyLen())
	}
	return true
}

// call runs h, turning a panic into the PanicHandler's answer.
func (s *Server) call(r *request, h *handler) {
	defer func() {
		if p := recover(); p != nil {
			r.status = fuse.EIO
			if s.cfg.PanicHandler != nil {
				r.status = s.cfg.PanicHandler(p)
			} else {
				buf := make([]byte, 64<<10)
				s.logger.Printf("fuseserver: panic in %s: %v\n%s", h.name, p, buf[:runtime.Stack(buf, false)])
			}
		}
	}()
	h.serve(s, r)
}

// logEvery logs msg unless something was logged less than a second ago.
func (s *Server) logEvery(msg string) {
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.logger.Print(msg)
}

// errStopped reports that the connection has ended.
var errStopped = errors.New("FUSE connection ended")
