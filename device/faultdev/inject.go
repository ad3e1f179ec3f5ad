package faultdev

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/device"
)

// IO describes one request to the predicates, injectors and latencies.
type IO struct {
	Op device.Op
	// Off and Len are the request's range in bytes; both are 0 for a
	// flush.
	Off int64
	Len int
}

// String returns e.g. "write [4096, +512)" or "flush".
func (io IO) String() string {
	if io.Op == device.OpFlush {
		return "flush"
	}
	return fmt.Sprintf("%s [%d, +%d)", io.Op, io.Off, io.Len)
}

// Predicate selects I/Os: which ones an injector fails or a gate holds.
//
// Evaluate may be called from many goroutines at once. A stateful predicate
// (Nth, FromNth, Random) changes state on each call, so where it sits in a
// composition matters: And and Or evaluate left to right and stop at the
// first operand that decides the result, so in And(Writes, Nth(3, AnyOp))
// the Nth counts only writes.
type Predicate interface {
	Evaluate(io IO) bool
	String() string
}

// Ops is a set of request kinds, and the predicate matching them.
type Ops uint8

const (
	// Reads matches reads.
	Reads Ops = 1 << device.OpRead
	// Writes matches writes.
	Writes Ops = 1 << device.OpWrite
	// Flushes matches flushes.
	Flushes Ops = 1 << device.OpFlush
	// AnyOp matches every request.
	AnyOp = Reads | Writes | Flushes
)

// Has reports whether op is in s.
func (s Ops) Has(op device.Op) bool { return op <= device.OpFlush && s&(1<<op) != 0 }

// Evaluate reports whether io's kind is in s.
func (s Ops) Evaluate(io IO) bool { return s.Has(io.Op) }

// String returns e.g. "reads|writes", "any" or "none".
func (s Ops) String() string {
	if s&AnyOp == AnyOp {
		return "any"
	}
	var parts []string
	for op, name := range []string{"reads", "writes", "flushes"} {
		if s.Has(device.Op(op)) {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Range matches reads and writes that touch at least one byte of
// [Off, Off+Len). It never matches a flush.
type Range struct {
	Off, Len int64
}

// Evaluate reports whether io overlaps r.
func (r Range) Evaluate(io IO) bool {
	return io.Op != device.OpFlush && io.Off < r.Off+r.Len && r.Off < io.Off+int64(io.Len)
}

// String returns e.g. "[0, +4096)".
func (r Range) String() string { return fmt.Sprintf("[%d, +%d)", r.Off, r.Len) }

// Nth returns a predicate that matches only the nth (from 1) I/O that p
// matches.
func Nth(n int64, p Predicate) Predicate { return &nth{n: n, p: p} }

// FromNth returns a predicate that matches the nth (from 1) I/O that p
// matches and every one after it: a device that dies.
func FromNth(n int64, p Predicate) Predicate { return &nth{n: n, p: p, from: true} }

type nth struct {
	n    int64 // Immutable.
	p    Predicate
	from bool
	seen atomic.Int64
}

func (x *nth) Evaluate(io IO) bool {
	if !x.p.Evaluate(io) {
		return false
	}
	c := x.seen.Add(1)
	return c == x.n || (x.from && c > x.n)
}

func (x *nth) String() string {
	if x.from {
		return fmt.Sprintf("from the %s on %s", ordinal(x.n), x.p)
	}
	return fmt.Sprintf("the %s %s", ordinal(x.n), x.p)
}

func ordinal(n int64) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// Random returns a predicate that matches each I/O it evaluates with
// probability prob, drawing from a PCG generator seeded with seed. The
// sequence of results is fixed by the seed; which I/O gets which result
// depends on the order in which they are evaluated, which is Submit order.
func Random(prob float64, seed uint64) Predicate {
	return &random{prob: prob, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6661756c74646576))} // "faultdev"
}

type random struct {
	prob float64 // Immutable.
	seed uint64  // Immutable.
	mu   sync.Mutex
	rng  *rand.Rand // Protected by mu.
}

func (x *random) Evaluate(IO) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rng.Float64() < x.prob
}

func (x *random) String() string { return fmt.Sprintf("p=%g (seed %d)", x.prob, x.seed) }

// And returns a predicate that matches when every one of ps matches,
// evaluated left to right up to the first that does not. And() matches
// everything.
func And(ps ...Predicate) Predicate { return and(ps) }

type and []Predicate

func (x and) Evaluate(io IO) bool {
	for _, p := range x {
		if !p.Evaluate(io) {
			return false
		}
	}
	return true
}

func (x and) String() string { return join(x, " and ") }

// Or returns a predicate that matches when one of ps matches, evaluated left
// to right up to the first that does. Or() matches nothing.
func Or(ps ...Predicate) Predicate { return or(ps) }

type or []Predicate

func (x or) Evaluate(io IO) bool {
	for _, p := range x {
		if p.Evaluate(io) {
			return true
		}
	}
	return false
}

func (x or) String() string { return join(x, " or ") }

func join(ps []Predicate, sep string) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return "(" + strings.Join(s, sep) + ")"
}

// Not returns a predicate that matches when p does not.
func Not(p Predicate) Predicate { return not{p} }

type not struct{ p Predicate }

