package iolock

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestGrants runs the scripts in testdata/grants, which show the order in
// which a Lock grants requests. Regenerate the expected output with
//
//	go test ./iolock -run TestGrants -rewrite
//
// Commands (each names a request; a name is one goroutine's hold):
//
//	reset                              a fresh Lock
//	lock name=N mode=shared|exclusive [ctx]
//	                                   start a goroutine that calls Lock (or,
//	                                   with ctx, LockContext with a context that
//	                                   "cancel" cancels); wait until it is
//	                                   granted or known to be queued
//	trylock name=N mode=...            TryLock from the test goroutine
//	unlock name=N                      Unlock N's hold
//	demote name=N                      Demote N's Exclusive hold
//	cancel name=N                      cancel N's queued LockContext
//	state                              holders and queue, in arrival order
//	stats                              the Lock's Stats
//
// After lock, unlock, demote and cancel the output lists the names granted by
// that step, in queue order (one step's grants happen together).
func TestGrants(t *testing.T) {
	var h *grantHarness
	datadriven.RunTest(t, "testdata/grants", func(t *testing.T, d *datadriven.TestData) string {
		if h == nil || d.Cmd == "reset" {
			if h != nil {
				h.close(t)
			}
			h = newGrantHarness()
			if d.Cmd == "reset" {
				return ""
			}
		}
		out := h.run(t, d)
		h.check(t)
		return out
	})
	if h != nil {
		h.close(t)
	}
}

type grantReq struct {
	name   string
	mode   Mode
	cancel context.CancelFunc // nil unless started with ctx
}

type grantReport struct {
	name string
	err  error
}

type grantHarness struct {
	l       Lock
	held    map[string]Mode // current holds
	heldSeq []string        // holders in grant order
	pending []*grantReq     // queued requests, in arrival order
	reports chan grantReport
}

func newGrantHarness() *grantHarness {
	return &grantHarness{held: map[string]Mode{}, reports: make(chan grantReport, 64)}
}

// stepTimeout only turns a hang (a bug) into a failure; no step waits for
// time to pass.
const stepTimeout = 10 * time.Second

func parseMode(t *testing.T, d *datadriven.TestData) Mode {
	var s string
	d.ScanArgs(t, "mode", &s)
	switch s {
	case "shared":
		return Shared
	case "exclusive":
		return Exclusive
	}
	d.Fatalf(t, "bad mode %q", s)
	return 0
}

