package fuseuring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/uring"
)

// ErrStopped is returned by Wait once the kernel has ended the connection
// (abort through /sys/fs/fuse/connections/N/abort, unmount, or a fatal
// error): the kernel completed a ring command with ENOTCONN, ECONNABORTED
// or ECANCELED. The error Wait returns wraps both ErrStopped and the errno.
var ErrStopped = errors.New("fuseuring: connection ended")

// ErrClosed is returned by a Queue method called after Close.
var ErrClosed = errors.New("fuseuring: queue closed")

// Config says how to start the ring queues of one FUSE connection.
type Config struct {
	// Fd is the connection's /dev/fuse descriptor. The INIT reply must
	// already have been written to it, with FUSE_INIT_EXT and
	// FlagOverIOURing, while enable_uring was on. Start does not take
	// ownership: close Fd after closing the queues.
	Fd int
	// Queues is the number of queues, one per possible CPU; the kernel's
	// ring becomes ready only when each of its queues has an entry, and
	// refuses a queue index beyond them, so any other value is an error.
	// The default value is PossibleCPUs().
	Queues int
	// Depth is the number of ring entries per queue: how many requests
	// that ran on one CPU the server can hold at once. The default value
	// is 8.
	Depth int
	// PayloadSize is the size in bytes of each entry's payload buffer,
	// rounded up to the page size. It must be at least MaxPayload of the
	// INIT reply, or REGISTER fails with EINVAL. The default value is
	// 1 MiB (MaxPayload for max_write 1 MiB and max_pages 256 with 4 KiB
	// pages).
	PayloadSize int
	// SQPollIdle is how long the kernel thread that submits the queues'
	// commands (one per connection, shared by all queues) keeps polling
	// for new commits after the last one before it sleeps; a Commit that
	// finds it asleep wakes it with one io_uring_enter. Millisecond
	// granularity. Used with IssueSQPoll only. The default value is 10ms.
	SQPollIdle time.Duration
	// Issuer says which thread issues the ring commands, and so runs the
	// kernel's task work that delivers requests (see the package
	// documentation). The default value is IssueOwner.
	Issuer Issuer
}

// Issuer is the way a queue's commands reach the kernel.
type Issuer int

const (
	// IssueOwner: each queue has an owner goroutine, locked to its own OS
	// thread, which registers the entries and then runs Serve's loop:
	// one io_uring_enter submits every reply committed since its last
	// pass and waits for the next requests, which it hands to Serve's
	// function on the same thread. A Commit made there costs no system
	// call; a Commit from another goroutine publishes its SQE and, only
	// if the owner sleeps in the kernel, wakes it through an eventfd whose
	// read is always armed on the ring. Nothing spins. Queues are served
	// with Serve, not Wait.
	IssueOwner Issuer = iota
	// IssueSQPoll: one SQ polling kernel thread per connection issues
	// every command (IORING_SETUP_SQPOLL, IORING_SETUP_ATTACH_WQ). A
	// Commit while it polls makes no system call; it spins for
	// Config.SQPollIdle after each burst.
	IssueSQPoll
	// IssueThread: one OS thread per queue, locked to an internal
	// goroutine that does nothing but io_uring_enter, issues the
	// commands. A Commit wakes it through a channel (commits that arrive
	// while it is busy are issued together); nothing spins.
	IssueThread
)

func (i Issuer) String() string {
	switch i {
	case IssueOwner:
		return "owner"
	case IssueSQPoll:
		return "sqpoll"
	case IssueThread:
		return "thread"
	}
	return fmt.Sprintf("Issuer(%d)", int(i))
}