func (x not) Evaluate(io IO) bool { return !x.p.Evaluate(io) }
func (x not) String() string      { return "not " + x.p.String() }

// PredicateFunc adapts a function to a Predicate. It must be safe for
// concurrent use.
type PredicateFunc func(io IO) bool

// Evaluate returns f(io).
func (f PredicateFunc) Evaluate(io IO) bool { return f(io) }

// String returns "func".
func (f PredicateFunc) String() string { return "func" }

// Injector decides which requests fail. The device consults every enabled
// injector, in the order they were installed, once for each request it
// accepts, on the submitting goroutine inside Submit; the first non-nil
// error wins. MaybeError may be called from many goroutines at once.
//
// A plain error fails the request before it reaches the inner device: a
// failed write changes nothing, a failed read fills nothing. An error made
// by ErrAfterIO lets the request run on the inner device and then fails it.
// Either way the submitter gets the error wrapped in a *device.Error (unless
// it is one already).
//
// *Corruption is the one Injector the device treats differently: it never
// fails a request but corrupts the data of reads (see Corruption).
type Injector interface {
	MaybeError(io IO) error
	String() string
}

// ErrAfterIO marks err, returned by an Injector, as to be reported after the
// request has run on the inner device rather than instead of running it: a
// write that reaches the media (or a flush that makes things durable) yet
// reports failure. If the inner device fails the request too, its error is
// reported instead.
func ErrAfterIO(err error) error { return &afterIOError{err} }

type afterIOError struct{ err error }

func (e *afterIOError) Error() string { return e.err.Error() + " (after the I/O)" }
func (e *afterIOError) Unwrap() error { return e.err }

// Fault is the standard Injector: it fails the I/Os When matches with Err.
// Its fields must not change once it is installed.
type Fault struct {
	// When selects the I/Os to fail. The default value (nil) matches every
	// I/O.
	When Predicate
	// Err is the error the failed requests report. The default value
	// (nil) means syscall.EIO.
	Err error
	// AfterIO makes the failed requests run on the inner device first (see
	// ErrAfterIO). The default value is false: they never reach it.
	AfterIO bool
}

// MaybeError returns Err (or EIO) if When matches io, and nil otherwise.
func (f *Fault) MaybeError(io IO) error {
	if f.When != nil && !f.When.Evaluate(io) {
		return nil
	}
	err := f.Err
	if err == nil {
		err = syscall.EIO
	}
	if f.AfterIO {
		return ErrAfterIO(err)
	}
	return err
}

// String returns e.g. "input/output error on (writes and [0, +4096))".
func (f *Fault) String() string {
	err := error(syscall.EIO)
	if f.Err != nil {
		err = f.Err
	}
	when := "every I/O"
	if f.When != nil {
		when = f.When.String()
	}
	s := err.Error() + " on " + when
	if f.AfterIO {
		s += ", after the I/O"
	}
	return s
}

// OnNth fails the nth (from 1) request whose kind is in ops, with EIO.
func OnNth(ops Ops, n int64) *Fault { return &Fault{When: Nth(n, ops)} }

// OnRange fails, with EIO, every read or write whose kind is in ops and
// that touches a byte of [off, off+n).
func OnRange(ops Ops, off, n int64) *Fault {
	return &Fault{When: And(ops, Range{Off: off, Len: n})}
}

// OnOps fails every request whose kind is in ops, with EIO.
func OnOps(ops Ops) *Fault { return &Fault{When: ops} }

// Randomly fails each request whose kind is in ops with probability prob,
// with EIO, drawing from a generator seeded with seed (see Random).
func Randomly(ops Ops, prob float64, seed uint64) *Fault {
	return &Fault{When: And(ops, Random(prob, seed))}
}

// Injection is an Injector installed on a Device: the handle that turns it
// off and on, or removes it, at run time.
type Injection struct {
	d       *Device  // Immutable.
	inj     Injector // Immutable.
	enabled atomic.Bool
	// injected counts the requests this injection failed (its error won),
	// or for a Corruption, the reads it corrupted.
	injected atomic.Int64
}

// Injector returns the installed injector.
func (i *Injection) Injector() Injector { return i.inj }

// Enable makes the device consult the injector again.
func (i *Injection) Enable() { i.enabled.Store(true) }

// Disable makes the device stop consulting the injector (a stateful
// predicate inside it sees nothing while disabled) until Enable. Requests
// already failed stay failed; reads a Corruption has already selected are
// still corrupted when they complete.
func (i *Injection) Disable() { i.enabled.Store(false) }

// Enabled reports whether the injection is enabled.
func (i *Injection) Enabled() bool { return i.enabled.Load() }

// Injected returns the number of requests this injection has failed, or,
// for a Corruption, the number of reads it has corrupted.
func (i *Injection) Injected() int64 { return i.injected.Load() }

// Remove uninstalls the injection. It is idempotent.
func (i *Injection) Remove() {
	i.Disable()
	i.d.removeInjection(i)
}

// String describes the injector and its state.
func (i *Injection) String() string {
	state := "enabled"
	if !i.Enabled() {
		state = "disabled"
	}
	verb := "injected"
	if _, ok := i.inj.(*Corruption); ok {
		verb = "corrupted"
	}
	return fmt.Sprintf("%s (%s, %d %s)", i.inj, state, i.Injected(), verb)
}
