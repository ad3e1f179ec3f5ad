package faultdev

import (
	"context"
	"fmt"
	"sync"
)

// Gate holds the I/Os its predicate matches before they reach the inner
// device, until the test lets them through. It is how a test makes an
// interleaving exact without sleeping: hold the I/Os, WaitHeld until they
// have all arrived, check what must be true while they are stuck (locks
// held, counters, other requests proceeding), then Release or Open.
//
// A gate is either closed (holding, the state NewGate returns) or open
// (letting everything through). While closed it also has a number of
// credits, each of which lets one matching I/O through: Release(n) adds n
// credits and spends them at once on the I/Os held longest; credits left
// over are spent on the next matching I/Os to arrive. Close resets the
// credits to zero.
//
// Each held I/O proceeds exactly once, in arrival order, on the goroutine
// that releases it (the caller of Release or Open): it continues through the
// later gates and is submitted to the inner device before Release returns.
//
// The predicate is evaluated once for every I/O that reaches the gate,
// open or closed, so a stateful predicate (Nth) counts the same way in both
// states. Closing the device releases every held I/O and makes every gate
// let everything through.
type Gate struct {
	d *Device   // Immutable.
	p Predicate // Immutable.

	mu struct {
		sync.Mutex
		open    bool
		removed bool
		credits int
		// held is the queue of held I/Os, oldest first.
		held []*ioState
		// changed is closed, and replaced, whenever an I/O is held: the
		// broadcast WaitHeld sleeps on.
		changed chan struct{}
	}
}

// NewGate installs a closed gate holding the I/Os that p matches. Gates
// are passed in the order they were installed; an I/O matching several
// waits at each in turn.
func (d *Device) NewGate(p Predicate) *Gate {
	g := &Gate{d: d, p: p}
	g.mu.changed = make(chan struct{})
	d.mu.Lock()
	gs := append(append([]*Gate(nil), d.gateList()...), g)
	d.gates.Store(&gs)
	d.mu.Unlock()
	return g
}

// hold offers st to the gate and reports whether the gate kept it. If it
// did, the gate later resumes st's journey through the gates.
func (g *Gate) hold(st *ioState) bool {
	if !g.p.Evaluate(st.io) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.mu.open || g.mu.removed || g.d.life.Closed():
		return false
	case g.mu.credits > 0:
		g.mu.credits--
		return false
	}
	g.mu.held = append(g.mu.held, st)
	close(g.mu.changed)
	g.mu.changed = make(chan struct{})
	return true
}

// Release lets n more matching I/Os through: the n held longest, and if
// fewer than n are held, the next ones to arrive (see Gate). It does
// nothing to an open gate.
func (g *Gate) Release(n int) {
	g.mu.Lock()
	if g.mu.open || n <= 0 {
		g.mu.Unlock()
		return
	}
	g.mu.credits += n
	k := min(g.mu.credits, len(g.mu.held))
	run := g.takeLocked(k)
	g.mu.credits -= k
	g.mu.Unlock()
	g.resume(run)
}

// Open releases every held I/O and lets every later one through until
// Close.
func (g *Gate) Open() {
	g.mu.Lock()
	g.mu.open = true
	g.mu.credits = 0
	run := g.takeLocked(len(g.mu.held))
	g.mu.Unlock()
	g.resume(run)
}

// Close makes the gate hold matching I/Os again, with no credits.
func (g *Gate) Close() {
	g.mu.Lock()
	g.mu.open = false
	g.mu.credits = 0
	g.mu.Unlock()
}

// Remove opens the gate and uninstalls it. It is idempotent.
func (g *Gate) Remove() {
	g.mu.Lock()
	g.mu.removed = true
	run := g.takeLocked(len(g.mu.held))
	g.mu.Unlock()
	g.resume(run)
	g.d.removeGate(g)
}

// Held returns the number of I/Os the gate holds now.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.mu.held)
}

// WaitHeld blocks until the gate holds at least n I/Os and returns nil, or
// returns ctx.Err() if ctx is done first.
func (g *Gate) WaitHeld(ctx context.Context, n int) error {
	for {
		g.mu.Lock()
		held, changed := len(g.mu.held), g.mu.changed
		g.mu.Unlock()
		if held >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("faultdev: waiting for %d I/Os held by the gate on %s (%d held): %w", n, g.p, held, ctx.Err())
		}
	}
}

// String describes the gate and its state.
func (g *Gate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	state := "closed"
	if g.mu.open || g.mu.removed {
		state = "open"
	}
	return fmt.Sprintf("gate on %s (%s, %d held, %d credits)", g.p, state, len(g.mu.held), g.mu.credits)
}

// takeLocked removes and returns the k I/Os held longest.
//
// Preconditions: g.mu is held.
func (g *Gate) takeLocked(k int) []*ioState {
	if k == 0 {
		return nil
	}
	run := make([]*ioState, k)
	copy(run, g.mu.held)
	n := copy(g.mu.held, g.mu.held[k:])
	clear(g.mu.held[n:])
	g.mu.held = g.mu.held[:n]
	return run
}

// releaseAll lets every held I/O through, for Close of the device. Later
// arrivals pass because the device is closed.
func (g *Gate) releaseAll() {
	g.mu.Lock()
	run := g.takeLocked(len(g.mu.held))
	g.mu.Unlock()
	g.resume(run)
}

func (g *Gate) resume(run []*ioState) {
	for _, st := range run {
		st.passGates()
	}
}
