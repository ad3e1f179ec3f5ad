// Package faultdev wraps a device.Device to fail, delay, hold and silently
// corrupt its I/Os, and counts them. It is the test double for error paths,
// for data checksums and for exact concurrency in sluice's tests, in the
// spirit of pebble's vfs/errorfs.
//
// # Pipeline
//
// Every request accepted by Submit (device.ReadAt, WriteAt and Flush are
// Submit plus a wait) passes through the same stages, in order:
//
//  1. Validation: device.Check against the wrapper's size and I/O unit (those
//     of the inner device), then the closed check. A request refused here
//     returns its error from Submit, is not counted and never completes.
//  2. Injectors, on the submitting goroutine: every enabled Injection is
//     consulted in installation order and the first error wins. A plain
//     error completes the request at once (on another goroutine) without it
//     ever reaching the latency, the gates or the inner device: a failed
//     write changes nothing. An error made by ErrAfterIO (Fault.AfterIO)
//     lets the request carry on and replaces its result at the end. A
//     Corruption never fails a request: here it selects the reads to
//     corrupt and chooses the bits to flip in them.
//  3. Latency: if SetLatency installed a Latency for the request's kind, a
//     timer delays the request's entry into the gates. Submit does not wait.
//  4. Gates, in installation order: a closed Gate whose predicate matches
//     holds the request until it is released.
//  5. The inner device's Submit.
//  6. Completion, when the inner device's Done runs (or, for a failure at
//     stage 2 or a refusal by the inner Submit, on a new goroutine): if the
//     request is a read that succeeded and no late error replaces its
//     result, the bits the Corruptions chose at stage 2 are flipped in its
//     buffer, and it still reports success. Then the request is counted and
//     the submitter's Done runs.
//
// # Predicates and injectors
//
// A Predicate selects I/Os: Ops (Reads, Writes, Flushes, AnyOp, or a union
// such as Reads|Writes), Range, Nth, FromNth, Random, And, Or, Not and
// PredicateFunc compose into exact selections, such as
// Nth(2, And(Writes, Range{Off: 0, Len: 4096})), the second write touching the
// first 4 KiB. Fault turns a predicate into an Injector; OnNth, OnRange,
// OnOps and Randomly build the common ones. Injected errors default to EIO
// and reach the submitter wrapped in a *device.Error, so errors.Is(err,
// syscall.EIO) holds. Inject returns an Injection, the handle with which a
// test disables, re-enables or removes the injector once it has seen the
// failure it wanted ("heal" the device).
//
// # Silent corruption
//
// Two tools corrupt data without any error, for testing checksums. A
// Corruption, installed with Inject like any injector, flips bits in the
// data of the reads it selects after the inner device has read it: the
// stored data stays good, so disabling or removing the injection heals the
// device. CorruptRange(off, n) corrupts every read of one range, a block
// say; Corruption's fields select reads with a Predicate and flip a bit in
// every block a read covers. Device.CorruptStored flips bits in the inner
// device's stored data instead, so that every later read returns them.
// Both are deterministic: the bits flipped depend only on a seed and on
// device offsets.
//
// # Counters
//
// Stats returns, per request kind, the requests submitted (accepted),
// completed and failed, the errors injected, the reads corrupted, the bytes
// transferred, and the requests in flight now and at most since the last
// ResetStats, and the same in-flight figures over all kinds. A request is in flight from its
// acceptance by Submit until just before its Done runs, which includes the
// time it spends delayed or held at a gate: holding eight reads at a gate
// and waiting until Held() == 8 guarantees Stats().Read.MaxInFlight >= 8.
// Counters are atomics updated on the I/O path; a Stats snapshot reads them
// one by one, so it is exact only when the device is quiescent or the test
// has pinned the requests (at a gate, say).
//
// # Concurrency
//
// Every method is safe for concurrent use (but CorruptStored must not race
// with writes to the range it corrupts). Done never runs inside Submit:
// it runs on the inner device's completion goroutine, on a timer goroutine
// or on a new goroutine for an injected failure. A gate resumes the
// requests it releases on the goroutine that calls Release or Open. Lock
// order, outermost first:
//
//	Device.mu (installing and removing injections and gates)
//	    Gate.mu (a gate's queue; never held while calling the inner device)
//
// The I/O path takes no Device lock: injections, gates and latencies are
// read through atomic pointers to immutable snapshots.
package faultdev

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/internal/lifecycle"
)

