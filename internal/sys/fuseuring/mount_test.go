package fuseuring

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/mountinfo"
)

// FUSE opcodes the test file system knows (include/uapi/linux/fuse.h).
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opInterrupt   = 36
	opBatchForget = 42
)

const (
	inHeaderSize  = int(unsafe.Sizeof(fuse.InHeader{}))
	outHeaderSize = int(unsafe.Sizeof(fuse.OutHeader{}))
	testMaxWrite  = 1 << 20
	testMaxPages  = 256
)

// fileData is the content of the test file system's only file, /x.
var fileData = bytes.Repeat([]byte("sluice fuse over io_uring\n"), 1000)

// testMount is a FUSE mount served by the test: a root directory holding
// one regular file, x.
type testMount struct {
	t   testing.TB
	dir string
	fd  int
	qs  []*Queue

	mu struct {
		sync.Mutex
		ringOps map[uint32]int // opcodes received through the rings
		devOps  map[uint32]int // opcodes received on /dev/fuse after INIT
	}
	// devDone is closed when the /dev/fuse reader has returned.
	devDone chan struct{}
	// waitErrs receives one error per queue, from its Wait loop.
	waitErrs chan error
	// serveDev makes the /dev/fuse reader answer requests (for the
	// comparison benchmark without rings).
	serveDev bool
	// connMinor is the connection's number in /sys/fs/fuse/connections.
	connMinor uint32
	// waitLog records every error a Wait loop got.
	waitLog struct {
		sync.Mutex
		errs []error
	}
}

// abortConn aborts the connection through fusectl, mounting it if needed.
// Tests call it when the mount hangs, so that no thread stays stuck in a
// FUSE request after the test.
func (m *testMount) abortConn() error {
	const ctl = "/sys/fs/fuse/connections"
	conn := filepath.Join(ctl, strconv.FormatUint(uint64(m.connMinor), 10))
	if _, err := os.Stat(conn); err != nil {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("no %s and cannot mount fusectl: %w", conn, err)
		}
		m.t.Cleanup(func() { unix.Unmount(ctl, 0) })
	}
	return os.WriteFile(filepath.Join(conn, "abort"), []byte("1"), 0)
}

// hung reports a hang: it logs the queues' state, aborts the connection
// and fails the test.
func (m *testMount) hung(what string) {
	t := m.t
	t.Helper()
	for _, q := range m.qs {
		r, c := q.Stats()
		states := make([]uint32, len(q.ents))
		for i := range q.ents {
			states[i] = q.ents[i].state.Load()
		}
		t.Logf("queue %d: received %d committed %d inflight %d entry states %v", q.qid, r, c, q.inflight.Load(), states)
	}
	m.waitLog.Lock()
	t.Logf("Wait errors: %v", m.waitLog.errs)
	m.waitLog.Unlock()
	m.mu.Lock()
	t.Logf("ring ops %v, /dev/fuse ops %v", m.mu.ringOps, m.mu.devOps)
	m.mu.Unlock()
	if err := m.abortConn(); err != nil {
		t.Errorf("abort: %v", err)
	}
	t.Fatal(what)
}

// skipUnlessCapable skips the test unless it runs as root on a kernel
// with FUSE over io_uring.
func skipUnlessCapable(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: mounts a FUSE file system and sets enable_uring")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		tb.Skipf("no /dev/fuse: %v", err)
	}
	if err := Supported(); err != nil {
		tb.Skipf("FUSE over io_uring unavailable: %v", err)
	}
}

// forEachIssuer runs test once per Issuer.
func forEachIssuer(t *testing.T, test func(*testing.T, Issuer)) {
	for _, iss := range []Issuer{IssueOwner, IssueSQPoll, IssueThread} {
		t.Run(iss.String(), func(t *testing.T) { test(t, iss) })
	}
}

// serveMode says who answers the test file system's requests.
type serveMode int

const (
	// serveWorkers: a Wait loop per queue hands requests to two worker
	// goroutines, which Commit the replies.
	serveWorkers serveMode = iota
	// serveInline: the goroutine in Wait answers and Commits.
	serveInline
	// serveDevFuse: no rings; the /dev/fuse reader answers.
	serveDevFuse
	// notStarted: INIT says FUSE_OVER_IO_URING but the test calls Start
	// itself; the /dev/fuse reader answers what comes there.
	notStarted
)

