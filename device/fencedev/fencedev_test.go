package fencedev_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/fencedev"
	"github.com/sluicefs/sluice/device/memdev"
)

// clock is a fake clock that moves only when told.
type clock struct{ ns atomic.Int64 }

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *clock) now() time.Time               { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *clock) at(d time.Duration) time.Time { return epoch.Add(d) }
func (c *clock) set(d time.Duration)          { c.ns.Store(int64(d)) }

func newMem(t *testing.T) *memdev.Device {
	t.Helper()
	mem, err := memdev.New(1<<20, memdev.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

func block(b byte) []byte {
	p := device.AlignedBuf(4096)
	for i := range p {
		p[i] = b
	}
	return p
}

// content reads block 0 of the inner device, past the fence.
func content(t *testing.T, d *fencedev.Device) byte {
	t.Helper()
	p := device.AlignedBuf(4096)
	if err := device.ReadAt(d.Inner(), p, 0); err != nil {
		t.Fatal(err)
	}
	return p[0]
}

func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, fencedev.ErrFenced) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s: %v, want an error matching ErrFenced and EIO", what, err)
	}
}

// TestWindow walks a fake clock through the window: a write inside it
// lands; at the deadline every kind of request fails with ErrFenced and
// EIO and changes nothing; Extend reopens it; Fence closes it for good,
// keeping its cause.
func TestWindow(t *testing.T) {
	var c clock
	d := fencedev.New(newMem(t), fencedev.Options{Deadline: c.at(time.Second), Now: c.now})
	defer d.Close()
	if err := device.WriteAt(d, block(1), 0); err != nil {
		t.Fatalf("write inside the window: %v", err)
	}
	c.set(time.Second)
	wantFenced(t, "write at the deadline", device.WriteAt(d, block(2), 0))
	wantFenced(t, "read at the deadline", device.ReadAt(d, block(0), 0))
	wantFenced(t, "flush at the deadline", device.Flush(d))
	if got := content(t, d); got != 1 {
		t.Fatalf("block 0 holds %d after a fenced write, want 1", got)
	}
	d.Extend(c.at(2 * time.Second))
	if err := device.WriteAt(d, block(3), 0); err != nil {
		t.Fatalf("write after Extend: %v", err)
	}
	cause := errors.New("lease 42 not found")
	d.Fence(cause)
	d.Extend(c.at(time.Hour)) // too late: fenced for good
	err := device.WriteAt(d, block(4), 0)
	wantFenced(t, "write after Fence", err)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "lease 42 not found") {
		t.Errorf("write after Fence: %v, want it to carry the cause", err)
	}
	if got := content(t, d); got != 3 {
		t.Fatalf("block 0 holds %d, want 3", got)
	}
	s := d.Stats()
	if s.Submitted != 6 || s.Fenced != 4 || s.Held != 0 || s.InFlight != 0 || !d.Fenced() {
		t.Errorf("stats %+v", s)
	}
}

// submitAsync submits a write of block b at offset 0 and returns the
// channel its result arrives on.
func submitAsync(t *testing.T, d device.Device, b byte) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	r := &device.Request{Op: device.OpWrite, Buf: block(b), Done: func(_ *device.Request, err error) { ch <- err }}
	if err := d.Submit(r); err != nil {
		t.Fatal(err)
	}
	return ch
}

func pending(ch <-chan error) bool {
	select {
	case err := <-ch:
		panic(err) // completed: the caller fails the test
	default:
		return true
	}
}

