package faultdev_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/devicetest"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
)

func newMem(t testing.TB, ioUnit int) *memdev.Device {
	t.Helper()
	m, err := memdev.New(4<<20, memdev.Options{IOUnit: ioUnit})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newDev returns a fault device over a fresh memdev, closed at the end of
// the test.
func newDev(t testing.TB, injectors ...faultdev.Injector) (*faultdev.Device, *memdev.Device) {
	t.Helper()
	m := newMem(t, 512)
	d := faultdev.New(m, injectors...)
	t.Cleanup(func() { d.Close() })
	return d, m
}

func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, ioUnit int) device.Device {
		return faultdev.New(newMem(t, ioUnit))
	})
}

// The conformance suite through every stage of the pipeline: a disabled
// injector, an injector and a Corruption that never fire, a disabled
// Corruption, random latency and an open gate.
func TestConformanceFullPipeline(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, ioUnit int) device.Device {
		d := faultdev.New(newMem(t, ioUnit), faultdev.OnRange(faultdev.AnyOp, 0, 0))
		d.Inject(faultdev.OnOps(faultdev.AnyOp)).Disable()
		d.Inject(&faultdev.Corruption{When: faultdev.Not(faultdev.Reads)})
		d.Inject(&faultdev.Corruption{}).Disable()
		d.SetLatency(faultdev.AnyOp, faultdev.Uniform(0, 50*time.Microsecond, 1))
		d.NewGate(faultdev.AnyOp).Open()
		return d
	})
}

func buf(n int, tag byte) []byte {
	p := device.AlignedBuf(n)
	for i := range p {
		p[i] = tag + byte(i)
	}
	return p
}

func mustErr(t *testing.T, err error, op device.Op, off int64, want error) {
	t.Helper()
	var de *device.Error
	if !errors.Is(err, want) || !errors.As(err, &de) || de.Op != op || (op != device.OpFlush && de.Off != off) {
		t.Fatalf("err = %v, want a *device.Error for %s at %d wrapping %v", err, op, off, want)
	}
}

func TestOnNth(t *testing.T) {
	d, m := newDev(t, faultdev.OnNth(faultdev.Writes, 3))
	for i := range 5 {
		err := device.WriteAt(d, buf(512, byte(i+1)), int64(i)*512)
		if i == 2 {
			mustErr(t, err, device.OpWrite, 1024, syscall.EIO)
		} else if err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
	}
	// The failed write never reached the inner device.
	got := device.AlignedBuf(5 * 512)
	if err := device.ReadAt(m, got, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want := buf(512, byte(i+1))
		if i == 2 {
			want = make([]byte, 512)
		}
		if !bytes.Equal(got[i*512:(i+1)*512], want) {
			t.Fatalf("inner sector %d: wrong contents", i)
		}
	}
	if n := len(m.Pending()); n != 4 {
		t.Fatalf("inner device saw %d writes, want 4", n)
	}
	s := d.Stats()
	if s.Write.Submitted != 5 || s.Write.Completed != 5 || s.Write.Failed != 1 || s.Write.Injected != 1 ||
		s.Write.Bytes != 4*512 || s.Injected() != 1 || s.InFlight != 0 {
		t.Fatalf("stats: %v", s)
	}
}

