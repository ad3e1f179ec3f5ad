//go:build invariants || race

package lockrank

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

const enabled = true

// The checker's own functions are marked go:norace: under -race they run
// on every lock taken, and their shared state is guarded by gstate.mu and
// sync.Map, which the race detector still sees; skipping the
// instrumentation of their plain loads and stores saves about a fifth of
// the check's cost (BenchmarkMutex).

// held is one lock a goroutine holds.
type held struct {
	rank Rank
	key  uint64
	lock unsafe.Pointer
	pcs  [12]uintptr // the stack that took it
}

// gstate is one goroutine's held locks, in acquisition order. Only its
// goroutine appends; a Release from another goroutine may remove, hence mu.
type gstate struct {
	mu   sync.Mutex
	held []held
}

// goroutines maps goroutines (gkey) to their gstate. Entries stay (their
// number is bounded by the most goroutines alive at once), so the common
// lookup is sync.Map's lock-free read.
var goroutines sync.Map // uintptr -> *gstate

// disabled turns the checks off (Disable).
var disabled atomic.Bool

// Disable turns the checks off for the rest of the process: for the tests
// of a lock primitive, which use one lock in ways the engine never does
// (one goroutine holding it shared twice, say).
func Disable() { disabled.Store(true) }

// onViolation reports a violation; tests of this package replace it. The
// report goes to standard error before the panic, because a caller may
// recover panics (go-fuse turns a handler's panic into EIO) and the locks
// the goroutine holds then stay held: the report must not be lost with it.
var onViolation = func(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	panic(msg)
}

//go:norace
func state(create bool) *gstate {
	id := gkey()
	if v, ok := goroutines.Load(id); ok {
		return v.(*gstate)
	}
	if !create {
		return nil
	}
	g := &gstate{}
	goroutines.Store(id, g)
	return g
}

// Acquire checks that the calling goroutine may wait for lock l of rank r,
// then records it as held.
//
//go:norace
func Acquire(r Rank, key uint64, l unsafe.Pointer) {
	if disabled.Load() {
		return
	}
	g := state(true)
	g.mu.Lock()
	report := g.conflictReport("", r, key, l)
	g.push(r, key, l)
	g.mu.Unlock()
	if report != "" {
		onViolation(report)
	}
}

// conflictReport returns the violation report if taking (r, key, l) breaks
// the order against a lock g holds, or "". what prefixes the reason.
//
// Preconditions: g.mu is held.
//
//go:norace
func (g *gstate) conflictReport(what string, r Rank, key uint64, l unsafe.Pointer) string {
	for i := range g.held {
		if msg := conflict(&g.held[i], r, key, l); msg != "" {
			return violation(what+msg, r, key, g.held)
		}
	}
	return ""
}

// conflict says why taking (r, key, l) while holding h breaks the order.
//
//go:norace
func conflict(h *held, r Rank, key uint64, l unsafe.Pointer) string {
	switch {
	case h.lock == l:
		return "lock already held by this goroutine"
	case ranks[h.rank].leaf:
		return fmt.Sprintf("a lock taken while holding a leaf (%s)", h.rank)
	case h.rank > r:
		return fmt.Sprintf("rank %s taken while holding higher rank %s", r, h.rank)
	case h.rank == r && !ranks[r].multi:
		return fmt.Sprintf("two locks of rank %s held at once", r)
	case h.rank == r && (h.key == 0 || key <= h.key):
		return fmt.Sprintf("rank %s taken with key %d while holding key %d (keys must increase, and be nonzero)", r, key, h.key)
	}
	return ""
}

// Wait checks that the calling goroutine may wait for an event whose
// producer takes a lock of rank r (with key, for a multi rank; l is the
// lock waited on, or nil), as Acquire would, and records nothing: waiting
// for a page to be unlocked, for in-flight I/O to drain, for a sync point.
//
//go:norace
func Wait(r Rank, key uint64, l unsafe.Pointer) {
	if disabled.Load() {
		return
	}
	g := state(false)
	if g == nil {
		return
	}
	g.mu.Lock()
	report := g.conflictReport("waiting: ", r, key, l)
	g.mu.Unlock()
	if report != "" {
		onViolation(report)
	}
}

