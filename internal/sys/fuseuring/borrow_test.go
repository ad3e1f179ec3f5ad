package fuseuring

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/uring"
)

// borrowedRead answers a READ from a file read by the owner's own ring:
// a borrowed operation, completed by the owner, which commits the reply.
type borrowedRead struct {
	t      *testing.T
	q      *Queue
	e      *Entry
	fd     int
	off    uint64
	size   uint32
	unique uint64
	tid    int // the owner's thread
}

func (o *borrowedRead) Prep(sqe *uring.SQE) {
	sqe.PrepRead(o.fd, o.e.Payload()[:o.size], o.off)
}

func (o *borrowedRead) Complete(h uring.Host, res int32) {
	if h != uring.Host(o.q) {
		o.t.Errorf("completed with host %v, want its queue", h)
	}
	if tid := unix.Gettid(); tid != o.tid {
		o.t.Errorf("completed on thread %d, not the owner's %d", tid, o.tid)
	}
	status, n := int32(0), int(res)
	if res < 0 {
		status, n = res, 0
	}
	*(*fuse.OutHeader)(unsafe.Pointer(&o.e.InHeader()[0])) = fuse.OutHeader{Length: uint32(outHeaderSize + n), Status: status, Unique: o.unique}
	if err := o.q.Commit(o.e, n); err != nil && !errors.Is(err, ErrClosed) {
		o.t.Errorf("Commit: %v", err)
	}
}

// TestBorrowedReads serves every READ with a read on the owner's own ring
// (Queue.Lend, Borrow, uring.ThreadHost): the data arrives intact, every
// READ borrowed, completions run on the owner's thread, ThreadHost names
// the queue on its owner only, Borrow refuses outside the lending window,
// and Close waits for borrowed reads in flight.
func TestBorrowedReads(t *testing.T) {
	m := mountTest(t, notStarted, IssueOwner)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, fileData, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if uring.ThreadHost() != nil {
		t.Fatal("ThreadHost on a thread that lends nothing")
	}
	qs, err := Start(Config{Fd: m.fd, Depth: 4, PayloadSize: MaxPayload(testMaxWrite, testMaxPages, os.Getpagesize()), Issuer: IssueOwner})
	if err != nil {
		t.Fatal(err)
	}
	// Once viaPipe is set, READs are served from an empty pipe: a
	// borrowed read that stays in flight until the test writes it.
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	var viaPipe atomic.Bool
	var reads, refused atomic.Int64
	var serving sync.WaitGroup
	for _, q := range qs {
		serving.Add(1)
		go func() {
			defer serving.Done()
			q.Serve(func(batch []*Entry) {
				for _, e := range batch {
					h := *(*fuse.InHeader)(unsafe.Pointer(&e.InHeader()[0]))
					if h.Opcode != opRead {
						if err := q.Commit(e, m.serveEntry(e)); err != nil && !errors.Is(err, ErrClosed) {
							t.Errorf("Commit: %v", err)
						}
						continue
					}
					from := fd
					if viaPipe.Load() {
						from = pipe[0]
					}
					op := &borrowedRead{t: t, q: q, e: e, fd: from, unique: h.Unique, tid: unix.Gettid(),
						off: *(*uint64)(unsafe.Pointer(&e.OpIn()[8])), size: *(*uint32)(unsafe.Pointer(&e.OpIn()[16]))}
					if q.Borrow(op) {
						t.Error("Borrow outside the lending window")
					} else {
						refused.Add(1)
					}
					q.Lend(true)
					host := uring.ThreadHost()
					ok := host == uring.Host(q) && host.Borrow(op)
					q.Lend(false)
					if !ok {
						t.Errorf("ThreadHost %v on the owner of queue %d, or its Borrow failed", host, q.Queue())
						continue
					}
					reads.Add(1)
				}
			})
		}()
	}
	m.pollHack()
	for i := range 50 {
		got, err := os.ReadFile(filepath.Join(m.dir, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(fileData) {
			t.Fatalf("read %d: %d bytes, not the file's %d", i, len(got), len(fileData))
		}
	}
	var borrows uint64
	for _, q := range qs {
		borrows += q.Borrows()
	}
	if n := reads.Load(); n == 0 || borrows != uint64(n) || refused.Load() != n {
		t.Errorf("%d READs borrowed, queues count %d borrows, %d refused outside the window", n, borrows, refused.Load())
	}
	// Close with a borrowed read in flight: it waits for it.
	viaPipe.Store(true)
	before := reads.Load()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := unix.Pread(mustOpen(t, filepath.Join(m.dir, "x")), b, 0)
		got <- b[:max(n, 0)]
	}()
	for reads.Load() == before {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		for _, q := range qs {
			if err := q.Close(); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("Close: %v", err)
			}
		}
	}()
	select {
	case <-closed:
		t.Fatal("Close returned with a borrowed read in flight")
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := unix.Write(pipe[1], []byte("late")); err != nil {
		t.Fatal(err)
	}
	<-closed
	serving.Wait()
	// Its reply came after Close, which drops it (ErrClosed): the
	// reader waits until the connection goes.
	if err := m.abortConn(); err != nil {
		t.Fatal(err)
	}
	<-got
	for _, q := range qs {
		if q.borrowN != 0 {
			t.Errorf("queue %d closed with %d borrowed operations in flight", q.Queue(), q.borrowN)
		}
	}
}

// mustOpen opens path read-only (a descriptor the test leaks: the mount
// goes with the test).
func mustOpen(t *testing.T, path string) int {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Error(err)
	}
	return fd
}