func TestOnRange(t *testing.T) {
	d, _ := newDev(t, faultdev.OnRange(faultdev.Reads|faultdev.Writes, 4096, 4096))
	p := buf(4096, 1)
	for _, c := range []struct {
		off  int64
		fail bool
	}{{0, false}, {2048, true}, {4096, true}, {7680, true}, {8192, false}} {
		err := device.ReadAt(d, p, c.off)
		if c.fail {
			mustErr(t, err, device.OpRead, c.off, syscall.EIO)
		} else if err != nil {
			t.Fatalf("read at %d: %v", c.off, err)
		}
		err = device.WriteAt(d, p, c.off)
		if c.fail {
			mustErr(t, err, device.OpWrite, c.off, syscall.EIO)
		} else if err != nil {
			t.Fatalf("write at %d: %v", c.off, err)
		}
	}
	if err := device.Flush(d); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func TestOnOpsWithError(t *testing.T) {
	d, _ := newDev(t, &faultdev.Fault{When: faultdev.Flushes, Err: syscall.ENOSPC})
	if err := device.WriteAt(d, buf(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := device.ReadAt(d, buf(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	mustErr(t, device.Flush(d), device.OpFlush, 0, syscall.ENOSPC)
	if s := d.Stats(); s.Flush.Injected != 1 || s.Write.Injected != 0 || s.Read.Injected != 0 {
		t.Fatalf("stats: %v", s)
	}
}

func TestRandomly(t *testing.T) {
	pattern := func(seed uint64) []bool {
		d, _ := newDev(t, faultdev.Randomly(faultdev.Writes, 0.3, seed))
		p := buf(512, 1)
		var fails []bool
		for range 500 {
			if err := device.ReadAt(d, p, 0); err != nil {
				t.Fatalf("read failed: %v", err)
			}
			err := device.WriteAt(d, p, 0)
			if err != nil && !errors.Is(err, syscall.EIO) {
				t.Fatal(err)
			}
			fails = append(fails, err != nil)
		}
		return fails
	}
	a, b, c := pattern(7), pattern(7), pattern(8)
	n := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different outcome at write %d", i)
		}
		if a[i] {
			n++
		}
	}
	if n < 100 || n > 200 {
		t.Fatalf("%d of 500 writes failed with p = 0.3", n)
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same outcomes")
	}
}

func TestEnableDisableRemove(t *testing.T) {
	d, _ := newDev(t)
	p := buf(512, 1)
	inj := d.Inject(faultdev.OnOps(faultdev.Reads))
	check := func(fail bool) {
		t.Helper()
		err := device.ReadAt(d, p, 0)
		if fail != (err != nil) {
			t.Fatalf("read err = %v, want failure %v (%v)", err, fail, inj)
		}
	}
	check(true)
	inj.Disable()
	check(false)
	inj.Enable()
	check(true)
	check(true)
	if inj.Injected() != 3 || !inj.Enabled() {
		t.Fatalf("injection: %v", inj)
	}
	if got := d.Injections(); len(got) != 1 || got[0] != inj {
		t.Fatalf("Injections() = %v", got)
	}
	inj.Remove()
	inj.Remove()
	check(false)
	if got := d.Injections(); len(got) != 0 {
		t.Fatalf("Injections() after Remove = %v", got)
	}
}

// Every enabled injector sees every request; the first error wins.
func TestFirstErrorWins(t *testing.T) {
	d, _ := newDev(t)
	first := d.Inject(&faultdev.Fault{When: faultdev.Nth(1, faultdev.Writes), Err: syscall.ENOSPC})
	second := d.Inject(faultdev.OnNth(faultdev.Writes, 2))
	third := d.Inject(&faultdev.Fault{When: faultdev.Writes, Err: syscall.EROFS})
	mustErr(t, device.WriteAt(d, buf(512, 1), 0), device.OpWrite, 0, syscall.ENOSPC)
	mustErr(t, device.WriteAt(d, buf(512, 1), 0), device.OpWrite, 0, syscall.EIO)
	mustErr(t, device.WriteAt(d, buf(512, 1), 0), device.OpWrite, 0, syscall.EROFS)
	if first.Injected() != 1 || second.Injected() != 1 || third.Injected() != 1 {
		t.Fatalf("injected: %v / %v / %v", first, second, third)
	}
}

// A custom injector written against the interface.
type everyOther struct{ n atomic.Int64 }

func (e *everyOther) MaybeError(io faultdev.IO) error {
	if e.n.Add(1)%2 == 0 {
		return faultdev.ErrAfterIO(syscall.EIO)
	}
	return nil
}
func (e *everyOther) String() string { return "every other I/O, after it" }

func TestAfterIO(t *testing.T) {
	d, m := newDev(t, &faultdev.Fault{When: faultdev.Writes, AfterIO: true, Err: syscall.ENOSPC})
	w := buf(4096, 9)
	mustErr(t, device.WriteAt(d, w, 8192), device.OpWrite, 8192, syscall.ENOSPC)
	got := device.AlignedBuf(4096)
	if err := device.ReadAt(m, got, 8192); err != nil || !bytes.Equal(got, w) {
		t.Fatalf("write failed after the I/O did not reach the inner device: %v", err)
	}
	if s := d.Stats(); s.Write.Failed != 1 || s.Write.Injected != 1 || s.Write.Bytes != 0 {
		t.Fatalf("stats: %v", s)
	}

	d2, _ := newDev(t, &everyOther{})
	clear(got)
	if err := device.WriteAt(d2.Inner(), w, 0); err != nil {
		t.Fatal(err)
	}
	if err := device.ReadAt(d2, got, 0); err != nil {
		t.Fatal(err)
	}
	clear(got)
	mustErr(t, device.ReadAt(d2, got, 0), device.OpRead, 0, syscall.EIO)
	if !bytes.Equal(got, w) {
		t.Fatal("read failed after the I/O did not fill the buffer")
	}
	// Flush: reaches the device (makes the write durable) yet fails.
	if err := device.WriteAt(d2, w, 0); err != nil {
		t.Fatal(err)
	}
	mustErr(t, device.Flush(d2), device.OpFlush, 0, syscall.EIO)
	if n := len(d2.Inner().(*memdev.Device).Pending()); n != 0 {
		t.Fatalf("flush failed after the I/O left %d writes pending", n)
	}
}

// Done is never called inside Submit, whichever stage completes the
// request.
func TestDoneIsAsync(t *testing.T) {
	d, _ := newDev(t)
	fail := d.Inject(faultdev.OnOps(faultdev.AnyOp))
	for _, setup := range []func(){
		func() {}, // injected failure
		func() { fail.Disable() },
		func() { d.SetLatency(faultdev.AnyOp, faultdev.Fixed(time.Millisecond)) },
	} {
		setup()
		var mu sync.Mutex
		done := make(chan struct{})
		mu.Lock()
		r := &device.Request{Op: device.OpWrite, Buf: buf(512, 1),
			Done: func(*device.Request, error) { mu.Lock(); close(done); mu.Unlock() }}
		if err := d.Submit(r); err != nil {
			t.Fatal(err)
		}
		mu.Unlock()
		<-done
	}
}

// submit submits a request and returns a channel that receives its error.
func submit(t *testing.T, d device.Device, op device.Op, off int64, p []byte) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	r := &device.Request{Op: op, Off: off, Buf: p, Done: func(_ *device.Request, err error) { ch <- err }}
	if err := d.Submit(r); err != nil {
		t.Errorf("Submit: %v", err) // not Fatal: may run on another goroutine
		ch <- err
	}
	return ch
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// The scenario later tests rely on: hold N reads at a gate, observe that N
// were in flight at once, release them and count the completions.
func TestGateInFlight(t *testing.T) {
	d, _ := newDev(t)
	g := d.NewGate(faultdev.Reads)
	const n = 8
	var chs []<-chan error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			ch := submit(t, d, device.OpRead, int64(i)*4096, device.AlignedBuf(4096))
			mu.Lock()
			chs = append(chs, ch)
			mu.Unlock()
		})
	}
	if err := g.WaitHeld(ctx(t), n); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s := d.Stats()
	if g.Held() != n || s.Read.InFlight != n || s.Read.MaxInFlight != n || s.InFlight != n || s.MaxInFlight != n ||
		s.Read.Submitted != n || s.Read.Completed != 0 {
		t.Fatalf("held %d; stats: %v", g.Held(), s)
	}
	// A write passes while the reads are held.
	if err := device.WriteAt(d, buf(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Write.Completed != 1 || s.MaxInFlight != n+1 || s.Read.MaxInFlight != n {
		t.Fatalf("stats: %v", s)
	}
	g.Release(n)
	for _, ch := range chs {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	s = d.Stats()
	if g.Held() != 0 || s.Read.Completed != n || s.Read.InFlight != 0 || s.Read.MaxInFlight != n || s.Read.Bytes != n*4096 {
		t.Fatalf("after release: held %d; stats: %v", g.Held(), s)
	}
	d.ResetStats()
	if s := d.Stats(); s != (faultdev.Stats{}) {
		t.Fatalf("after ResetStats: %v", s)
	}
}

// A gate holds exactly the I/Os its predicate matches.
func TestGateMatchesOnly(t *testing.T) {
	d, m := newDev(t)
	g := d.NewGate(faultdev.And(faultdev.Writes, faultdev.Range{Off: 0, Len: 4096}))
	held := submit(t, d, device.OpWrite, 2048, buf(4096, 1)) // overlaps [0, 4096)
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	// Writes elsewhere, reads of the held range and flushes pass.
	if err := device.WriteAt(d, buf(4096, 2), 4096+2048); err != nil {
		t.Fatal(err)
	}
	r := device.AlignedBuf(512)
	if err := device.ReadAt(d, r, 2048); err != nil || !bytes.Equal(r, make([]byte, 512)) {
		t.Fatalf("read of the held range: %v (held write visible: %v)", err, r[0] != 0)
	}
	if err := device.Flush(d); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-held:
		t.Fatalf("held write completed: %v", err)
	default:
	}
	inner := device.AlignedBuf(4096)
	if err := device.ReadAt(m, inner, 2048); err != nil || !bytes.Equal(inner, make([]byte, 4096)) || g.Held() != 1 {
		t.Fatalf("held %d; the held write reached the inner device (%v)", g.Held(), err)
	}
	g.Open()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// Open: matching writes pass at once.
	if err := device.WriteAt(d, buf(512, 3), 0); err != nil {
		t.Fatal(err)
	}
	// Closed again: they are held.
	g.Close()
	again := submit(t, d, device.OpWrite, 0, buf(512, 4))
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	// Removed: released, and later ones pass.
	g.Remove()
	if err := <-again; err != nil {
		t.Fatal(err)
	}
	if err := device.WriteAt(d, buf(512, 5), 0); err != nil {
		t.Fatal(err)
	}
	if len(d.Gates()) != 0 {
		t.Fatal("gate still installed after Remove")
	}
}

// Release(n) releases the oldest held I/Os first; spare credits let the
// next arrivals through; Close cancels them.
func TestGateReleaseOrderAndCredits(t *testing.T) {
	d, _ := newDev(t)
	g := d.NewGate(faultdev.Writes)
	order := make(chan int, 10)
	for i := range 3 {
		r := &device.Request{Op: device.OpWrite, Off: int64(i) * 512, Buf: buf(512, byte(i)),
			Done: func(_ *device.Request, err error) {
				if err != nil {
					t.Error(err)
				}
				order <- i
			}}
		if err := d.Submit(r); err != nil {
			t.Fatal(err)
		}
		if err := g.WaitHeld(ctx(t), i+1); err != nil {
			t.Fatal(err)
		}
	}
	g.Release(1)
	if i := <-order; i != 0 {
		t.Fatalf("released write %d first, want 0", i)
	}
	if g.Held() != 2 {
		t.Fatalf("held %d, want 2", g.Held())
	}
	g.Release(4) // two now, two credits left
	if a, b := <-order, <-order; a+b != 3 {
		t.Fatalf("released %d and %d, want 1 and 2", a, b)
	}
	for range 2 {
		if err := device.WriteAt(d, buf(512, 9), 0); err != nil { // passes on a credit
			t.Fatal(err)
		}
	}
	third := submit(t, d, device.OpWrite, 0, buf(512, 9))
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	g.Release(3)
	if err := <-third; err != nil {
		t.Fatal(err)
	}
	g.Close() // cancels the two credits left
	fourth := submit(t, d, device.OpWrite, 0, buf(512, 9))
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	g.Open()
	if err := <-fourth; err != nil {
		t.Fatal(err)
	}
}

// An I/O matched by two gates waits at each in turn.
func TestGatesInSeries(t *testing.T) {
	d, _ := newDev(t)
	g1 := d.NewGate(faultdev.Writes)
	g2 := d.NewGate(faultdev.Range{Off: 0, Len: 512})
	ch := submit(t, d, device.OpWrite, 0, buf(512, 1))
	if err := g1.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	g1.Release(1)
	if err := g2.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if g1.Held() != 0 {
		t.Fatal("still held at the first gate")
	}
	g2.Release(1)
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

// Under concurrent releases, each held request proceeds exactly once.
func TestGateExactlyOnce(t *testing.T) {
	d, m := newDev(t)
	g := d.NewGate(faultdev.Writes)
	const n = 200
	var calls [n]atomic.Int32
	var done sync.WaitGroup
	done.Add(n)
	for i := range n {
		r := &device.Request{Op: device.OpWrite, Off: int64(i) * 512, Buf: buf(512, byte(i)),
			Done: func(_ *device.Request, err error) {
				if err != nil {
					t.Error(err)
				}
				calls[i].Add(1)
				done.Done()
			}}
		go func() {
			if err := d.Submit(r); err != nil {
				t.Error(err)
			}
		}()
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n / 8 {
				g.Release(1)
			}
		})
	}
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	g.Open()
	done.Wait()
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("request %d completed %d times", i, c)
		}
	}
	if len(m.Pending()) != n {
		t.Fatalf("inner device saw %d writes, want %d", len(m.Pending()), n)
	}
	if s := d.Stats(); s.Write.Completed != n || s.InFlight != 0 {
		t.Fatalf("stats: %v", s)
	}
}

