package directdev

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/sys/uring"
)

// testHost is a ring lent by a test goroutine locked to its thread, as an
// io_uring FUSE queue's owner lends its own.
type testHost struct {
	t    *testing.T
	ring *uring.Ring
	ops  map[uint64]uring.HostOp
	next uint64
	tid  int
	// refuse makes Borrow report false.
	refuse bool
}

func (h *testHost) Borrow(op uring.HostOp) bool {
	if unix.Gettid() != h.tid {
		h.t.Error("Borrow off the lending thread")
	}
	if h.refuse {
		return false
	}
	sqe := h.ring.GetSQE()
	if sqe == nil {
		return false
	}
	op.Prep(sqe)
	sqe.UserData = h.next
	h.ops[h.next] = op
	h.next++
	h.ring.Publish()
	return true
}

// serve submits what is published and completes what is reaped until
// done() holds.
func (h *testHost) serve(done func() bool) {
	cqes := make([]uring.CQE, 64)
	for !done() {
		if _, err := h.ring.Enter(h.ring.Publish(), 1); err != nil {
			h.t.Fatal(err)
		}
		for {
			n := h.ring.PeekBatch(cqes)
			for _, c := range cqes[:n] {
				op := h.ops[c.UserData]
				delete(h.ops, c.UserData)
				op.Complete(h, c.Res)
			}
			if n < len(cqes) {
				break
			}
		}
	}
}

// TestHostRing: reads and writes submitted on a thread that lends its
// ring travel on that ring and complete there (Stats.Hosted), with the
// data intact; flushes, other threads' requests and requests the host
// refuses take the device's own rings; Close waits for hosted requests.
func TestHostRing(t *testing.T) {
	const unit, n = 4096, 64
	d := openDev(t, newImage(t, n*unit), Options{Backend: Uring})
	defer d.Close()
	ring, err := uring.New(128, nil)
	if err != nil {
		t.Skipf("io_uring: %v", err)
	}
	defer ring.Close()
	want := make([]byte, n*unit)
	for i := range want {
		want[i] = byte(i*7 + i/unit)
	}
	got := device.AlignedBuf(n * unit)
	src := device.AlignedBuf(n * unit)
	copy(src, want)

	var doneOnThread, pending int
	var mu sync.Mutex
	var errs []error
	result := make(chan struct{})
	go func() {
		defer close(result)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		h := &testHost{t: t, ring: ring, ops: map[uint64]uring.HostOp{}, tid: unix.Gettid()}
		end := uring.LendThread(h)
		defer end()
		uring.Window(true)
		defer uring.Window(false)
		if uring.ThreadHost() != uring.Host(h) {
			t.Error("ThreadHost does not name the lending thread's host")
		}
		submit := func(op device.Op, off int64, buf []byte) {
			pending++
			r := &device.Request{Op: op, Off: off, Buf: buf, Done: func(_ *device.Request, err error) {
				if unix.Gettid() == h.tid {
					doneOnThread++
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				pending--
			}}
			if err := d.Submit(r); err != nil {
				t.Error(err)
				pending--
			}
		}
		for i := range n {
			submit(device.OpWrite, int64(i)*unit, src[i*unit:(i+1)*unit])
		}
		h.serve(func() bool { return pending == 0 })
		// A flush is not hosted: it completes on the device's ring.
		if err := device.Flush(d); err != nil {
			t.Error(err)
		}
		for i := range n {
			submit(device.OpRead, int64(i)*unit, got[i*unit:(i+1)*unit])
		}
		h.serve(func() bool { return pending == 0 })
		// Refused by the host: the device's own ring serves it.
		h.refuse = true
		if err := device.ReadAt(d, got[:unit], 0); err != nil {
			t.Error(err)
		}
	}()
	<-result
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("data read back through the host ring differs from what was written")
	}
	if doneOnThread != 2*n {
		t.Errorf("%d of %d Done calls on the lending thread", doneOnThread, 2*n)
	}
	if s := d.Stats(); s.Hosted != 2*n {
		t.Errorf("Stats.Hosted %d, want %d (%+v)", s.Hosted, 2*n, s)
	}
	// Another thread's requests take the device's ring.
	if err := device.ReadAt(d, got[:unit], unit); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Hosted != 2*n {
		t.Errorf("a request off the lending thread was hosted: %+v", s)
	}
}

// TestCloseWaitsForHosted: Close returns only once the host has completed
// the requests it carries.
func TestCloseWaitsForHosted(t *testing.T) {
	const unit = 4096
	d := openDev(t, newImage(t, 16*unit), Options{Backend: Uring})
	ring, err := uring.New(8, nil)
	if err != nil {
		t.Skipf("io_uring: %v", err)
	}
	defer ring.Close()
	submitted := make(chan *testHost)
	release := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		h := &testHost{t: t, ring: ring, ops: map[uint64]uring.HostOp{}, tid: unix.Gettid()}
		defer uring.LendThread(h)()
		uring.Window(true)
		defer uring.Window(false)
		done := false
		r := &device.Request{Op: device.OpRead, Buf: device.AlignedBuf(unit), Done: func(*device.Request, error) { done = true }}
		if err := d.Submit(r); err != nil {
			t.Error(err)
			return
		}
		submitted <- h
		<-release // the host does not reap until released
		h.serve(func() bool { return done })
	}()
	<-submitted
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the host held a request", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-finished
}