// mountTest turns enable_uring on, mounts, answers INIT (with
// FUSE_OVER_IO_URING unless mode is serveDevFuse) and starts serving.
func mountTest(t testing.TB, mode serveMode, issuer Issuer) *testMount {
	withRing := mode != serveDevFuse
	t.Helper()
	serveDev := mode == serveDevFuse || mode == notStarted
	skipUnlessCapable(t)
	// The switch stays on afterwards, as the daemon leaves it: turning
	// it off again would pull it from under other packages' tests that
	// mount at the same time.
	if _, err := Enable(); err != nil {
		t.Fatal(err)
	}
	m := &testMount{t: t, dir: t.TempDir(), devDone: make(chan struct{}), serveDev: serveDev}
	m.mu.ringOps = map[uint32]int{}
	m.mu.devOps = map[uint32]int{}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.fd = fd
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd)
	if err := unix.Mount("sluicetest", m.dir, "fuse.sluicetest", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("mount: %v", err)
	}
	if mt, err := mountinfo.Read(); err != nil {
		t.Fatal(err)
	} else if mi, ok := mt.At(m.dir); !ok {
		t.Fatalf("%s not in mountinfo after mount", m.dir)
	} else {
		m.connMinor = mi.Minor
	}
	// Cleanups run last-registered first: the queues close, then the
	// mount goes, then the reader ends, then the descriptor closes.
	t.Cleanup(func() {
		unix.Unmount(m.dir, unix.MNT_DETACH)
		select {
		case <-m.devDone:
		case <-time.After(10 * time.Second):
			t.Error("/dev/fuse reader did not end after unmount")
		}
		unix.Close(fd)
	})
	m.answerInit(withRing)
	go m.readDev()
	if mode == notStarted {
		return m
	}
	if mode == serveDevFuse {
		m.pollHack()
		return m
	}
	qs, err := Start(Config{Fd: fd, Depth: 4, PayloadSize: MaxPayload(testMaxWrite, testMaxPages, os.Getpagesize()), Issuer: issuer})
	if err != nil {
		t.Fatal(err)
	}
	m.qs = qs
	t.Cleanup(func() {
		for _, q := range qs {
			if err := q.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		}
	})
	m.waitErrs = make(chan error, len(qs))
	work := make(chan *Entry, 64)
	var workers sync.WaitGroup
	for range 2 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for e := range work {
				n := m.serveEntry(e)
				if err := qs[e.Queue()].Commit(e, n); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Commit: %v", err)
				}
			}
		}()
	}
	var waiters sync.WaitGroup
	for _, q := range qs {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			handle := func(batch []*Entry) {
				for _, e := range batch {
					if mode == serveInline {
						if err := q.Commit(e, m.serveEntry(e)); err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("Commit: %v", err)
						}
						continue
					}
					work <- e
				}
			}
			var err error
			if issuer == IssueOwner {
				err = q.Serve(handle)
			} else {
				var batch []*Entry
				for err == nil {
					batch, err = q.Wait(batch[:0])
					handle(batch)
				}
			}
			m.waitLog.Lock()
			m.waitLog.errs = append(m.waitLog.errs, err)
			m.waitLog.Unlock()
			m.waitErrs <- err
		}()
	}
	m.pollHack()
	t.Cleanup(func() {
		// Runs before the queues close: stop Wait first.
		for _, q := range qs {
			q.Close()
		}
		waiters.Wait()
		close(work)
		workers.Wait()
	})
	return m
}