func TestWaitHeldContext(t *testing.T) {
	d, _ := newDev(t)
	g := d.NewGate(faultdev.Reads)
	c, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.WaitHeld(c, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitHeld = %v, want DeadlineExceeded", err)
	}
	if err := g.WaitHeld(c, 0); err != nil {
		t.Fatalf("WaitHeld(0) = %v", err)
	}
}

func TestLatency(t *testing.T) {
	d, _ := newDev(t)
	const delay = 50 * time.Millisecond
	d.SetLatency(faultdev.Writes, faultdev.Fixed(delay))
	start := time.Now()
	ch := submit(t, d, device.OpWrite, 0, buf(512, 1))
	if el := time.Since(start); el > delay/2 {
		t.Fatalf("Submit took %v with a %v latency", el, delay)
	}
	// The write is in flight (delayed) while a read completes.
	if err := device.ReadAt(d, buf(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Write.InFlight != 1 || s.Read.Completed != 1 {
		t.Fatalf("stats during the delay: %v", s)
	}
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < delay {
		t.Fatalf("write completed after %v, before its %v latency", el, delay)
	}
	d.SetLatency(faultdev.Writes, nil)
	start = time.Now()
	if err := device.WriteAt(d, buf(512, 1), 0); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= delay {
		t.Fatalf("write took %v after the latency was removed", el)
	}
}

func TestUniformLatency(t *testing.T) {
	a, b := faultdev.Uniform(time.Millisecond, 2*time.Millisecond, 3), faultdev.Uniform(time.Millisecond, 2*time.Millisecond, 3)
	distinct := map[time.Duration]bool{}
	for range 100 {
		x, y := a.Delay(faultdev.IO{}), b.Delay(faultdev.IO{})
		if x != y || x < time.Millisecond || x > 2*time.Millisecond {
			t.Fatalf("delays %v, %v", x, y)
		}
		distinct[x] = true
	}
	if len(distinct) < 50 {
		t.Fatalf("only %d distinct delays", len(distinct))
	}
}

// Close releases held I/Os, waits for them, and closes the inner device.
func TestCloseReleasesGates(t *testing.T) {
	m := newMem(t, 512)
	d := faultdev.New(m)
	g := d.NewGate(faultdev.Writes)
	d.SetLatency(faultdev.Reads, faultdev.Fixed(20*time.Millisecond))
	w := submit(t, d, device.OpWrite, 0, buf(512, 1))
	r := submit(t, d, device.OpRead, 0, device.AlignedBuf(512))
	if err := g.WaitHeld(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Both completed before Close returned.
	for _, ch := range []<-chan error{w, r} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Close returned before a request completed")
		}
	}
	if err := device.WriteAt(d, buf(512, 1), 0); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
	if err := d.Close(); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := device.ReadAt(m, device.AlignedBuf(512), 0); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("inner device still open: %v", err)
	}
}