func (h *grantHarness) run(t *testing.T, d *datadriven.TestData) string {
	var name string
	if d.HasArg("name") {
		d.ScanArgs(t, "name", &name)
		if d.Cmd == "lock" || d.Cmd == "trylock" {
			if _, ok := h.held[name]; ok || h.find(name) >= 0 {
				d.Fatalf(t, "%s already holds or waits", name)
			}
		}
	}
	switch d.Cmd {
	case "lock":
		m := parseMode(t, d)
		req := &grantReq{name: name, mode: m}
		ctx := context.Background()
		if d.HasArg("ctx") {
			ctx, req.cancel = context.WithCancel(ctx)
		}
		before := h.l.Waiters()
		go func() {
			var err error
			if req.cancel != nil {
				err = h.l.LockContext(ctx, m)
			} else {
				h.l.Lock(m)
			}
			h.reports <- grantReport{name, err}
		}()
		// Either the request is granted, or it shows up in Waiters. Nothing
		// else can change the lock meanwhile: every other hold and request
		// is driven by this goroutine.
		deadline := time.Now().Add(stepTimeout)
		for {
			select {
			case r := <-h.reports:
				if r.name != name || r.err != nil {
					t.Fatalf("unexpected report %+v", r)
				}
				h.grant(name, m)
				return "granted: " + name
			default:
			}
			if h.l.Waiters() == before+1 {
				h.pending = append(h.pending, req)
				return "queued: " + name
			}
			if time.Now().After(deadline) {
				t.Fatalf("lock %s: neither granted nor queued", name)
			}
			runtime.Gosched()
		}

	case "trylock":
		m := parseMode(t, d)
		if h.l.TryLock(m) {
			h.grant(name, m)
			return "granted: " + name
		}
		return "failed: " + name

	case "unlock":
		m, ok := h.held[name]
		if !ok {
			d.Fatalf(t, "%s holds nothing", name)
		}
		before := h.l.Waiters()
		h.l.Unlock(m)
		h.release(name)
		return h.collect(t, before-h.l.Waiters(), "")

	case "demote":
		if h.held[name] != Exclusive {
			d.Fatalf(t, "%s does not hold exclusive", name)
		}
		before := h.l.Waiters()
		h.l.Demote()
		h.held[name] = Shared
		return h.collect(t, before-h.l.Waiters(), "")

	case "cancel":
		i := h.find(name)
		if i < 0 || h.pending[i].cancel == nil {
			d.Fatalf(t, "%s is not a queued lock with ctx", name)
		}
		h.pending[i].cancel()
		return h.collect(t, -1, name)

	case "state":
		return h.state(t)

	case "stats":
		s := h.l.Stats()
		return fmt.Sprintf("acquired: shared=%d exclusive=%d\ncontended: shared=%d exclusive=%d\n"+
			"tryfailed: shared=%d exclusive=%d\ndemoted: %d\ncancelled: %d",
			s.SharedAcquired, s.ExclusiveAcquired, s.SharedContended, s.ExclusiveContended,
			s.SharedTryFailed, s.ExclusiveTryFailed, s.Demoted, s.Cancelled)
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// collect waits for the reports of one step: n grants, or, for a cancel of
// name, that request's own outcome followed by however many grants its
// removal caused. It prints the granted names in queue order.
func (h *grantHarness) collect(t *testing.T, n int, cancelled string) string {
	var got []grantReport
	var out []string
	cancelSeen := cancelled == ""
	before := len(h.pending)
	timer := time.NewTimer(stepTimeout)
	defer timer.Stop()
	for !cancelSeen || len(got) < n {
		select {
		case r := <-h.reports:
			if r.name == cancelled {
				cancelSeen = true
				i := h.find(r.name)
				if r.err != nil {
					out = append(out, "cancelled: "+r.name)
					h.pending = slices.Delete(h.pending, i, i+1)
				} else {
					// The grant won the race with cancellation
					// (not expected in these scripts).
					got = append(got, r)
				}
				// Grants made by the removal: everyone that left
				// the queue other than the cancelled request.
				n = before - 1 - h.l.Waiters()
				if r.err == nil {
					n++
				}
				continue
			}
			if r.err != nil {
				t.Fatalf("unexpected report %+v", r)
			}
			got = append(got, r)
		case <-timer.C:
			t.Fatalf("timed out waiting for %d grants (got %v); lock: %s", n, got, h.l.String())
		}
	}
	var names []string
	for _, req := range slices.Clone(h.pending) {
		if slices.ContainsFunc(got, func(r grantReport) bool { return r.name == req.name }) {
			names = append(names, req.name)
			h.pending = slices.DeleteFunc(h.pending, func(p *grantReq) bool { return p == req })
			h.grant(req.name, req.mode)
		}
	}
	if len(names) != len(got) {
		t.Fatalf("grants %v do not match queue", got)
	}
	if len(names) == 0 {
		out = append(out, "granted: none")
	} else {
		out = append(out, "granted: "+strings.Join(names, " "))
	}
	return strings.Join(out, "\n")
}

func (h *grantHarness) find(name string) int {
	return slices.IndexFunc(h.pending, func(r *grantReq) bool { return r.name == name })
}

func (h *grantHarness) grant(name string, m Mode) {
	h.held[name] = m
	h.heldSeq = append(h.heldSeq, name)
}

func (h *grantHarness) release(name string) {
	delete(h.held, name)
	h.heldSeq = slices.DeleteFunc(h.heldSeq, func(s string) bool { return s == name })
}

func (h *grantHarness) state(t *testing.T) string {
	var b strings.Builder
	var sh []string
	ex := ""
	for _, n := range h.heldSeq {
		if h.held[n] == Exclusive {
			ex = n
		} else {
			sh = append(sh, n)
		}
	}
	switch {
	case ex != "":
		fmt.Fprintf(&b, "holders: exclusive %s\n", ex)
	case len(sh) > 0:
		fmt.Fprintf(&b, "holders: shared %s\n", strings.Join(sh, " "))
	default:
		b.WriteString("holders: none\n")
	}
	b.WriteString("queue:")
	if len(h.pending) == 0 {
		b.WriteString(" empty")
	}
	for _, r := range h.pending {
		fmt.Fprintf(&b, " %s(%s)", r.name, r.mode)
	}
	return b.String()
}

// check compares the harness's model with the Lock's own state.
func (h *grantHarness) check(t *testing.T) {
	t.Helper()
	var wantShared int
	wantEx := false
	for _, m := range h.held {
		if m == Shared {
			wantShared++
		} else {
			wantEx = true
		}
	}
	sh, ex := h.l.Holders()
	if sh != wantShared || ex != wantEx {
		t.Fatalf("lock holds shared=%d exclusive=%v, model %v", sh, ex, h.held)
	}
	if wantEx && wantShared > 0 {
		t.Fatalf("exclusive with shared holders: %v", h.held)
	}
	h.l.mu.Lock()
	var modes []Mode
	for w := h.l.mu.head; w != nil; w = w.next {
		modes = append(modes, w.mode)
	}
	queued := h.l.state.Load()&queuedBit != 0
	h.l.mu.Unlock()
	var want []Mode
	for _, r := range h.pending {
		want = append(want, r.mode)
	}
	if !slices.Equal(modes, want) || queued != (len(want) > 0) || h.l.Waiters() != len(want) {
		t.Fatalf("lock queue %v (queued bit %v, Waiters %d), model %v", modes, queued, h.l.Waiters(), want)
	}
}

// close releases every hold and cancels or drains every request so that no
// goroutine outlives the script.
func (h *grantHarness) close(t *testing.T) {
	for len(h.held) > 0 || len(h.pending) > 0 {
		if len(h.heldSeq) == 0 {
			t.Fatalf("queued requests with no holder: %s", h.l.String())
		}
		n := h.heldSeq[0]
		before := h.l.Waiters()
		h.l.Unlock(h.held[n])
		h.release(n)
		h.collect(t, before-h.l.Waiters(), "")
	}
}