// ParseIssuer parses owner, sqpoll or thread.
func ParseIssuer(s string) (Issuer, error) {
	for _, i := range []Issuer{IssueOwner, IssueSQPoll, IssueThread} {
		if s == i.String() {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown io_uring issuer %q (want owner, sqpoll or thread)", s)
}

// DefaultPayloadSize is Config.PayloadSize's default.
const DefaultPayloadSize = 1 << 20

// EnsureDefaults fills in the fields left zero.
func (c *Config) EnsureDefaults() error {
	if c.Queues == 0 {
		n, err := PossibleCPUs()
		if err != nil {
			return err
		}
		c.Queues = n
	}
	if c.Depth == 0 {
		c.Depth = 8
	}
	if c.PayloadSize == 0 {
		c.PayloadSize = DefaultPayloadSize
	}
	if c.SQPollIdle == 0 {
		c.SQPollIdle = 10 * time.Millisecond
	}
	return nil
}

// Validate reports every problem with c at once. It checks Queues against
// PossibleCPUs.
func (c Config) Validate() error {
	var errs []error
	if c.Fd < 0 {
		errs = append(errs, fmt.Errorf("bad Fd %d: not a descriptor", c.Fd))
	}
	if n, err := PossibleCPUs(); err != nil {
		errs = append(errs, err)
	} else if c.Queues != n {
		errs = append(errs, fmt.Errorf("bad Queues %d: the kernel makes one queue per possible CPU (%d)", c.Queues, n))
	}
	if c.Depth < 1 || c.Depth > 4096 {
		errs = append(errs, fmt.Errorf("bad Depth %d: outside [1, 4096]", c.Depth))
	}
	if c.PayloadSize < MinReadBuffer || c.PayloadSize > 1<<30 {
		errs = append(errs, fmt.Errorf("bad PayloadSize %d: outside [%d, 1 GiB]", c.PayloadSize, MinReadBuffer))
	}
	if c.Issuer != IssueOwner && c.Issuer != IssueSQPoll && c.Issuer != IssueThread {
		errs = append(errs, fmt.Errorf("bad Issuer %d", int(c.Issuer)))
	}
	if c.SQPollIdle < time.Millisecond || c.SQPollIdle > 10*time.Second {
		errs = append(errs, fmt.Errorf("bad SQPollIdle %v: outside [1ms, 10s]", c.SQPollIdle))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("fuseuring: invalid Config: %w", errors.Join(errs...))
}

// String describes c for logs and benchmark records.
func (c Config) String() string {
	return fmt.Sprintf("fd=%d queues=%d depth=%d payload=%d issuer=%v sqpoll_idle=%v", c.Fd, c.Queues, c.Depth, c.PayloadSize, c.Issuer, c.SQPollIdle)
}

// Entry states. An entry is owned by the kernel (a command is outstanding
// on it), by the server (a request arrived and is not yet committed), or
// is dead (its last command failed; the kernel will not use it again).
const (
	entKernel uint32 = iota
	entServer
	entDead
)

// Entry is one registered ring entry: a 288-byte header and a payload
// buffer, both in memory mapped by Start. Between the Wait that returned
// it and the Commit that re-arms it, the entry belongs to the server, and
// the kernel does not touch its buffers.
type Entry struct {
	q   *Queue // Immutable.
	idx int    // Index in q.entries. Immutable.
	// hdr and payload are the entry's buffers. Immutable (the memory
	// itself changes hands with state).
	hdr     *reqHeader
	payload []byte
	// iov is iov[0..1] of the REGISTER, in mapped memory. Immutable.
	iov *[2]unix.Iovec

	// commitID and payloadLen are copied from hdr.EntInOut when the
	// request arrives, by the goroutine in Wait, before it stores
	// entServer in state; Commit reads them after loading it.
	commitID   uint64
	payloadLen int
	// state is entKernel, entServer or entDead.
	state atomic.Uint32
	// arrived is set when the first request arrives in the entry (its
	// REGISTER completed). Protected by q.waitMu.
	arrived bool
}

// InHeader returns the 128-byte in_out area. On arrival it holds the
// request's fuse_in_header; before Commit the server writes the
// fuse_out_header there (len, error, unique: the kernel checks that unique
// matches the request and that error is 0 or a negative errno).
func (e *Entry) InHeader() []byte { return e.hdr.InOut[:] }

// OpIn returns the 128-byte op_in area: the request's first in-argument,
// the per-opcode struct (fuse_read_in, fuse_write_in, ...), without the
// fuse_in_header. Opcodes whose first argument is empty leave it as the
// previous request left it.
func (e *Entry) OpIn() []byte { return e.hdr.OpIn[:] }

// Payload returns the whole payload buffer. On arrival its first
// PayloadLen bytes hold the request's remaining in-arguments (names,
// write data), back to back; before Commit the server writes all the
// reply's out-arguments there, back to back.
func (e *Entry) Payload() []byte { return e.payload }

// PayloadLen returns the number of request bytes in Payload.
func (e *Entry) PayloadLen() int { return e.payloadLen }

// CommitID returns the commit ID the kernel gave the request (its unique).
func (e *Entry) CommitID() uint64 { return e.commitID }

// Queue returns the index of the queue the entry belongs to.
func (e *Entry) Queue() int { return e.q.qid }

// Queue is one of a connection's ring queues: an io_uring with SQE128
// entries and Depth registered ring entries. See the package documentation
// for the concurrency contract.
type Queue struct {
	qid int // Immutable.
	fd  int // The /dev/fuse descriptor. Immutable.
	// ring is the queue's io_uring. Its submission side is protected by
	// sqMu, its completion side by waitMu; Close closes it holding
	// waitMu, after setting closed under closeMu.
	ring *uring.Ring
	ents []Entry // Immutable slice.
	hdrs []byte  // Mapped headers and iovecs. Unmapped by Close.
	pays []byte  // Mapped payloads. Unmapped by Close.

	// sqMu serialises GetSQE128, filling the SQE and Publish.
	sqMu sync.Mutex
	// closeMu is held for reading by Commit throughout, and for writing
	// by Close to set closed: once Close has it, no Commit is running and
	// none will touch the ring.
	closeMu sync.RWMutex
	// closed is set by Close. Written with closeMu held for writing.
	closed atomic.Bool

	// waitMu is held by Wait, Close and Start's registration: the
	// completion side.
	waitMu sync.Mutex
	// cqes is the reaping buffer. Protected by waitMu.
	cqes []uring.CQE
	// rdy holds requests reaped by Start, for the first Wait. Protected
	// by waitMu.
	rdy []*Entry
	// stopErr is the sticky error Wait returns after the connection ended
	// (wraps ErrStopped). Protected by waitMu.
	stopErr error
	// entErr is an entry-level failure to report on the next Wait.
	// Protected by waitMu.
	entErr error
	// started is set once Start has reaped the queue's REGISTER failures;
	// before, every failed command is a failed REGISTER. Protected by
	// waitMu.
	started bool
	// nops counts the NOP completions reaped. Protected by waitMu.
	nops int
	// leaked is set by Close when it had to keep the buffers reserved
	// because commands were still outstanding. Protected by waitMu.
	leaked bool

	// The IssueOwner state (owner is false with the other issuers).
	owner bool // Immutable.
	// wakeFd is the eventfd whose read is armed on the ring while the
	// owner serves; a Commit that finds the owner asleep writes it. wakeBuf
	// (8 bytes of the headers' mapping) receives the read. Immutable.
	wakeFd  int
	wakeBuf []byte
	// sleeping is true while the owner is in (or about to enter) the
	// io_uring_enter that waits. Set by the owner with sqMu held, so
	// that a Commit, which publishes and reads it with sqMu held, either
	// published before the owner's enter (which submits the SQE) or sees
	// it asleep and wakes it. Cleared by the owner alone.
	sleeping atomic.Bool
	// rearm is set when the wake-up read completed and must be armed
	// again. Owned by the owner goroutine.
	rearm bool
	// registered carries the result of the owner's register to Start.
	registered chan error
	// serveCh hands Serve's function to the owner; serveErr carries back
	// the error that ends it (buffered, one per Serve).
	serveCh  chan func([]*Entry)
	serveErr chan error
	// closing is closed by Close, releasing an owner that waits for
	// Serve; ownerDone is closed when the owner goroutine returns.
	closing   chan struct{}
	ownerDone chan struct{}
	// enters counts the io_uring_enter calls of the owner or the issuer
	// thread (for tests).
	enters atomic.Uint64
	// The operations other packages borrowed the owner's ring for (Borrow,
	// uring.Host): borrowed[i] is slot i's operation, nil when free;
	// borrowFree lists the free slots; borrowN counts those in flight.
	// Owned by the owner goroutine. borrowDone holds the operations whose
	// CQE was reaped, with their results, for the owner to complete once
	// it has let go of waitMu. Protected by waitMu.
	borrowed   []uring.HostOp
	borrowFree []uint32
	borrowN    int
	borrowDone []borrowedCQE
	// borrows counts the operations borrowed (for tests and Stats).
	borrows atomic.Uint64
	// lending says Borrow may lend the ring: only while the owner runs
	// code that never waits for I/O (Lend; the borrowed completions),
	// since a borrowed operation completes only when the owner reaps.
	// Owned by the owner goroutine.
	lending bool

	// kick wakes the IssueThread goroutine; nil with IssueSQPoll. Closed
	// by Close, with waitMu held, after closed is set.
	kick chan struct{}
	// issuerDone is closed when the IssueThread goroutine returns.
	issuerDone chan struct{}
	// issueErr is the first io_uring_enter failure of the IssueThread
	// goroutine, reported by Wait.
	issueErr atomic.Pointer[error]

	// inflight counts commands published whose CQE has not been reaped.
	inflight atomic.Int64
	received atomic.Uint64
	commits  atomic.Uint64
}

// nopUserData tags the NOPs that Start submits after the REGISTERs and
// Close submits to wake Wait; wakeUserData the owner's eventfd read;
// borrowTag, with the slot in the low bits, a borrowed operation.
const (
	nopUserData  = ^uint64(0)
	wakeUserData = ^uint64(1)
	borrowTag    = uint64(1) << 62
)

// borrowSlotsPerEntry is how many operations may be borrowed on an owner's
// ring per ring entry (a READ or WRITE the owner starts may become several
// device requests); a Borrow beyond them reports false and the operation
// takes its own ring.
const borrowSlotsPerEntry = 4

// borrowedCQE is a reaped CQE of a borrowed operation.
type borrowedCQE struct {
	op  uring.HostOp
	res int32
}

// Start creates one io_uring (SQE128) per queue, registers cfg.Depth
// entries on each and returns the queues, indexed by queue ID. Once every
// queue has registered, the kernel sends every request except FORGET,
// BATCH_FORGET and INTERRUPT through the rings (those and requests queued
// before still arrive on /dev/fuse).
//
// A REGISTER the kernel refuses makes Start fail with an error naming the
// errno and its likely cause; the queues created so far are closed. The
// kernel then drops io_uring for the connection and sends its requests on
// /dev/fuse. (A REGISTER refused with EAGAIN, before the INIT reply, is
// reported by a worker and may come after Start returned; Wait reports
// it.) If Start fails before any REGISTER was refused (Config, io_uring
// setup, memory), the kernel keeps holding the connection's requests for
// a ring that will never be ready (fuse_block_alloc): abort the
// connection.
func Start(cfg Config) ([]*Queue, error) {
	if err := cfg.EnsureDefaults(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	cfg.PayloadSize = (cfg.PayloadSize + page - 1) &^ (page - 1)
	qs := make([]*Queue, 0, cfg.Queues)
	fail := func(err error) ([]*Queue, error) {
		for _, q := range qs {
			q.Close()
		}
		return nil, err
	}
	for qid := range cfg.Queues {
		attach := -1
		if qid > 0 && cfg.Issuer == IssueSQPoll {
			attach = qs[0].ring.Fd()
		}
		q, err := newQueue(cfg, qid, attach)
		if err != nil {
			return fail(err)
		}
		qs = append(qs, q)
		if q.owner {
			err = <-q.registered
		} else {
			err = q.register()
		}
		if err != nil {
			return fail(err)
		}
	}
	return qs, nil
}

// entStride is the bytes of header memory per entry: the 288-byte header
// and the two iovecs of its REGISTER, padded to keep headers 64-byte
// aligned.
const entStride = 384

// newQueue creates queue qid's ring, attached to the SQ polling thread of
// the ring attach unless it is -1, and its entries.
func newQueue(cfg Config, qid, attach int) (*Queue, error) {
	q := &Queue{qid: qid, fd: cfg.Fd, owner: cfg.Issuer == IssueOwner, wakeFd: -1}
	// Each entry has at most one command outstanding, Close or Start one
	// NOP, and an owner queue its wake-up read and its borrowed
	// operations, so an SQ of Depth+2 (plus the borrow slots) and the
	// default CQ of twice that never fill.
	entries := cfg.Depth + 2
	if q.owner {
		entries += borrowSlotsPerEntry * cfg.Depth
	}
	p := &uring.Params{Flags: uring.SetupSQE128}
	if cfg.Issuer == IssueSQPoll {
		p.Flags |= uring.SetupSQPoll
		p.SQThreadIdle = uint32(max(1, cfg.SQPollIdle.Milliseconds()))
	}
	if attach >= 0 {
		p.Flags |= uring.SetupAttachWQ
		p.WQFd = uint32(attach)
	}
	r, err := uring.New(uint32(entries), p)
	if err != nil {
		return nil, fmt.Errorf("fuseuring: queue %d: %w", qid, err)
	}
	q.ring = r
	q.hdrs, err = unix.Mmap(-1, 0, (cfg.Depth+1)*entStride, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("fuseuring: queue %d: mapping headers: %w", qid, err)
	}
	q.pays, err = unix.Mmap(-1, 0, cfg.Depth*cfg.PayloadSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		unix.Munmap(q.hdrs)
		r.Close()
		return nil, fmt.Errorf("fuseuring: queue %d: mapping payloads: %w", qid, err)
	}
	q.ents = make([]Entry, cfg.Depth)
	for i := range q.ents {
		e := &q.ents[i]
		e.q, e.idx = q, i
		h := q.hdrs[i*entStride : (i+1)*entStride]
		e.hdr = (*reqHeader)(unsafe.Pointer(&h[0]))
		e.payload = q.pays[i*cfg.PayloadSize : (i+1)*cfg.PayloadSize : (i+1)*cfg.PayloadSize]
		e.iov = (*[2]unix.Iovec)(unsafe.Pointer(&h[reqHeaderSize]))
		e.iov[0] = unix.Iovec{Base: &h[0], Len: reqHeaderSize}
		e.iov[1] = unix.Iovec{Base: &e.payload[0], Len: uint64(len(e.payload))}
	}
	q.cqes = make([]uring.CQE, r.CQEntries())
	if q.owner {
		n := borrowSlotsPerEntry * cfg.Depth
		q.borrowed = make([]uring.HostOp, n)
		q.borrowFree = make([]uint32, n)
		for i := range q.borrowFree {
			q.borrowFree[i] = uint32(n - 1 - i)
		}
		q.wakeBuf = q.hdrs[cfg.Depth*entStride : cfg.Depth*entStride+8 : cfg.Depth*entStride+8]
		q.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			unix.Munmap(q.pays)
			unix.Munmap(q.hdrs)
			r.Close()
			return nil, fmt.Errorf("fuseuring: queue %d: eventfd: %w", qid, err)
		}
		q.registered = make(chan error, 1)
		q.serveCh = make(chan func([]*Entry))
		q.serveErr = make(chan error, 1)
		q.closing = make(chan struct{})
		q.ownerDone = make(chan struct{})
		go q.own()
	}
	if cfg.Issuer == IssueThread {
		q.kick = make(chan struct{}, 1)
		q.issuerDone = make(chan struct{})
		go q.issue()
	}
	return q, nil
}

// issue is the IssueThread goroutine: locked to its OS thread for life, it
// submits the published SQEs each time it is kicked, until kick closes.
// Returning while locked ends the thread; Close does that only after no
// request can be delivered any more or just before it closes the ring.
func (q *Queue) issue() {
	runtime.LockOSThread()
	defer close(q.issuerDone)
	for range q.kick {
		if err := q.submitPublished(); err != nil {
			q.issueErr.CompareAndSwap(nil, &err)
		}
	}
}

// register submits a REGISTER for every entry, followed by a NOP, and
// reports a REGISTER the kernel refused. The issuer (polling thread or
// issuer thread) issues the SQEs in order and the kernel refuses a
// REGISTER inline (except EAGAIN, see Start), so its CQE is
// posted no later than the NOP's; a REGISTER that succeeds completes only
// when a request arrives, which may already have happened for the last
// queue to register: such requests are kept for Wait.
func (q *Queue) register() error {
	q.sqMu.Lock()
	for i := range q.ents {
		e := &q.ents[i]
		sqe := q.ring.GetSQE128()
		if sqe == nil { // cannot happen: the SQ has Depth+1 entries
			q.sqMu.Unlock()
			return fmt.Errorf("fuseuring: queue %d: submission queue full", q.qid)
		}
		sqe.PrepURingCmd(q.fd, cmdRegister, unsafe.Pointer(e.iov), 2)
		sqe.UserData = uint64(i)
		*(*cmdReq)(unsafe.Pointer(&sqe.Cmd()[0])) = cmdReq{QID: uint16(q.qid)}
		q.inflight.Add(1)
	}
	sqe := q.ring.GetSQE()
	sqe.PrepNop()
	sqe.UserData = nopUserData
	q.inflight.Add(1)
	if q.owner {
		q.armWakeLocked()
	}
	q.ring.Publish()
	q.sqMu.Unlock()
	submit := q.submit
	if q.owner {
		submit = q.submitPublished
	}
	if err := submit(); err != nil {
		return err
	}
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	for q.nops == 0 {
		q.rdy = q.reapLocked(q.rdy)
		if q.nops > 0 {
			break
		}
		if err := q.waitCQE(); err != nil {
			return err
		}
	}
	q.started = true
	return q.entErr
}

// submit makes sure the published SQEs get issued: with IssueOwner it
// wakes the owner (its next io_uring_enter submits them); with
// IssueThread it kicks the issuer; with IssueSQPoll it wakes the polling
// thread if it sleeps, retrying while io_uring_enter reports a transient
// shortage (EAGAIN, EBUSY; EINTR is retried by uring).
func (q *Queue) submit() error {
	if q.owner {
		return q.wakeOwner()
	}
	if q.kick != nil {
		select {
		case q.kick <- struct{}{}:
		default: // a kick is pending; the issuer will see these SQEs too
		}
		return nil
	}
	return q.retryTransient(q.ring.SQPollWakeup)
}

// retryTransient calls enter until it succeeds, fails for good, or has
// reported a transient shortage (EAGAIN, EBUSY) for about 100 ms, backing
// off exponentially.
func (q *Queue) retryTransient(enter func() error) error {
	for delay := time.Microsecond; ; delay *= 2 {
		err := enter()
		if err == nil {
			return nil
		}
		if !transient(err) || delay > 100*time.Millisecond {
			return fmt.Errorf("fuseuring: queue %d: %w", q.qid, err)
		}
		time.Sleep(delay)
	}
}

// submitPublished hands every published SQE to the kernel with
// io_uring_enter, retrying a transient shortage: the issuing thread's
// submission (IssueThread's issuer, IssueOwner's owner).
func (q *Queue) submitPublished() error {
	return q.retryTransient(func() error {
		_, err := q.ring.SubmitPublished()
		q.enters.Add(1)
		return err
	})
}

// waitCQE blocks in io_uring_enter until a CQE is ready. EINTR is
// retried by uring; a transient shortage (EAGAIN, EBUSY) returns after a
// short sleep, for the caller to look again.
//
// Preconditions: q.waitMu is held.
func (q *Queue) waitCQE() error {
	_, err := q.ring.Enter(0, 1)
	if err == nil {
		return nil
	}
	if transient(err) {
		time.Sleep(100 * time.Microsecond)
		return nil
	}
	return fmt.Errorf("fuseuring: queue %d: %w", q.qid, err)
}

// armWakeLocked fills an SQE with the owner's eventfd read.
//
// Preconditions: q.sqMu is held; the SQ has room (it is sized for it).
func (q *Queue) armWakeLocked() {
	sqe := q.ring.GetSQE()
	sqe.PrepRead(q.wakeFd, q.wakeBuf, 0)
	sqe.UserData = wakeUserData
	q.inflight.Add(1)
}

// wakeOwner makes the owner leave its io_uring_enter: the eventfd write
// completes the read armed on the ring (or, if the read is being armed
// again, makes it complete at once).
func (q *Queue) wakeOwner() error {
	var one = [8]byte{1}
	for {
		_, err := unix.Write(q.wakeFd, one[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("fuseuring: queue %d: waking the owner: %w", q.qid, err)
		}
		return nil
	}
}

// own is the IssueOwner goroutine: locked to its OS thread for life (the
// thread that issues the queue's commands is the one whose task work
// delivers requests, and no other goroutine may ever run on it), it
// registers the entries, waits for Serve (or Close) and runs the serving
// loop until Close.
func (q *Queue) own() {
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	defer close(q.ownerDone)
	q.registered <- q.register()
	var handle func([]*Entry)
	select {
	case handle = <-q.serveCh:
	case <-q.closing:
	}
	if handle != nil {
		defer uring.LendThread(q)()
	}
	q.serve(handle)
}

// serve is the owner's loop: reap every arrived request and hand the batch
// to handle (nil once Serve has returned), then submit everything
// published and sleep in one io_uring_enter until something completes.
// After Close it submits what is still published and returns.
func (q *Queue) serve(handle func([]*Entry)) {
	var batch []*Entry
	var completions []borrowedCQE
	done := func(err error) {
		if handle != nil {
			q.serveErr <- err
			handle = nil
		}
	}
	for {
		q.waitMu.Lock()
		batch = append(batch[:0], q.rdy...)
		q.rdy = q.rdy[:0]
		batch = q.reapLocked(batch)
		var err error
		switch {
		case q.entErr != nil:
			err, q.entErr = q.entErr, nil
		case q.stopErr != nil && len(batch) == 0:
			err = q.stopErr
		}
		completions = append(completions[:0], q.borrowDone...)
		clear(q.borrowDone)
		q.borrowDone = q.borrowDone[:0]
		q.waitMu.Unlock()
		// Borrowed operations complete first: their completions commit
		// replies, which this pass's enter then submits.
		if len(completions) > 0 {
			q.Lend(true) // a completion must not block (uring.HostOp)
			for i, c := range completions {
				c.op.Complete(q, c.res)
				completions[i] = borrowedCQE{}
			}
			q.Lend(false)
		}
		if q.rearm && !q.closed.Load() {
			q.rearm = false
			q.sqMu.Lock()
			q.armWakeLocked()
			q.ring.Publish()
			q.sqMu.Unlock()
		}
		if len(batch) > 0 && handle != nil {
			handle(batch)
		}
		if err != nil {
			done(err)
		}
		if q.closed.Load() {
			done(ErrClosed)
			// Close published its NOP after closed was set; no Commit
			// publishes any more, and Borrow refuses.
			if err := q.submitPublished(); err != nil {
				q.issueErr.CompareAndSwap(nil, &err)
			}
			if q.borrowN == 0 {
				return
			}
			// Borrowed I/O cannot be cancelled: wait for it and
			// complete it, then end.
			if _, err := q.ring.Enter(0, 1); err != nil && !transient(err) {
				q.issueErr.CompareAndSwap(nil, &err)
				return
			}
			continue
		}
		// Submit exactly what is published: io_uring_enter returns
		// without waiting when it finds fewer SQEs than it was asked to
		// submit. Only the owner submits, so none is consumed meanwhile;
		// what is published after this is the wake-up's business.
		q.sqMu.Lock()
		q.sleeping.Store(true)
		pending := q.ring.Publish()
		q.sqMu.Unlock()
		_, err = q.ring.Enter(pending, 1)
		q.sleeping.Store(false)
		q.enters.Add(1)
		if err != nil {
			if transient(err) {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			done(fmt.Errorf("fuseuring: queue %d: %w", q.qid, err))
			time.Sleep(10 * time.Millisecond) // a broken ring: do not spin until Close
		}
	}
}

// Borrow implements uring.Host: the owner's ring carries op, submitted by
// the owner's next io_uring_enter, and op.Complete runs on the owner when
// its CQE is reaped. It reports false outside the lending window (Lend),
// when every borrow slot is taken, or when the queue is closing.
//
// Preconditions: the caller is the owner goroutine (uring.ThreadHost
// returned q).
func (q *Queue) Borrow(op uring.HostOp) bool {
	if !q.lending || len(q.borrowFree) == 0 || q.closed.Load() {
		return false
	}
	q.sqMu.Lock()
	sqe := q.ring.GetSQE()
	if sqe == nil { // cannot happen: the SQ has room for every slot
		q.sqMu.Unlock()
		return false
	}
	i := q.borrowFree[len(q.borrowFree)-1]
	q.borrowFree = q.borrowFree[:len(q.borrowFree)-1]
	q.borrowed[i] = op
	q.borrowN++
	op.Prep(sqe)
	sqe.UserData = borrowTag | uint64(i)
	q.inflight.Add(1)
	q.ring.Publish()
	q.sqMu.Unlock()
	q.borrows.Add(1)
	return true
}

// Lend opens (on) or closes the window in which the owner lends its ring
// (Borrow). A borrowed operation completes only when the owner reaps it,
// so the owner must never wait for one: open the window only around code
// that cannot wait for I/O, such as a non-blocking (NOWAIT) start of a
// READ or WRITE; never around code that may do synchronous I/O.
//
// Preconditions: the caller is the owner goroutine (in Serve's function).
func (q *Queue) Lend(on bool) {
	if on != q.lending {
		q.lending = on
		uring.Window(on)
	}
}

// Borrows returns the number of operations borrowed on the queue's ring.
func (q *Queue) Borrows() uint64 { return q.borrows.Load() }

// Serve serves the queue of an IssueOwner connection: the queue's owner
// thread calls handle with every batch of requests that arrived, until the
// connection ends (Serve returns an error wrapping ErrStopped), an entry
// fails (an error naming it; see Wait) or Close (ErrClosed). handle runs
// on the owner's thread, so requests are delivered only between its
// calls: it should answer at once what is quick, with Commit (which there
// costs no system call: the owner's next io_uring_enter submits it), and
// hand the rest to other goroutines, which Commit when done. handle must
// never make a request on the FUSE mount itself.
//
// One Serve per queue, once.
func (q *Queue) Serve(handle func(batch []*Entry)) error {
	if !q.owner {
		return fmt.Errorf("fuseuring: queue %d: Serve needs IssueOwner (use Wait)", q.qid)
	}
	if handle == nil {
		return fmt.Errorf("fuseuring: queue %d: Serve with a nil function", q.qid)
	}
	select {
	case q.serveCh <- handle:
	case <-q.ownerDone:
		return ErrClosed
	}
	return <-q.serveErr
}

// Enters returns the number of io_uring_enter calls the queue's owner
// (IssueOwner) or issuer thread (IssueThread) has made.
func (q *Queue) Enters() uint64 { return q.enters.Load() }

func transient(err error) bool {
	return errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY)
}

// Wait blocks until at least one request has arrived on the queue, then
// appends every arrived request's entry to dst and returns it. After the
// kernel has ended the connection it returns ErrStopped (wrapping the
// errno) from then on; after Close, ErrClosed. A command that failed for
// one entry alone is reported by the next Wait as an error naming the
// entry (the entry is dead; the others keep working). Any other error is
// from io_uring_enter, as is.
//
// Only one goroutine may be in Wait at a time.
func (q *Queue) Wait(dst []*Entry) ([]*Entry, error) {
	if q.owner {
		if q.closed.Load() {
			return dst, ErrClosed
		}
		return dst, fmt.Errorf("fuseuring: queue %d: Wait on an IssueOwner queue (use Serve)", q.qid)
	}
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	if q.closed.Load() {
		return dst, ErrClosed
	}
	n0 := len(dst)
	dst = append(dst, q.rdy...)
	q.rdy = q.rdy[:0]
	for {
		dst = q.reapLocked(dst)
		if len(dst) > n0 {
			return dst, nil
		}
		if err := q.entErr; err != nil {
			q.entErr = nil
			return dst, err
		}
		if p := q.issueErr.Swap(nil); p != nil {
			return dst, *p
		}
		if q.stopErr != nil {
			return dst, q.stopErr
		}
		if q.closed.Load() {
			return dst, ErrClosed
		}
		if err := q.waitCQE(); err != nil {
			return dst, err
		}
	}
}

// reapLocked consumes every ready CQE, appends the entries whose request
// arrived to dst, and records failures in stopErr and entErr.
//
// Preconditions: q.waitMu is held.
func (q *Queue) reapLocked(dst []*Entry) []*Entry {
	for {
		n := q.ring.PeekBatch(q.cqes)
		if n == 0 {
			return dst
		}
		for _, c := range q.cqes[:n] {
			q.inflight.Add(-1)
			if c.UserData == nopUserData {
				q.nops++
				continue
			}
			if c.UserData == wakeUserData {
				q.rearm = true
				continue
			}
			if c.UserData&borrowTag != 0 {
				i := c.UserData &^ borrowTag
				q.borrowDone = append(q.borrowDone, borrowedCQE{q.borrowed[i], c.Res})
				q.borrowed[i] = nil
				q.borrowFree = append(q.borrowFree, uint32(i))
				q.borrowN--
				continue
			}
			if c.UserData >= uint64(len(q.ents)) {
				q.entErr = fmt.Errorf("fuseuring: queue %d: completion for unknown entry %d", q.qid, c.UserData)
				continue
			}
			e := &q.ents[c.UserData]
			if c.Res < 0 {
				q.failLocked(e, syscall.Errno(-c.Res))
				continue
			}
			e.arrived = true
			e.commitID = e.hdr.EntInOut.CommitID
			e.payloadLen = int(min(e.hdr.EntInOut.PayloadSz, uint32(len(e.payload))))
			e.state.Store(entServer)
			q.received.Add(1)
			dst = append(dst, e)
		}
	}
}

// failLocked records that the kernel completed e's command with errno.
//
// Preconditions: q.waitMu is held.
func (q *Queue) failLocked(e *Entry, errno syscall.Errno) {
	e.state.Store(entDead)
	if q.started {
		switch errno {
		case unix.ENOTCONN, unix.ECONNABORTED, unix.ECANCELED:
			if q.stopErr == nil {
				q.stopErr = fmt.Errorf("fuseuring: queue %d: %w (%w)", q.qid, ErrStopped, errno)
			}
			return
		}
	}
	if q.entErr != nil {
		return
	}
	if !e.arrived {
		// Before Start returned, or later for a REGISTER the kernel
		// punted to a worker (EAGAIN).
		q.entErr = fmt.Errorf("fuseuring: queue %d entry %d: FUSE_IO_URING_CMD_REGISTER: %w (%s)", q.qid, e.idx, errno, registerHint(errno))
		return
	}
	q.entErr = fmt.Errorf("fuseuring: queue %d entry %d: FUSE_IO_URING_CMD_COMMIT_AND_FETCH: %w (%s; the entry is lost)", q.qid, e.idx, errno, commitHint(errno))
}

// registerHint explains a REGISTER errno, after fuse_uring_cmd,
// fuse_uring_register and fuse_uring_create_ring_ent.
func registerHint(errno syscall.Errno) string {
	switch errno {
	case unix.EOPNOTSUPP:
		return "enable_uring is off and the connection was not INITialised with FUSE_OVER_IO_URING"
	case unix.EAGAIN:
		return "the connection is not initialised yet: write the INIT reply first"
	case unix.ENOTCONN:
		return "the connection is not connected: Fd is not mounted, or the connection already ended"
	case unix.ECONNABORTED:
		return "the connection was aborted"
	case unix.EINVAL:
		return "queue index beyond the possible CPUs, a ring without SQE128, or a payload buffer smaller than max(8192, max_write, max_pages*page size)"
	case unix.ENOMEM:
		return "the kernel is out of memory"
	case unix.EBADF, unix.ENOTTY:
		return "Fd is not an open /dev/fuse descriptor"
	case unix.EPERM, unix.EACCES:
		return "io_uring commands are not permitted (LSM policy)"
	}
	return "see fs/fuse/dev_uring.c"
}

// commitHint explains a COMMIT_AND_FETCH errno, after
// fuse_uring_commit_fetch.
func commitHint(errno syscall.Errno) string {
	switch errno {
	case unix.ENOENT:
		return "the kernel no longer knows the request (commit ID not found)"
	case unix.EINVAL:
		return "bad queue index"
	case unix.EIO:
		return "the entry was not in user space"
	}
	return "see fs/fuse/dev_uring.c"
}

// Commit sends the reply in e back to the kernel and re-arms e for the
// next request: it publishes one FUSE_IO_URING_CMD_COMMIT_AND_FETCH on
// the queue's ring at once, for the connection's SQ polling thread to
// issue. While that thread polls, Commit makes no system call, and commits
// that arrive together are issued in one pass; when it sleeps, Commit
// wakes it with one io_uring_enter. The fuse_out_header must already be in
// e.InHeader() and the out-arguments in e.Payload()[:payloadLen]. Unless
// Commit fails before publishing (a wrong entry, a bad length, ErrClosed),
// e belongs to the kernel again when it returns and the caller must not
// touch its buffers.
//
// Commit is safe for concurrent use by many goroutines, also while another
// goroutine blocks in Wait.
func (q *Queue) Commit(e *Entry, payloadLen int) error {
	if e == nil || e.q != q {
		return fmt.Errorf("fuseuring: queue %d: Commit of an entry of another queue", q.qid)
	}
	if payloadLen < 0 || payloadLen > len(e.payload) {
		return fmt.Errorf("fuseuring: queue %d entry %d: payload length %d outside [0, %d]", q.qid, e.idx, payloadLen, len(e.payload))
	}
	q.closeMu.RLock()
	defer q.closeMu.RUnlock()
	if q.closed.Load() {
		return ErrClosed
	}
	if !e.state.CompareAndSwap(entServer, entKernel) {
		return fmt.Errorf("fuseuring: queue %d entry %d: Commit of an entry that holds no request (committed twice?)", q.qid, e.idx)
	}
	e.hdr.EntInOut.PayloadSz = uint32(payloadLen)
	q.sqMu.Lock()
	sqe := q.ring.GetSQE128()
	if sqe == nil { // cannot happen: at most Depth+1 commands are outstanding
		q.sqMu.Unlock()
		e.state.Store(entServer)
		return fmt.Errorf("fuseuring: queue %d: submission queue full", q.qid)
	}
	sqe.PrepURingCmd(q.fd, cmdCommitAndFetch, nil, 0)
	sqe.UserData = uint64(e.idx)
	*(*cmdReq)(unsafe.Pointer(&sqe.Cmd()[0])) = cmdReq{CommitID: e.commitID, QID: uint16(q.qid)}
	q.inflight.Add(1)
	q.ring.Publish()
	// An owner that is not asleep submits this SQE with its next enter.
	wake := !q.owner || q.sleeping.Load()
	q.sqMu.Unlock()
	if wake {
		if err := q.submit(); err != nil {
			return err
		}
	}
	q.commits.Add(1)
	return nil
}

// Stats returns the number of requests received through the queue and of
// replies committed.
func (q *Queue) Stats() (received, committed uint64) {
	return q.received.Load(), q.commits.Load()
}

// Queue returns the queue's index (the CPU whose requests it receives).
func (q *Queue) Queue() int { return q.qid }

// closeDrainStopped bounds how long Close waits for the kernel to
// complete the outstanding commands of a connection that has ended.
const closeDrainStopped = 5 * time.Second

// Close wakes a goroutine blocked in Wait (which returns ErrClosed), waits
// for it to return, closes the ring and releases the buffers. Commits from
// then on return ErrClosed.
//
// The buffers are unmapped only once the kernel can no longer touch them:
// when every command has completed, which after the connection ended (Wait
// returned ErrStopped) takes at most a few teardown rounds of the kernel
// (FUSE_URING_TEARDOWN_INTERVAL, 50 ms). If commands are still outstanding
// because the connection is alive, Close cannot know when the kernel lets
// go of them, so it replaces the buffers with inaccessible reserved memory
// (a late kernel write then fails with EFAULT instead of landing in reused
// memory) and leaks that address range; requests for this queue then wait
// until the connection is aborted. The normal order is: unmount or abort,
// Wait returns ErrStopped, Close, close /dev/fuse.
//
// A second Close returns ErrClosed.
func (q *Queue) Close() error {
	q.closeMu.Lock()
	if q.closed.Load() {
		q.closeMu.Unlock()
		return ErrClosed
	}
	q.closed.Store(true)
	q.closeMu.Unlock()
	// Wake Wait with a NOP. No Commit can race for the SQ any more.
	q.sqMu.Lock()
	if sqe := q.ring.GetSQE(); sqe != nil {
		sqe.PrepNop()
		sqe.UserData = nopUserData
		q.inflight.Add(1)
		q.ring.Publish()
	}
	q.sqMu.Unlock()
	werr := q.submit()
	if q.owner {
		// The owner submits the NOP and the last commits, and ends.
		close(q.closing)
		<-q.ownerDone
		if p := q.issueErr.Load(); p != nil && werr == nil {
			werr = *p
		}
	}

	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	deadline := time.Now()
	if q.stopErr != nil {
		deadline = deadline.Add(closeDrainStopped)
	} else {
		deadline = deadline.Add(50 * time.Millisecond)
	}
	if q.kick != nil {
		close(q.kick)
		<-q.issuerDone
	}
	for {
		q.reapLocked(nil)
		if q.inflight.Load() <= 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var errs []error
	if werr != nil && !errors.Is(werr, uring.ErrClosed) {
		errs = append(errs, werr)
	}
	if err := q.ring.Close(); err != nil {
		errs = append(errs, err)
	}
	if q.wakeFd >= 0 {
		unix.Close(q.wakeFd)
	}
	if q.inflight.Load() <= 0 {
		errs = append(errs, unmap(q.hdrs), unmap(q.pays))
	} else {
		q.leaked = true
		errs = append(errs, reserve(q.hdrs), reserve(q.pays))
	}
	q.hdrs, q.pays = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("fuseuring: queue %d: close: %w", q.qid, err)
	}
	return nil
}

func unmap(b []byte) error {
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// reserve replaces the mapping b with an inaccessible one of the same
// range, freeing its pages but keeping the addresses from being reused.
func reserve(b []byte) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(len(b)), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("mmap PROT_NONE: %w", err)
	}
	return nil
}