// A request the inner device refuses at Submit completes with its error.
func TestInnerSubmitError(t *testing.T) {
	d, m := newDev(t)
	m.Close()
	err := device.WriteAt(d, buf(512, 1), 0)
	if !errors.Is(err, device.ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if s := d.Stats(); s.Write.Failed != 1 || s.Write.Completed != 1 || s.InFlight != 0 {
		t.Fatalf("stats: %v", s)
	}
}

func TestValidationNotCounted(t *testing.T) {
	d, _ := newDev(t, faultdev.OnOps(faultdev.AnyOp))
	if err := device.WriteAt(d, buf(100, 1), 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("err = %v, want EINVAL", err)
	}
	if s := d.Stats(); s != (faultdev.Stats{}) {
		t.Fatalf("stats: %v", s)
	}
}

func TestPredicates(t *testing.T) {
	rd := faultdev.IO{Op: device.OpRead, Off: 4096, Len: 4096}
	wr := faultdev.IO{Op: device.OpWrite, Off: 0, Len: 512}
	fl := faultdev.IO{Op: device.OpFlush}
	for _, c := range []struct {
		p          faultdev.Predicate
		rd, wr, fl bool
		str        string
	}{
		{faultdev.Reads, true, false, false, "reads"},
		{faultdev.Reads | faultdev.Flushes, true, false, true, "reads|flushes"},
		{faultdev.AnyOp, true, true, true, "any"},
		{faultdev.Ops(0), false, false, false, "none"},
		{faultdev.Range{Off: 511, Len: 1}, false, true, false, "[511, +1)"},
		{faultdev.Range{Off: 512, Len: 3584}, false, false, false, "[512, +3584)"},
		{faultdev.Range{Off: 8191, Len: 1}, true, false, false, "[8191, +1)"},
		{faultdev.Not(faultdev.Writes), true, false, true, "not writes"},
		{faultdev.Or(faultdev.Writes, faultdev.Flushes), false, true, true, "(writes or flushes)"},
		{faultdev.And(), true, true, true, "()"},
		{faultdev.Or(), false, false, false, "()"},
		{faultdev.PredicateFunc(func(io faultdev.IO) bool { return io.Len == 512 }), false, true, false, "func"},
	} {
		if c.p.Evaluate(rd) != c.rd || c.p.Evaluate(wr) != c.wr || c.p.Evaluate(fl) != c.fl || c.p.String() != c.str {
			t.Errorf("%s: got %v %v %v", c.p, c.p.Evaluate(rd), c.p.Evaluate(wr), c.p.Evaluate(fl))
		}
	}
	nth := faultdev.Nth(2, faultdev.Writes)
	from := faultdev.FromNth(2, faultdev.Writes)
	var gotNth, gotFrom []bool
	for _, io := range []faultdev.IO{wr, rd, wr, wr, rd, wr} {
		gotNth = append(gotNth, nth.Evaluate(io))
		gotFrom = append(gotFrom, from.Evaluate(io))
	}
	if !slices.Equal(gotNth, []bool{false, false, true, false, false, false}) ||
		!slices.Equal(gotFrom, []bool{false, false, true, true, false, true}) {
		t.Errorf("Nth %v, FromNth %v", gotNth, gotFrom)
	}
	if s := nth.String(); s != "the 2nd writes" {
		t.Errorf("Nth.String() = %q", s)
	}
	if s := faultdev.OnRange(faultdev.Writes, 0, 4096).String(); s != "input/output error on (writes and [0, +4096))" {
		t.Errorf("OnRange.String() = %q", s)
	}
	if s := (&faultdev.Fault{Err: syscall.ENOSPC, AfterIO: true}).String(); s != "no space left on device on every I/O, after the I/O" {
		t.Errorf("Fault.String() = %q", s)
	}
	if s := wr.String(); s != "write [0, +512)" {
		t.Errorf("IO.String() = %q", s)
	}
}

// Many goroutines doing I/O while injectors and gates are installed,
// toggled and removed: a -race check of the lock-free paths.
func TestConcurrentReconfiguration(t *testing.T) {
	d, _ := newDev(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := buf(4096, byte(g))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := int64(g*64+i%64) * 4096
				var err error
				switch i % 3 {
				case 0:
					err = device.WriteAt(d, p, off)
				case 1:
					err = device.ReadAt(d, p, off)
				default:
					err = device.Flush(d)
				}
				if err != nil && !errors.Is(err, syscall.EIO) {
					t.Error(err)
					return
				}
			}
		})
	}
	for i := range 100 {
		inj := d.Inject(faultdev.Randomly(faultdev.AnyOp, 0.5, uint64(i)))
		corrupt := d.Inject(&faultdev.Corruption{Unit: 4096, Seed: uint64(i)})
		gate := d.NewGate(faultdev.Writes)
		d.SetLatency(faultdev.Reads, faultdev.Fixed(time.Microsecond))
		inj.Disable()
		gate.Release(3)
		d.SetLatency(faultdev.Reads, nil)
		inj.Remove()
		corrupt.Remove()
		gate.Remove()
		_ = d.Stats()
	}
	close(stop)
	wg.Wait()
	if s := d.Stats(); s.InFlight != 0 || s.Read.Submitted != s.Read.Completed || s.Write.Submitted != s.Write.Completed {
		t.Fatalf("stats: %v", s)
	}
}

func BenchmarkParallel4KRead(b *testing.B) {
	m, err := memdev.New(64<<20, memdev.Options{})
	if err != nil {
		b.Fatal(err)
	}
	d := faultdev.New(m)
	defer d.Close()
	b.SetBytes(4096)
	b.RunParallel(func(pb *testing.PB) {
		p := device.AlignedBuf(4096)
		var off int64
		for pb.Next() {
			if err := device.ReadAt(d, p, off); err != nil {
				b.Fatal(err)
			}
			off = (off + 4096) % (64 << 20)
		}
	})
}