// Device wraps an inner device.Device with injectors, latency, gates and
// counters. See the package documentation.
type Device struct {
	inner  device.Device // Immutable.
	size   int64         // Immutable: inner.Size().
	ioUnit int           // Immutable: inner.IOUnit().

	// injections and gates are immutable snapshots, replaced whole under
	// mu and read without it.
	injections atomic.Pointer[[]*Injection]
	gates      atomic.Pointer[[]*Gate]
	// latency holds the Latency of each device.Op, or nil.
	latency [device.OpFlush + 1]atomic.Pointer[latencyBox]

	life  lifecycle.Tracker
	stats counters

	// mu serializes changes to injections and gates.
	mu sync.Mutex
}

var _ device.Device = (*Device)(nil)

// New wraps inner, installing injectors in order (use Inject instead for an
// injector to disable or remove later). The wrapper owns inner: its Close
// closes inner.
func New(inner device.Device, injectors ...Injector) *Device {
	d := &Device{inner: inner, size: inner.Size(), ioUnit: inner.IOUnit()}
	for _, inj := range injectors {
		d.Inject(inj)
	}
	return d
}

// Inner returns the wrapped device. I/O submitted to it directly bypasses
// the wrapper: no faults, no gates, no counts.
func (d *Device) Inner() device.Device { return d.inner }

// Size returns the inner device's size.
func (d *Device) Size() int64 { return d.size }

// IOUnit returns the inner device's I/O unit.
func (d *Device) IOUnit() int { return d.ioUnit }

// Inject installs inj after the injectors already installed, enabled, and
// returns its handle.
func (d *Device) Inject(inj Injector) *Injection {
	i := &Injection{d: d, inj: inj}
	i.enabled.Store(true)
	d.mu.Lock()
	defer d.mu.Unlock()
	var old []*Injection
	if p := d.injections.Load(); p != nil {
		old = *p
	}
	is := append(slices.Clip(old), i)
	d.injections.Store(&is)
	return i
}

// Injections returns the installed injections, in order.
func (d *Device) Injections() []*Injection {
	if p := d.injections.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

func (d *Device) removeInjection(i *Injection) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.injections.Load(); p != nil {
		is := slices.DeleteFunc(slices.Clone(*p), func(x *Injection) bool { return x == i })
		d.injections.Store(&is)
	}
}

// gateList returns the current gate snapshot, which must not be modified.
func (d *Device) gateList() []*Gate {
	if p := d.gates.Load(); p != nil {
		return *p
	}
	return nil
}

// Gates returns the installed gates, in order.
func (d *Device) Gates() []*Gate { return slices.Clone(d.gateList()) }

func (d *Device) removeGate(g *Gate) {
	d.mu.Lock()
	defer d.mu.Unlock()
	gs := slices.DeleteFunc(slices.Clone(d.gateList()), func(x *Gate) bool { return x == g })
	d.gates.Store(&gs)
}

// ioState carries one accepted request through the pipeline.
type ioState struct {
	d  *Device
	r  *device.Request // the submitter's request
	io IO
	// late is the error to report after the I/O (from ErrAfterIO), or nil.
	late error
	// corrupt is the work of the Corruptions that selected the read, in
	// installation order, or nil.
	corrupt []corruption
	// gates is the snapshot of gates the request passes, taken when it
	// reaches the first, and next the index of the next one. Touched by one
	// goroutine at a time: a request moves between goroutines only through
	// a gate's lock.
	gates []*Gate
	next  int
	// inner is the request submitted to the inner device; its Ctx is the
	// ioState.
	inner device.Request
}

// Submit starts r through the pipeline described in the package
// documentation and returns at once.
func (d *Device) Submit(r *device.Request) error {
	if err := device.Check(r, d.size, d.ioUnit); err != nil {
		return err
	}
	if !d.life.Enter() {
		return device.NewError(r, device.ErrClosed)
	}
	st := &ioState{d: d, r: r, io: IO{Op: r.Op}}
	if r.Op != device.OpFlush {
		st.io.Off, st.io.Len = r.Off, len(r.Buf)
	}
	d.stats.submit(r.Op)

	if err := d.inject(st); err != nil {
		d.stats.op[r.Op].injected.Add(1)
		var late *afterIOError
		if !errors.As(err, &late) {
			go st.finish(err)
			return nil
		}
		st.late = late.err
	}

	if b := d.latency[r.Op].Load(); b != nil {
		if delay := b.l.Delay(st.io); delay > 0 {
			time.AfterFunc(delay, st.enterGates)
			return nil
		}
	}
	st.enterGates()
	return nil
}

