package iolock

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestDIOBeginEndWait(t *testing.T) {
	var d DIO
	d.Wait() // nothing in flight: returns at once
	if err := d.WaitContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Begin()
	d.Begin()
	d.Begin()
	if d.InFlight() != 3 || d.Max() != 3 {
		t.Fatalf("InFlight %d Max %d", d.InFlight(), d.Max())
	}
	done := make(chan struct{})
	go func() {
		d.Wait()
		close(done)
	}()
	// Wait must not return while I/Os are in flight. Make sure the waiter
	// is blocked before ending them: it registers under d.mu.
	waitFor(t, "Wait to block", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.mu.done != nil
	})
	d.End()
	d.End()
	select {
	case <-done:
		t.Fatal("Wait returned with one I/O in flight")
	default:
	}
	d.End()
	<-done
	if d.InFlight() != 0 || d.Max() != 3 {
		t.Fatalf("InFlight %d Max %d", d.InFlight(), d.Max())
	}
	if d.waiting.Load() || d.mu.done != nil {
		t.Fatal("wait state not cleared")
	}
	if old := d.ResetMax(); old != 3 || d.Max() != 0 {
		t.Fatalf("ResetMax %d, Max %d", old, d.Max())
	}
	d.Begin()
	if old := d.ResetMax(); old != 1 || d.Max() != 1 {
		t.Fatalf("ResetMax with one in flight: %d, Max %d", old, d.Max())
	}
	d.End()
	if d.Underflows() != 0 {
		t.Fatal("underflow")
	}
}

func TestDIOWaitContext(t *testing.T) {
	var d DIO
	d.Begin()
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := d.WaitContext(ctx); err != context.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
	// A later waiter is still woken, and the abandoned one leaves nothing
	// behind once the count reaches zero.
	done := make(chan error)
	go func() { done <- d.WaitContext(context.Background()) }()
	d.End()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d.waiting.Load() || d.mu.done != nil {
		t.Fatal("wait state not cleared")
	}
}

// TestDIOManyWaiters: every blocked waiter returns when the count reaches 0,
// including waiters that arrive while the count bounces (Begin after a Wait
// registered but before the last End).
func TestDIOManyWaiters(t *testing.T) {
	var d DIO
	for range 100 {
		d.Begin()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(d.Wait)
	}
	var ends sync.WaitGroup
	for range 100 {
		ends.Go(func() {
			d.Begin()
			d.End()
			d.End()
		})
	}
	ends.Wait()
	wg.Wait()
	if d.InFlight() != 0 || d.Underflows() != 0 || d.Max() < 100 || d.Max() > 200 {
		t.Fatalf("InFlight %d Underflows %d Max %d", d.InFlight(), d.Underflows(), d.Max())
	}
}

// TestDIODrainUnderExclusive is the engine's pattern: async I/Os begin under
// a shared hold and complete after it is released; truncate takes the lock
// exclusive (no new Begin) and drains.
func TestDIODrainUnderExclusive(t *testing.T) {
	var (
		l         Lock
		d         DIO
		completed = make(chan struct{})
	)
	l.Lock(Shared)
	d.Begin()
	l.Unlock(Shared) // submitted; completion pending
	l.Lock(Exclusive)
	go func() {
		d.End()
		close(completed)
	}()
	d.Wait()
	if d.InFlight() != 0 {
		t.Fatal("drained with I/O in flight")
	}
	<-completed
	l.Unlock(Exclusive)
}