// pollHack opens the file once, alone, so that the kernel learns that
// the server does not do FUSE_POLL. Go registers every opened file with
// its netpoller: epoll_ctl calls the file's poll, which on FUSE sends
// FUSE_POLL and waits, in a raw system call that keeps its P. Two such
// opens at once on a 2-CPU machine hold every P, and the goroutines that
// would answer never run. (go-fuse does the same at mount.)
//
// The open and the poll are made with non-raw system calls (unix.Open,
// unix.Poll), not os.Open, whose netpoller registration calls epoll_ctl
// raw: a raw system call keeps its P, and a garbage collection that starts
// meanwhile waits for that P while the request waits for a server
// goroutine the collection has stopped.
func (m *testMount) pollHack() {
	done := make(chan error, 1)
	go func() {
		fd, err := unix.Open(filepath.Join(m.dir, "x"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			m.t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		m.hung("the first open hung")
	}
}

// answerInit reads FUSE_INIT from /dev/fuse and answers it, with
// FUSE_OVER_IO_URING if withRing. (With it, the kernel holds every request
// until the ring is ready: fuse_block_alloc.)
func (m *testMount) answerInit(withRing bool) {
	t := m.t
	buf := make([]byte, 64<<10)
	n, err := readDevRetry(m.fd, buf)
	if err != nil {
		t.Fatalf("reading INIT: %v", err)
	}
	in := (*fuse.InitIn)(unsafe.Pointer(&buf[0]))
	if n < int(unsafe.Sizeof(*in)) || in.Opcode != opInit {
		t.Fatalf("first request: opcode %d, %d bytes; want INIT", in.Opcode, n)
	}
	if in.Flags64()&FlagOverIOURing == 0 {
		t.Fatalf("kernel INIT flags %#x lack FUSE_OVER_IO_URING although enable_uring is on", in.Flags64())
	}
	out := fuse.InitOut{
		Major:               7,
		Minor:               min(in.Minor, 45),
		MaxReadAhead:        in.MaxReadAhead,
		MaxBackground:       16,
		CongestionThreshold: 12,
		MaxWrite:            testMaxWrite,
		TimeGran:            1,
		MaxPages:            testMaxPages,
	}
	flags := uint64(fuse.CAP_INIT_EXT | fuse.CAP_MAX_PAGES | fuse.CAP_BIG_WRITES | fuse.CAP_ASYNC_READ)
	if withRing {
		flags |= FlagOverIOURing
	}
	out.Flags = uint32(flags)
	out.Flags2 = uint32(flags >> 32)
	reply := make([]byte, outHeaderSize+int(unsafe.Sizeof(out)))
	*(*fuse.OutHeader)(unsafe.Pointer(&reply[0])) = fuse.OutHeader{Length: uint32(len(reply)), Unique: in.Unique}
	*(*fuse.InitOut)(unsafe.Pointer(&reply[outHeaderSize])) = out
	if _, err := unix.Write(m.fd, reply); err != nil {
		t.Fatalf("writing INIT reply: %v", err)
	}
}

func readDevRetry(fd int, buf []byte) (int, error) {
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return n, err
	}
}

// readDev reads /dev/fuse until the connection ends, recording every
// request. Requests that need a reply get ENOSYS, unless serveDev.
func (m *testMount) readDev() {
	defer close(m.devDone)
	buf := make([]byte, testMaxWrite+64<<10)
	out := make([]byte, outHeaderSize+testMaxWrite)
	for {
		n, err := readDevRetry(m.fd, buf)
		if err != nil {
			return // ENODEV once the connection ended
		}
		h := *(*fuse.InHeader)(unsafe.Pointer(&buf[0]))
		if !m.serveDev {
			m.mu.Lock()
			m.mu.devOps[h.Opcode]++
			m.mu.Unlock()
		}
		switch h.Opcode {
		case opForget, opBatchForget:
			continue
		case opInterrupt:
			continue
		}
		status, k := int32(-int32(unix.ENOSYS)), 0
		if m.serveDev {
			arg := buf[inHeaderSize:n]
			if h.Opcode == opLookup {
				status, k = m.serve(&h, nil, arg, out[outHeaderSize:])
			} else {
				status, k = m.serve(&h, arg, nil, out[outHeaderSize:])
			}
		}
		*(*fuse.OutHeader)(unsafe.Pointer(&out[0])) = fuse.OutHeader{Length: uint32(outHeaderSize + k), Status: status, Unique: h.Unique}
		unix.Write(m.fd, out[:outHeaderSize+k])
	}
}

// serveEntry answers the request in e in place and returns the reply's
// payload length.
func (m *testMount) serveEntry(e *Entry) int {
	h := *(*fuse.InHeader)(unsafe.Pointer(&e.InHeader()[0]))
	m.mu.Lock()
	m.mu.ringOps[h.Opcode]++
	m.mu.Unlock()
	// The request's payload is read before the reply overwrites it.
	in := bytes.Clone(e.Payload()[:e.PayloadLen()])
	status, n := m.serve(&h, e.OpIn(), in, e.Payload())
	*(*fuse.OutHeader)(unsafe.Pointer(&e.InHeader()[0])) = fuse.OutHeader{Length: uint32(outHeaderSize + n), Status: status, Unique: h.Unique}
	return n
}

// serve answers one request of the test file system: opIn is the
// per-opcode struct, rest the remaining arguments; the reply's
// out-arguments go to out. It returns the status (0 or -errno) and the
// out-arguments' length.
func (m *testMount) serve(h *fuse.InHeader, opIn, rest, out []byte) (int32, int) {
	attr := func(a *fuse.Attr, node uint64) {
		*a = fuse.Attr{Ino: node, Nlink: 1, Blksize: 4096}
		if node == 1 {
			a.Mode = syscall.S_IFDIR | 0o755
			a.Nlink = 2
		} else {
			a.Mode = syscall.S_IFREG | 0o644
			a.Size = uint64(len(fileData))
		}
	}
	switch h.Opcode {
	case opGetattr:
		if h.NodeId != 1 && h.NodeId != 2 {
			return -int32(unix.ENOENT), 0
		}
		o := (*fuse.AttrOut)(unsafe.Pointer(&out[0]))
		*o = fuse.AttrOut{}
		attr(&o.Attr, h.NodeId)
		return 0, int(unsafe.Sizeof(*o))
	case opLookup:
		name, _, _ := bytes.Cut(rest, []byte{0})
		if h.NodeId != 1 || string(name) != "x" {
			return -int32(unix.ENOENT), 0
		}
		o := (*fuse.EntryOut)(unsafe.Pointer(&out[0]))
		*o = fuse.EntryOut{NodeId: 2, Generation: 1}
		attr(&o.Attr, 2)
		return 0, int(unsafe.Sizeof(*o))
	case opOpen:
		o := (*fuse.OpenOut)(unsafe.Pointer(&out[0]))
		// Direct I/O: every read reaches the server, none is cached.
		*o = fuse.OpenOut{Fh: 7, OpenFlags: fuse.FOPEN_DIRECT_IO}
		return 0, int(unsafe.Sizeof(*o))
	case opRead:
		// fuse_read_in: fh, offset, size, ... (no fuse_in_header).
		off := *(*uint64)(unsafe.Pointer(&opIn[8]))
		size := *(*uint32)(unsafe.Pointer(&opIn[16]))
		if off >= uint64(len(fileData)) {
			return 0, 0
		}
		return 0, copy(out[:size], fileData[off:])
	case opFlush, opRelease:
		return 0, 0
	}
	return -int32(unix.ENOSYS), 0
}

// waitStopped waits for every queue's Wait loop to end and checks that
// it ended with ErrStopped.
func (m *testMount) waitStopped(within time.Duration) {
	t := m.t
	deadline := time.After(within)
	for range m.qs {
		select {
		case err := <-m.waitErrs:
			if !errors.Is(err, ErrStopped) {
				t.Errorf("Wait = %v, want ErrStopped", err)
			} else {
				t.Logf("Wait: %v", err)
			}
		case <-deadline:
			t.Fatalf("Wait did not return within %v after the connection ended", within)
		}
	}
}

func TestMountEndToEnd(t *testing.T) { forEachIssuer(t, testMountEndToEnd) }

func testMountEndToEnd(t *testing.T, issuer Issuer) {
	m := mountTest(t, serveWorkers, issuer)
	type result struct {
		fi   os.FileInfo
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if r.fi, r.err = os.Stat(m.dir); r.err == nil {
			r.data, r.err = os.ReadFile(filepath.Join(m.dir, "x"))
		}
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		m.hung("stat/read of the mount hung")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.fi.IsDir() {
		t.Errorf("mount root mode %v, want a directory", r.fi.Mode())
	}
	if !bytes.Equal(r.data, fileData) {
		t.Errorf("read %d bytes %.40q..., want %d bytes %.40q...", len(r.data), r.data, len(fileData), fileData)
	}
	m.mu.Lock()
	t.Logf("opcodes through the rings: %v", m.mu.ringOps)
	for _, op := range []uint32{opGetattr, opLookup, opOpen, opRead} {
		if m.mu.ringOps[op] == 0 {
			t.Errorf("opcode %d never arrived through the ring (ring saw %v)", op, m.mu.ringOps)
		}
	}
	for op, n := range m.mu.devOps {
		if op != opForget && op != opBatchForget && op != opInterrupt {
			t.Errorf("/dev/fuse received opcode %d (%d times) after INIT", op, n)
		}
	}
	m.mu.Unlock()
	var received, committed uint64
	for _, q := range m.qs {
		r, c := q.Stats()
		received += r
		committed += c
	}
	if received < 4 || committed < 4 {
		t.Errorf("Stats: received %d committed %d, want at least 4 each", received, committed)
	}

	// Unmounting ends the connection: every Wait returns ErrStopped.
	start := time.Now()
	if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	m.waitStopped(10 * time.Second)
	t.Logf("Wait returned ErrStopped %v after unmount", time.Since(start))
	for _, q := range m.qs {
		if err := q.Close(); err != nil {
			t.Errorf("Close after unmount: %v", err)
		}
		if err := q.Close(); !errors.Is(err, ErrClosed) {
			t.Errorf("second Close = %v, want ErrClosed", err)
		}
		if _, err := q.Wait(nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Wait after Close = %v, want ErrClosed", err)
		}
	}
}

func TestAbort(t *testing.T) { forEachIssuer(t, testAbort) }

func testAbort(t *testing.T, issuer Issuer) {
	m := mountTest(t, serveWorkers, issuer)
	if _, err := os.Stat(m.dir); err != nil { // through the ring
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.abortConn(); err != nil {
		t.Fatal(err)
	}
	m.waitStopped(10 * time.Second)
	t.Logf("Wait returned ErrStopped %v after abort", time.Since(start))
	if _, err := os.Stat(m.dir); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("stat after abort = %v, want ENOTCONN", err)
	}
	for _, q := range m.qs {
		if err := q.Close(); err != nil {
			t.Errorf("Close after abort: %v", err)
		}
	}
}

// TestCloseBeforeEnd closes the queues while the connection is alive and
// Wait is blocked: Wait returns ErrClosed, Close returns, and the
// connection can still be aborted and unmounted.
func TestCloseBeforeEnd(t *testing.T) { forEachIssuer(t, testCloseBeforeEnd) }

func testCloseBeforeEnd(t *testing.T, issuer Issuer) {
	m := mountTest(t, serveWorkers, issuer)
	if _, err := os.Stat(m.dir); err != nil {
		t.Fatal(err)
	}
	for _, q := range m.qs {
		if err := q.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		// The kernel still holds the entries' commands, so the buffers
		// must stay reserved.
		if !q.leaked {
			t.Errorf("queue %d: buffers unmapped while the kernel held commands on them", q.qid)
		}
	}
	for range m.qs {
		select {
		case err := <-m.waitErrs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Wait = %v, want ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after Close")
		}
	}
	if err := unix.Unmount(m.dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkGetattr measures stat(2) round trips on the mount root (attr
// timeout 0, so each is a GETATTR to the server) answered through the
// rings and, for comparison, through read and write on /dev/fuse.
func BenchmarkGetattr(b *testing.B) {
	for _, c := range []struct {
		name   string
		mode   serveMode
		issuer Issuer
	}{
		{"owner-workers", serveWorkers, IssueOwner},
		{"owner-inline", serveInline, IssueOwner},
		{"sqpoll-workers", serveWorkers, IssueSQPoll},
		{"sqpoll-inline", serveInline, IssueSQPoll},
		{"thread-workers", serveWorkers, IssueThread},
		{"thread-inline", serveInline, IssueThread},
		{"devfuse", serveDevFuse, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			m := mountTest(b, c.mode, c.issuer)
			var st unix.Stat_t
			b.ResetTimer()
			for b.Loop() {
				if err := unix.Stat(m.dir, &st); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if c.mode != serveDevFuse {
				var received uint64
				for _, q := range m.qs {
					r, _ := q.Stats()
					received += r
				}
				if received < uint64(b.N) {
					b.Errorf("rings received %d requests for %d stats", received, b.N)
				}
			}
		})
	}
}

// TestRegisterTooSmall starts the queues with payload buffers smaller than
// the INIT reply's max_write: every REGISTER fails with EINVAL, Start says
// so, and the kernel, which drops io_uring for the connection when a
// REGISTER fails, sends the requests on /dev/fuse instead of holding them
// for a ring that will never be ready (fuse_uring_cmd, fuse_block_alloc).
func TestRegisterTooSmall(t *testing.T) {
	m := mountTest(t, notStarted, IssueSQPoll)
	qs, err := Start(Config{Fd: m.fd, Depth: 2, PayloadSize: 64 << 10})
	if err == nil {
		for _, q := range qs {
			q.Close()
		}
		t.Fatal("Start with 64 KiB payloads for max_write 1 MiB succeeded")
	}
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "payload buffer smaller") {
		t.Errorf("Start = %v, want EINVAL naming the payload size", err)
	}
	t.Logf("Start: %v", err)
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(m.dir)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("stat through /dev/fuse after the failed Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stat hung after the failed Start")
	}
}

// TestConcurrentRequests reads the file from several goroutines at once,
// so that requests arrive on every queue and workers Commit concurrently
// while the Wait loops block; every read must return the file.
func TestConcurrentRequests(t *testing.T) { forEachIssuer(t, testConcurrentRequests) }

func testConcurrentRequests(t *testing.T, issuer Issuer) {
	m := mountTest(t, serveWorkers, issuer)
	const readers, rounds = 8, 50
	errs := make(chan error, readers)
	for range readers {
		go func() {
			for range rounds {
				data, err := os.ReadFile(filepath.Join(m.dir, "x"))
				if err == nil && !bytes.Equal(data, fileData) {
					err = fmt.Errorf("read %d bytes, not the file's %d", len(data), len(fileData))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range readers {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			m.hung("concurrent reads hung")
		}
	}
	var perQueue []uint64
	for _, q := range m.qs {
		r, c := q.Stats()
		perQueue = append(perQueue, r)
		if c > r {
			t.Errorf("queue %d committed %d of %d requests", q.Queue(), c, r)
		}
	}
	m.mu.Lock()
	reads := m.mu.ringOps[opRead]
	m.mu.Unlock()
	if reads < readers*rounds {
		t.Errorf("%d READs through the rings for %d direct reads", reads, readers*rounds)
	}
	t.Logf("requests per queue: %v", perQueue)
}

// TestOwnerSleepsWhenIdle checks that an idle owner sleeps in the kernel:
// after a request, no queue's owner enters the kernel again until the
// next one. (Asked to submit more SQEs than are published,
// io_uring_enter returns at once instead of waiting, and the owners spun
// a CPU each.)
func TestOwnerSleepsWhenIdle(t *testing.T) {
	m := mountTest(t, serveWorkers, IssueOwner)
	for range 10 {
		if _, err := os.Stat(m.dir); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the last commit's enter
	enters := func() (n uint64) {
		for _, q := range m.qs {
			n += q.Enters()
		}
		return n
	}
	before := enters()
	time.Sleep(200 * time.Millisecond)
	if n := enters() - before; n > 0 {
		t.Errorf("idle owners entered the kernel %d times in 200ms", n)
	}
}

// TestOwnerWakeups sends requests one at a time to an owner whose replies
// are all committed by worker goroutines, so that every commit races the
// owner going to sleep: each must be submitted, by the owner's next enter
// or through the eventfd wake-up (the sleeping flag, set under the SQ
// mutex). A commit left unsubmitted hangs the stat. Without the wake-up
// the first stat hangs.
func TestOwnerWakeups(t *testing.T) {
	m := mountTest(t, serveWorkers, IssueOwner)
	done := make(chan error, 1)
	go func() {
		for range 3000 {
			if _, err := os.Stat(filepath.Join(m.dir, "x")); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		m.hung("sequential requests hung: a commit was left unsubmitted")
	}
}