// TryAcquired records lock l as held without checking the order.
//
//go:norace
func TryAcquired(r Rank, key uint64, l unsafe.Pointer) {
	if disabled.Load() {
		return
	}
	g := state(true)
	g.mu.Lock()
	g.push(r, key, l)
	g.mu.Unlock()
}

//go:norace
func (g *gstate) push(r Rank, key uint64, l unsafe.Pointer) {
	g.held = append(g.held, held{rank: r, key: key, lock: l})
	runtime.Callers(4, g.held[len(g.held)-1].pcs[:])
}

// remove drops lock l from g and reports whether it was there.
//
//go:norace
func (g *gstate) remove(l unsafe.Pointer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.held) - 1; i >= 0; i-- {
		if g.held[i].lock == l {
			g.held = append(g.held[:i], g.held[i+1:]...)
			return true
		}
	}
	return false
}

// removeOwn drops lock l from the calling goroutine's held locks and
// reports whether it was there.
//
//go:norace
func removeOwn(l unsafe.Pointer) bool {
	g := state(false)
	if g == nil {
		return false
	}
	return g.remove(l)
}

// handedOff counts the holds of each lock handed to asynchronous requests
// and not yet released.
var handedOff struct {
	sync.Mutex
	n map[unsafe.Pointer]int
}

// Release records that lock l is released: by its holder, by a request it
// was handed off to, or by another goroutine (then it is removed from
// whichever goroutine holds it).
//
//go:norace
func Release(l unsafe.Pointer) {
	if disabled.Load() {
		return
	}
	if removeOwn(l) {
		return
	}
	handedOff.Lock()
	if n := handedOff.n[l]; n > 0 {
		if n == 1 {
			delete(handedOff.n, l)
		} else {
			handedOff.n[l] = n - 1
		}
		handedOff.Unlock()
		return
	}
	handedOff.Unlock()
	goroutines.Range(func(_, v any) bool {
		return !v.(*gstate).remove(l)
	})
}

// Handoff hands lock l from the calling goroutine to an asynchronous
// request: the goroutine no longer holds it.
//
//go:norace
func Handoff(l unsafe.Pointer) {
	if disabled.Load() {
		return
	}
	if !removeOwn(l) {
		onViolation("lockrank: Handoff of a lock the goroutine does not hold")
		return
	}
	handedOff.Lock()
	if handedOff.n == nil {
		handedOff.n = map[unsafe.Pointer]int{}
	}
	handedOff.n[l]++
	handedOff.Unlock()
}

// Held returns the ranks the calling goroutine holds, in acquisition order.
func Held() []Rank {
	g := state(false)
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := make([]Rank, len(g.held))
	for i, h := range g.held {
		rs[i] = h.rank
	}
	return rs
}

func violation(msg string, r Rank, key uint64, hs []held) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lockrank: lock order violation: %s\n\ntaking %s (key %d) at:\n", msg, r, key)
	var pcs [16]uintptr
	n := runtime.Callers(5, pcs[:])
	writeStack(&b, pcs[:n])
	fmt.Fprintf(&b, "\nwhile holding (oldest first):\n")
	for _, h := range hs {
		fmt.Fprintf(&b, "  %s (key %d), taken at:\n", h.rank, h.key)
		writeStack(&b, h.pcs[:])
	}
	return b.String()
}

func writeStack(b *strings.Builder, pcs []uintptr) {
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.PC != 0 {
			fmt.Fprintf(b, "    %s\n        %s:%d\n", f.Function, f.File, f.Line)
		}
		if !more {
			return
		}
	}
}
