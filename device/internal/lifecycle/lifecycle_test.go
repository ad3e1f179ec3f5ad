package lifecycle

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestShutRefusesNewRequests(t *testing.T) {
	var tr Tracker
	if tr.Closed() {
		t.Fatal("a zero Tracker is closed")
	}
	if !tr.Enter() {
		t.Fatal("Enter refused on an open Tracker")
	}
	tr.Exit()
	if !tr.Shut() {
		t.Fatal("first Shut returned false")
	}
	if tr.Shut() {
		t.Fatal("second Shut returned true")
	}
	if !tr.Closed() {
		t.Fatal("Closed is false after Shut")
	}
	if tr.Enter() {
		t.Fatal("Enter admitted a request after Shut")
	}
	tr.Wait() // nothing in flight: returns at once
}

func TestWaitDrainsRequestsInFlight(t *testing.T) {
	var tr Tracker
	const n = 3
	for range n {
		if !tr.Enter() {
			t.Fatal("Enter refused")
		}
	}
	tr.Shut()
	waited := make(chan struct{})
	go func() { tr.Wait(); close(waited) }()
	for i := range n {
		select {
		case <-waited:
			t.Fatalf("Wait returned with %d requests in flight", n-i)
		case <-time.After(10 * time.Millisecond):
		}
		tr.Exit()
	}
	<-waited
	tr.Wait() // and again, at once
}

// TestConcurrent races Enter/Exit against Shut: Wait returns only when no
// admitted request is left, and no request is admitted once Shut has
// returned.
func TestConcurrent(t *testing.T) {
	for range 20 {
		var tr Tracker
		var live atomic.Int64 // requests between Enter and Exit
		var shut atomic.Bool  // set once Shut has returned
		var late atomic.Bool  // a request was admitted after that
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					after := shut.Load()
					if !tr.Enter() {
						return
					}
					if after {
						late.Store(true)
					}
					live.Add(1)
					runtime.Gosched()
					live.Add(-1)
					tr.Exit()
				}
			}()
		}
		time.Sleep(100 * time.Microsecond)
		tr.Shut()
		shut.Store(true)
		tr.Wait()
		if n := live.Load(); n != 0 {
			t.Fatalf("Wait returned with %d requests in flight", n)
		}
		wg.Wait()
		if late.Load() {
			t.Fatal("Enter admitted a request after Shut returned")
		}
	}
}
