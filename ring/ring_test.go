package ring

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Direct I/O is submitted inline and completes from the device's
// completion, without a worker.
func TestDirectIOQueuedInline(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	data := e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", sluice.O_DIRECT)
	g := e.gate(faultdev.Writes | faultdev.Reads)
	r := e.ring(4, nil)
	w := pattern(4096, 42)
	rb := device.AlignedBuf(4096)
	if err := r.Write(f, w, 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(f, rb, 4096, 0, 2); err != nil {
		t.Fatal(err)
	}
	gateHeld(t, g, 2)
	if st := r.Stats(); st.Queued != 2 || st.Punts != 0 || st.Workers != 0 {
		t.Fatalf("want both queued inline: %v", st)
	}
	g.Open()
	for _, c := range reap(t, r, 2) {
		if c.Err != nil || c.Res != 4096 || c.Flags != CQEQueued {
			t.Fatalf("op %d: %+v", c.Tag, c)
		}
	}
	checkBytes(t, "read", rb, data[4096:8192])
}

func TestRingFull(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", sluice.O_DIRECT)
	g := e.gate(faultdev.Writes)
	r := e.ring(2, nil)
	for i := 0; i < 2; i++ {
		if err := r.Write(f, pattern(4096, 1), int64(i)*4096, 0, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Write(f, pattern(4096, 1), 2*4096, 0, 2); err != ErrRingFull {
		t.Fatalf("third submission: %v, want ErrRingFull", err)
	}
	// An entry is freed by reaping, not by completing.
	g.Open()
	waitFor(t, "two completions", func() bool { return r.Stats().Completed == 2 })
	if err := r.Write(f, pattern(4096, 1), 2*4096, 0, 2); err != ErrRingFull {
		t.Fatalf("submission before reaping: %v, want ErrRingFull", err)
	}
	reap(t, r, 1)
	if err := r.Write(f, pattern(4096, 1), 2*4096, 0, 2); err != nil {
		t.Fatal(err)
	}
	reap(t, r, 2)
	if st := r.Stats(); st.RingFull != 2 || st.Submitted != 3 {
		t.Fatalf("stats: %v", st)
	}
}

func TestWaitWhenFull(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", sluice.O_DIRECT)
	g := e.gate(faultdev.Writes)
	r := e.ring(1, &Options{WaitWhenFull: true})
	if err := r.Write(f, pattern(4096, 1), 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	submitted := make(chan error, 1)
	go func() { submitted <- r.Write(f, pattern(4096, 2), 4096, 0, 2) }()
	waitFor(t, "the second Submit to wait for an entry", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.mu.slotWaiters == 1
	})
	g.Open()
	if c := reap(t, r, 1)[0]; c.Tag != 1 || c.Err != nil {
		t.Fatalf("first write: %+v", c)
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if c := reap(t, r, 1)[0]; c.Tag != 2 || c.Err != nil {
		t.Fatalf("second write: %+v", c)
	}
}

func TestSubmitInvalid(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	f := e.open("/f", 0)
	r := e.ring(1, nil)
	if err := r.Submit(SQE{Op: OpRead}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("no file: %v", err)
	}
	if err := r.Submit(SQE{Op: 99, File: f}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad op: %v", err)
	}
	// Engine errors come in the CQE: a misaligned direct read of written
	// blocks.
	e.prewrite("/f", 4096, 1)
	fd := e.open("/f", sluice.O_DIRECT)
	if err := r.Read(fd, make([]byte, 100), 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	if c := reap(t, r, 1)[0]; !errors.Is(c.Err, syscall.EINVAL) || c.Flags != CQEInline {
		t.Fatalf("misaligned direct read: %+v", c)
	}
	if st := r.Stats(); st.Submitted != 1 {
		t.Fatalf("stats: %v", st)
	}
}

func TestWaitContext(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	r := e.ring(2, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := r.Wait(ctx, 1, make([]CQE, 1)); n != 0 || err != context.Canceled {
		t.Fatalf("Wait: %d, %v", n, err)
	}
	if n, err := r.WaitTimeout(1, 1, make([]CQE, 1)); n != 0 || err != context.DeadlineExceeded {
		t.Fatalf("WaitTimeout: %d, %v", n, err)
	}
	if n, err := r.Peek(make([]CQE, 1)); n != 0 || err != nil {
		t.Fatalf("Peek: %d, %v", n, err)
	}
}

// Every operation kind through the ring, with the flags.
func TestAllOperations(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "forced"}[force], func(t *testing.T) {
			e := newEnv(t, sluice.Concurrent())
			f := e.open("/f", 0)
			r := e.ring(8, &Options{ForceAsync: force})
			step := func(s SQE) CQE {
				t.Helper()
				if err := r.Submit(s); err != nil {
					t.Fatal(err)
				}
				c := reap(t, r, 1)[0]
				if c.Err != nil {
					t.Fatalf("%v: %+v", s.Op, c)
				}
				return c
			}
			a := pattern(5000, 1)
			step(SQE{Op: OpWrite, File: f, Buf: a, Off: 0})
			b := pattern(3000, 2)
			if c := step(SQE{Op: OpWrite, File: f, Buf: b, Flags: sluice.RWFAppend | sluice.RWFDsync}); c.Res != 3000 {
				t.Fatalf("append: %+v", c)
			}
			step(SQE{Op: OpFsync, File: f})
			step(SQE{Op: OpFdatasync, File: f})
			step(SQE{Op: OpFallocate, File: f, Mode: sluice.FallocKeepSize | sluice.FallocPunchHole, Off: 0, Len: 4096})
			step(SQE{Op: OpFallocate, File: f, Off: 0, Len: 16384})
			step(SQE{Op: OpTruncate, File: f, Off: 7000})
			want := append(append(make([]byte, 4096), a[4096:]...), b...)[:7000]
			// A buffered read may return a partial count (it met a
			// page under I/O after copying some bytes): read on.
			got := make([]byte, 8192)
			n := 0
			for {
				c := step(SQE{Op: OpRead, File: f, Buf: got[n:], Off: int64(n)})
				if c.Res == 0 {
					break
				}
				n += c.Res
			}
			checkBytes(t, "file", got[:n], want)
			st := r.Stats()
			if force && st.ForcedPunts != st.Submitted {
				t.Fatalf("forced: %v", st)
			}
			// Fsync, Fdatasync, Fallocate and Truncate always punt.
			if !force && st.Punts < 5 {
				t.Fatalf("inline: %v", st)
			}
		})
	}
}

// A caller's NOWAIT write that would block (a direct write into a hole
// must allocate) gets EAGAIN and is not punted; without NOWAIT it is
// punted and succeeds.
func TestNoWaitWrite(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	f := e.open("/f", sluice.O_DIRECT)
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	r := e.ring(2, nil)
	if err := r.Write(f, pattern(4096, 1), 0, sluice.RWFNoWait, 1); err != nil {
		t.Fatal(err)
	}
	if c := reap(t, r, 1)[0]; !errors.Is(c.Err, syscall.EAGAIN) {
		t.Fatalf("NOWAIT write into a hole: %+v", c)
	}
	if err := r.Write(f, pattern(4096, 1), 0, 0, 2); err != nil {
		t.Fatal(err)
	}
	if c := reap(t, r, 1)[0]; c.Err != nil || c.Res != 4096 || c.Flags&CQEPunted == 0 {
		t.Fatalf("write into a hole: %+v", c)
	}
	if st := r.Stats(); st.NoWaitEAGAIN != 1 || st.Punts != 1 {
		t.Fatalf("stats: %v", st)
	}
}

// Completions delivered to a callback: on one goroutine, one at a time;
// the callback may submit the next operation; Close returns after the
// last callback.
func TestCallback(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	data := e.prewrite("/f", 64*4096, 1)
	f := e.open("/f", 0)
	const ops = 200
	var r *Ring
	var inCallback, overlap, delivered atomic.Int64
	bufs := make([][]byte, ops)
	var failed atomic.Value
	cb := func(c CQE) {
		if inCallback.Add(1) > 1 {
			overlap.Add(1)
		}
		defer inCallback.Add(-1)
		if c.Err != nil || c.Res != 4096 {
			failed.Store(c)
		}
		off := int(c.Tag%64) * 4096
		checkBytes(t, "callback read", bufs[c.Tag], data[off:off+4096])
		if next := c.Tag + 8; next < ops {
			if err := r.Read(f, bufs[next], int64(next%64)*4096, 0, next); err != nil {
				failed.Store(err)
			}
		}
		delivered.Add(1)
	}
	r = e.ring(8, &Options{Callback: cb})
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	for i := uint64(0); i < 8; i++ {
		if err := r.Read(f, bufs[i], int64(i)*4096, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Wait(context.Background(), 1, make([]CQE, 1)); err != ErrCallbackMode {
		t.Fatalf("Wait in callback mode: %v", err)
	}
	waitFor(t, "every callback", func() bool { return delivered.Load() == ops })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if v := failed.Load(); v != nil {
		t.Fatalf("failure: %v", v)
	}
	if overlap.Load() != 0 {
		t.Fatal("callbacks overlapped")
	}
}

// Close drains: operations inline-queued on the device, punted behind a
// chain and armed on a page all complete before it returns; Submit fails
// from the moment it starts.
func TestCloseDrains(t *testing.T) {
	pol := sluice.Concurrent()
	pol.ParallelDirectWrites = false
	e := newEnv(t, pol)
	e.prewrite("/d", 8*4096, 1)
	data := e.prewrite("/b", 8*4096, 2)
	fd := e.open("/d", sluice.O_DIRECT)
	fb := e.open("/b", 0)
	gw := e.gate(faultdev.Writes)
	gr := e.gate(faultdev.Reads)
	r := e.ring(8, nil)
	submit := func(s SQE) {
		t.Helper()
		if err := r.Submit(s); err != nil {
			t.Fatal(err)
		}
	}
	submit(SQE{Op: OpWrite, File: fd, Buf: pattern(4096, 3), Off: 0, Tag: 1}) // queued inline
	for i := 2; i <= 4; i++ {                                                 // a hashed chain
		submit(SQE{Op: OpWrite, File: fd, Buf: pattern(4096, 3), Off: int64(i) * 4096, Async: true, Tag: uint64(i)})
	}
	rb := make([]byte, 4096)
	submit(SQE{Op: OpRead, File: fb, Buf: rb, Off: 0, Tag: 5}) // armed
	gateHeld(t, gw, 2)
	gateHeld(t, gr, 1)
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	waitFor(t, "Close to start", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.mu.closing
	})
	if err := r.Fsync(fd, 9); err != ErrClosed {
		t.Fatalf("Submit during Close: %v", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned with I/O held: %v", err)
	default:
	}
	gw.Open()
	gr.Open()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	cqes := make([]CQE, 8)
	n, err := r.Peek(cqes)
	if n != 5 || err != nil {
		t.Fatalf("Peek after Close: %d, %v", n, err)
	}
	for _, c := range cqes[:n] {
		if c.Err != nil || c.Res != 4096 {
			t.Fatalf("op %d: %+v", c.Tag, c)
		}
	}
	checkBytes(t, "read", rb, data[:4096])
	if n, err := r.Wait(context.Background(), 1, cqes); n != 0 || err != ErrClosed {
		t.Fatalf("Wait after Close: %d, %v", n, err)
	}
	if err := r.Close(); err != ErrClosed {
		t.Fatalf("second Close: %v", err)
	}
	if st := r.Stats(); st.Workers != 0 {
		t.Fatalf("workers left: %v", st)
	}
}

// Abort cancels what has not started (the rest of a chain, a read waiting
// for its page) and waits for what has.
func TestAbortCancels(t *testing.T) {
	pol := sluice.Concurrent()
	pol.ParallelDirectWrites = false
	e := newEnv(t, pol)
	e.prewrite("/d", 8*4096, 1)
	e.prewrite("/b", 8*4096, 2)
	fd := e.open("/d", sluice.O_DIRECT)
	fb := e.open("/b", 0)
	gw := e.gate(faultdev.Writes)
	gr := e.gate(faultdev.Reads)
	r := e.ring(8, nil)
	for i := 1; i <= 4; i++ {
		if err := r.Submit(SQE{Op: OpWrite, File: fd, Buf: pattern(4096, 3), Off: int64(i) * 4096, Async: true, Tag: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Read(fb, make([]byte, 4096), 0, 0, 5); err != nil {
		t.Fatal(err)
	}
	gateHeld(t, gw, 1)
	gateHeld(t, gr, 1)
	aborted := make(chan error, 1)
	go func() { aborted <- r.Abort() }()
	waitFor(t, "the chain's queued writes to be canceled", func() bool { return r.Stats().Canceled == 3 })
	gw.Open()
	gr.Open()
	if err := <-aborted; err != nil {
		t.Fatal(err)
	}
	cqes := make([]CQE, 8)
	n, _ := r.Peek(cqes)
	if n != 5 {
		t.Fatalf("%d completions after Abort", n)
	}
	for tag, c := range byTag(cqes[:n]) {
		canceled := tag != 1
		if canceled != errors.Is(c.Err, syscall.ECANCELED) || canceled != (c.Flags&CQECanceled != 0) {
			t.Fatalf("op %d: %+v", tag, c)
		}
		if !canceled && (c.Err != nil || c.Res != 4096) {
			t.Fatalf("op %d: %+v", tag, c)
		}
	}
}

// A retry that fired while nobody was reaping is run by the next Peek (or
// Wait), or by Close.
func TestDeferredRetry(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		e := newEnv(t, sluice.Concurrent())
		data := e.prewrite("/f", 4*4096, 4)
		f := e.open("/f", 0)
		g := e.gate(faultdev.Reads)
		r := e.ring(2, nil)
		buf := make([]byte, 4096)
		if err := r.Read(f, buf, 0, 0, 1); err != nil {
			t.Fatal(err)
		}
		gateHeld(t, g, 1)
		g.Open()
		waitFor(t, "the retry to fire", func() bool { return r.Stats().RetriesFired == 1 })
		cqes := make([]CQE, 1)
		if closeFirst {
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := r.Peek(cqes); n != 1 || err != nil {
			t.Fatalf("Peek: %d, %v", n, err)
		}
		if c := cqes[0]; c.Err != nil || c.Res != 4096 || c.Flags != CQERetried|CQEInline {
			t.Fatalf("read: %+v", c)
		}
		checkBytes(t, "read", buf, data[:4096])
	}
}