// TestHoldUntilNotBefore: a taking-over host's requests wait until
// NotBefore, then proceed in order.
func TestHoldUntilNotBefore(t *testing.T) {
	start := time.Now()
	const wait = 150 * time.Millisecond
	d := fencedev.New(newMem(t), fencedev.Options{NotBefore: start.Add(wait), Deadline: start.Add(time.Hour)})
	defer d.Close()
	first, second := submitAsync(t, d, 1), submitAsync(t, d, 2)
	if s := d.Stats(); s.HeldNow != 2 || s.InFlight != 0 {
		t.Fatalf("before NotBefore: %+v, want both held", s)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < wait {
		t.Errorf("the held writes completed after %v, before NotBefore (%v)", el, wait)
	}
	if got := content(t, d); got != 2 {
		t.Errorf("block 0 holds %d, want 2: held requests keep their order", got)
	}
	if s := d.Stats(); s.Held != 2 || s.HeldNow != 0 || s.Fenced != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestGrace: past the deadline a request waits up to Grace; a renewal
// releases it, a loss fails it, and without either it fails when Grace
// runs out.
func TestGrace(t *testing.T) {
	t.Run("renewed", func(t *testing.T) {
		var c clock
		d := fencedev.New(newMem(t), fencedev.Options{Deadline: c.at(time.Second), Grace: time.Hour, Now: c.now})
		defer d.Close()
		c.set(time.Second)
		ch := submitAsync(t, d, 1)
		pending(ch)
		d.Extend(c.at(500 * time.Millisecond)) // still past: stays held
		pending(ch)
		d.Extend(c.at(2 * time.Second))
		if err := <-ch; err != nil {
			t.Fatalf("held write after a renewal: %v", err)
		}
		if got := content(t, d); got != 1 {
			t.Errorf("block 0 holds %d", got)
		}
	})
	t.Run("lost", func(t *testing.T) {
		var c clock
		d := fencedev.New(newMem(t), fencedev.Options{Deadline: c.at(time.Second), Grace: time.Hour, Now: c.now})
		defer d.Close()
		c.set(time.Second)
		ch := submitAsync(t, d, 1)
		pending(ch)
		d.Fence(errors.New("lease expired"))
		wantFenced(t, "held write after Fence", <-ch)
		if got := content(t, d); got != 0 {
			t.Errorf("block 0 holds %d after a fenced write", got)
		}
	})
	t.Run("expired", func(t *testing.T) {
		now := time.Now()
		const grace = 100 * time.Millisecond
		d := fencedev.New(newMem(t), fencedev.Options{Deadline: now, Grace: grace})
		defer d.Close()
		ch := submitAsync(t, d, 1)
		wantFenced(t, "held write when the grace ran out", <-ch)
		if el := time.Since(now); el < grace {
			t.Errorf("failed after %v, before the grace of %v ran out", el, grace)
		}
		if got := content(t, d); got != 0 {
			t.Errorf("block 0 holds %d after a fenced write", got)
		}
	})
}

// TestCloseFailsHeld: Close fails the held requests and returns.
func TestCloseFailsHeld(t *testing.T) {
	d := fencedev.New(newMem(t), fencedev.Options{NotBefore: time.Now().Add(time.Hour)})
	ch := submitAsync(t, d, 1)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; !errors.Is(err, device.ErrClosed) {
		t.Fatalf("held write at Close: %v, want ErrClosed", err)
	}
	if err := device.WriteAt(d, block(1), 0); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// TestOverdue: a request that stays in the inner device longer than
// RequestBound is counted; it cannot be recalled.
func TestOverdue(t *testing.T) {
	slow := faultdev.New(newMem(t))
	slow.SetLatency(faultdev.Writes, faultdev.Fixed(60*time.Millisecond))
	d := fencedev.New(slow, fencedev.Options{Deadline: time.Now().Add(time.Hour), RequestBound: 20 * time.Millisecond})
	defer d.Close()
	if err := device.WriteAt(d, block(1), 0); err != nil {
		t.Fatal(err)
	}
	if err := device.ReadAt(d, block(0), 0); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s.Overdue != 1 {
		t.Errorf("stats %+v, want the slow write overdue", s)
	}
}

// TestConcurrentFence: writers racing a Fence either land before it or
// fail; none lands after Fence returned.
func TestConcurrentFence(t *testing.T) {
	d := fencedev.New(newMem(t), fencedev.Options{Deadline: time.Now().Add(time.Hour), Grace: time.Hour})
	defer d.Close()
	var fenced atomic.Bool
	var late atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := block(byte(g))
			for i := 0; i < 200; i++ {
				was := fenced.Load()
				err := device.WriteAt(d, p, int64(g)*4096)
				if was && err == nil {
					late.Add(1)
				}
				if err != nil {
					wantFenced(t, "write", err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Millisecond)
	d.Fence(errors.New("lost"))
	fenced.Store(true)
	wg.Wait()
	if late.Load() != 0 {
		t.Errorf("%d writes submitted after Fence returned succeeded", late.Load())
	}
}
