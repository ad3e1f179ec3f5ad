// Package lifecycle tracks the life of a device: the requests in flight,
// closing it once, and waiting for those requests to drain. memdev and
// faultdev count a request from its acceptance by Submit until its Done has
// returned; directdev counts the goroutines inside Submit.
//
// The protocol:
//
//	if !t.Enter() { return ErrClosed }   // Submit: admit one request
//	... t.Exit()                         // when it is over (after Done)
//
//	if !t.Shut() { return ErrClosed }    // Close: refuse new requests
//	t.Wait()                             // and wait for those admitted
//
// Every method is safe for concurrent use, and the I/O path (Enter, Exit,
// Closed) is one or two atomic operations.
package lifecycle

import (
	"sync"
	"sync/atomic"
)

// Tracker counts the requests admitted and not yet retired, and whether the
// device is closed. The zero value is an open device with nothing in
// flight. A Tracker must not be copied after first use.
type Tracker struct {
	// state is the number of requests in flight, plus closedBit once
	// closed.
	state atomic.Int64
	// makeOnce makes drained; closeOnce closes it when the count reaches
	// zero after Shut.
	makeOnce, closeOnce sync.Once
	drained             chan struct{}
}

const closedBit = int64(1) << 62

// Enter admits one request and returns true, or returns false (admitting
// nothing) once Shut has been called.
func (t *Tracker) Enter() bool {
	if t.state.Add(1)&closedBit != 0 {
		t.Exit()
		return false
	}
	return true
}

// Exit retires one request admitted by Enter.
func (t *Tracker) Exit() {
	if t.state.Add(-1) == closedBit {
		t.drain()
	}
}

// Closed reports whether Shut has been called.
func (t *Tracker) Closed() bool { return t.state.Load()&closedBit != 0 }

// Shut closes the device to new requests: later calls of Enter return
// false. It returns false if the device was already shut.
func (t *Tracker) Shut() bool {
	s := t.state.Or(closedBit)
	if s == 0 {
		t.drain()
	}
	return s&closedBit == 0
}

// Wait blocks, after Shut, until every admitted request has been retired.
func (t *Tracker) Wait() { <-t.channel() }

func (t *Tracker) drain() { t.closeOnce.Do(func() { close(t.channel()) }) }

func (t *Tracker) channel() chan struct{} {
	t.makeOnce.Do(func() { t.drained = make(chan struct{}) })
	return t.drained
}