// inject consults the enabled injections: it returns the first error, and
// records in st the bits each Corruption that selects it will flip.
func (d *Device) inject(st *ioState) error {
	p := d.injections.Load()
	if p == nil {
		return nil
	}
	var first error
	for _, i := range *p {
		if !i.enabled.Load() {
			continue
		}
		if c, ok := i.inj.(*Corruption); ok {
			if fs := c.flips(st.io); len(fs) > 0 {
				st.corrupt = append(st.corrupt, corruption{i: i, flips: fs})
			}
			continue
		}
		if err := i.inj.MaybeError(st.io); err != nil && first == nil {
			first = err
			i.injected.Add(1)
		}
	}
	return first
}

// enterGates takes st through the gates installed now and, unless one
// holds it, on to the inner device.
func (st *ioState) enterGates() {
	st.gates = st.d.gateList()
	st.passGates()
}

// passGates takes st through the remaining gates and, unless one holds it,
// on to the inner device.
func (st *ioState) passGates() {
	for st.next < len(st.gates) {
		g := st.gates[st.next]
		st.next++
		if g.hold(st) {
			return
		}
	}
	st.inner = device.Request{Op: st.r.Op, Off: st.r.Off, Buf: st.r.Buf, Done: innerDone, Ctx: st}
	if err := st.d.inner.Submit(&st.inner); err != nil {
		// We may be inside the wrapper's Submit: complete elsewhere.
		go st.finish(err)
	}
}

func innerDone(ir *device.Request, err error) {
	ir.Ctx.(*ioState).finish(err)
}

// finish completes st with err (or its late error), corrupting a
// successful read's data if Corruptions selected it, counts it, and calls
// the submitter's Done.
func (st *ioState) finish(err error) {
	if err == nil {
		err = st.late
	}
	r := st.r
	if err == nil && st.corrupt != nil {
		st.applyCorruption()
	}
	if err != nil {
		var de *device.Error
		if !errors.As(err, &de) {
			err = device.NewError(r, err)
		}
	}
	st.d.stats.complete(r.Op, len(r.Buf), err)
	if r.Done != nil {
		r.Done(r, err)
	}
	st.d.life.Exit()
}

// Close releases every request held at a gate, waits for every submitted
// request's Done to return, and closes the inner device.
func (d *Device) Close() error {
	if !d.life.Shut() {
		return fmt.Errorf("faultdev: close: %w", device.ErrClosed)
	}
	for _, g := range d.gateList() {
		g.releaseAll()
	}
	d.life.Wait()
	return d.inner.Close()
}

// Latency decides how long each request is delayed before it reaches the
// gates and the inner device. Delay may be called from many goroutines at
// once.
type Latency interface {
	Delay(io IO) time.Duration
	String() string
}

type latencyBox struct{ l Latency }

// SetLatency makes l the latency of every request whose kind is in ops;
// nil removes it. Requests already submitted keep the delay they drew.
func (d *Device) SetLatency(ops Ops, l Latency) {
	for op := device.OpRead; op <= device.OpFlush; op++ {
		if !ops.Has(op) {
			continue
		}
		if l == nil {
			d.latency[op].Store(nil)
		} else {
			d.latency[op].Store(&latencyBox{l})
		}
	}
}

// Fixed returns a Latency of exactly delay.
func Fixed(delay time.Duration) Latency { return fixed(delay) }

type fixed time.Duration

func (f fixed) Delay(IO) time.Duration { return time.Duration(f) }
func (f fixed) String() string         { return time.Duration(f).String() }

// Uniform returns a Latency drawn uniformly from [lo, hi] by a PCG
// generator seeded with seed (in Submit order).
func Uniform(lo, hi time.Duration, seed uint64) Latency {
	if hi < lo {
		lo, hi = hi, lo
	}
	return &uniform{lo: lo, hi: hi, rng: rand.New(rand.NewPCG(seed, 0x6c6174656e6379))} // "latency"
}

type uniform struct {
	lo, hi time.Duration // Immutable.
	mu     sync.Mutex
	rng    *rand.Rand // Protected by mu.
}

func (u *uniform) Delay(IO) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lo + time.Duration(u.rng.Int64N(int64(u.hi-u.lo)+1))
}

func (u *uniform) String() string { return fmt.Sprintf("uniform [%v, %v]", u.lo, u.hi) }
