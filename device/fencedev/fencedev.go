// Package fencedev wraps a device.Device so that a host submits a data
// request only while it provably owns the volume: the software I/O fence of
// a volume whose ownership is an etcd lease (issue 18; the metadata half of
// the fence is etcdkv's owner comparison in every commit).
//
// It is what SCSI-3 persistent reservations and NVMe reservations do in the
// storage (a preempted host's commands fail with RESERVATION CONFLICT), done
// by the host itself, since an image file or a loop device has no
// reservations; where the device has them, package volume takes one as
// well (see "Persistent reservations" below). Like Linux's md and
// dm-multipath "queue_if_no_path", it holds requests while the answer is
// not known yet, and fails them once it is known to be no.
//
// # Window
//
// A Device admits requests inside its window [NotBefore, Deadline):
//
//	now < NotBefore                 held; submitted at NotBefore (a host that
//	                                took the volume over waits until every
//	                                request of the previous owner is over)
//	NotBefore <= now < Deadline     submitted at once
//	Deadline <= now < Deadline+Grace  held: a renewal (Extend) releases it
//	Deadline+Grace <= now           fails with ErrFenced (and EIO)
//	after Fence                     fails with ErrFenced (and EIO), for good
//
// Every kind of request (reads and flushes as well as writes) is fenced: a
// host that lost the volume must not read blocks the new owner may have
// given to another file. The owner of the lease calls Extend after each
// renewal it has proven (the deadline only grows in practice, but any value
// is taken), and Fence when the lease is lost for good. Held requests are
// submitted in arrival order by the goroutine that opens the window
// (Extend, or the Device's timer at NotBefore), or failed in arrival order
// on a goroutine of their own (after Fence, Close, or the grace).
//
// The check is made in Submit, immediately before the inner device's
// Submit, against Options.Now (a monotonic clock: time.Now's readings carry
// one, so a wall-clock step does not move the window).
//
// # What the fence covers, and what it does not
//
// It guarantees that no request enters the inner device's Submit after the
// host's deadline as the host's monotonic clock measures it, and that the
// requests it held are failed rather than submitted late. It cannot:
//
//   - stop a request between the check and the inner Submit: a process
//     frozen there (SIGSTOP, a VM pause, a page fault on a dying disk)
//     submits it whenever it runs again, however late;
//   - recall a request the inner device has taken: one queued in io_uring,
//     in the kernel's block layer, in a device's queue, or in the page cache
//     of a buffered image file, lands whenever the kernel gets to it.
//     Options.RequestBound is the bound the rest of the system assumes on
//     that time (a taking-over host waits TTL + margin + RequestBound before
//     its first request); the Device counts the requests that exceeded it
//     (Stats.Overdue) but cannot cancel them. io_uring linked timeouts
//     (IORING_OP_LINK_TIMEOUT) would not close this gap either: they cancel
//     a request still queued for an io-wq worker, but one that a worker
//     runs, or that was issued to the block layer, cannot be cancelled (the
//     timeout completes with -EALREADY or -ENOENT and the request runs
//     on), so directdev does not use them;
//   - protect against another host whose clock runs faster than this one's
//     by more than the lease's margin over one TTL.
//
// Hardware fencing (reservations, or the storage target revoking the old
// host's access) closes these gaps for writes; without it, the assumptions
// above are the fence's contract.
//
// # Persistent reservations
//
// Linux exposes block persistent reservations as the IOC_PR_* ioctls on a
// block device whose driver has pr_ops (SCSI disks, NVMe namespaces,
// device-mapper over them); package device/blockpr issues them, and
// package volume takes one with each ownership, beside this fence: the
// owner registers a key derived from its etcd lease and reserves Write
// Exclusive; a host taking over preempts the earlier owner's key with
// PREEMPT AND ABORT, after which the device itself refuses that host's
// writes, however late they arrive (the gaps above, for writes); a clean
// release releases and unregisters. The preemption is made at the
// acquisition and the takeover wait (NotBefore) is kept whole: it still
// covers reads, and devices whose abort is not synchronous.
//
// An image file answers ENOTTY (the ioctl goes to the file system) and a
// loop device EOPNOTSUPP (the loop driver has no pr_ops), as blockpr's
// TestReservationsUnsupported checks: on those, the data devices of this
// repository's setups, the volume is used without a reservation and this
// fence is the only one. No device on the machines sluice is tested on has
// pr_ops (no nvmet, scsi_debug or LIO target), so the reservation path is
// tested against blockprtest's model of a device, not against a device.
//
// # Concurrency
//
// Every method is safe for concurrent use. The admitting path of Submit is
// three atomic loads; holding and releasing take Device.mu, which is a
// leaf: it is never held while calling the inner device or a Done callback.
// Done never runs inside Submit, nor inside Extend, Fence or Close: the
// requests they fail complete on another goroutine.
package fencedev

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/internal/lifecycle"
)

// ErrFenced is matched (errors.Is) by the error of every request the fence
// failed, together with syscall.EIO.
var ErrFenced = errors.New("fencedev: fenced: the host does not provably own the volume")

// FenceError is the cause of a request the fence failed: why, and the
// cause Fence was given, if any. It matches ErrFenced, syscall.EIO and the
// cause under errors.Is.
type FenceError struct {
	Reason string
	Cause  error
}

func (e *FenceError) Error() string {
	if e.Cause == nil {
		return "fenced: " + e.Reason
	}
	return fmt.Sprintf("fenced: %s: %v", e.Reason, e.Cause)
}

// Unwrap returns ErrFenced, syscall.EIO and the cause.
func (e *FenceError) Unwrap() []error {
	errs := []error{ErrFenced, syscall.EIO}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// Options configures New.
type Options struct {
	// NotBefore is the start of the window: requests submitted before it
	// are held until it. The default value is the zero time: no wait.
	NotBefore time.Time
	// Deadline is the end of the window until the first Extend. The
	// default value is the zero time: every request is held (up to Grace)
	// until Extend.
	Deadline time.Time
	// Grace is how long past the deadline a request waits for a renewal
	// before it fails. An owner sets it to the time left between its
	// deadline and the instant the lease may have expired (its margin).
	// The default value is 0: fail at once.
	Grace time.Duration
	// RequestBound is the longest a request is assumed to stay in the
	// inner device; the requests that took longer are counted
	// (Stats.Overdue). The default value is 0: nothing is counted.
	RequestBound time.Duration
	// Now is the clock. The default value is time.Now. (The Device's timer,
	// which releases held requests at NotBefore and fails them at
	// Deadline+Grace, always runs on real time.)
	Now func() time.Time
}

// Stats counts what the fence did.
type Stats struct {
	// Submitted counts the requests Submit accepted.
	Submitted int64
	// Held counts the requests that waited, before NotBefore or past the
	// deadline, whatever became of them.
	Held int64
	// Fenced counts the requests the fence failed.
	Fenced int64
	// Overdue counts the requests that completed more than RequestBound
	// after they were handed to the inner device.
	Overdue int64
	// InFlight is the number of requests handed to the inner device and
	// not yet completed; HeldNow the number held now.
	InFlight, HeldNow int64
}

// Device is a fenced device.Device. See the package documentation.
type Device struct {
	inner  device.Device // Immutable.
	size   int64         // Immutable.
	ioUnit int           // Immutable.
	grace  int64         // Immutable: Options.Grace in nanoseconds.
	bound  int64         // Immutable: Options.RequestBound in nanoseconds.
	now    func() time.Time
	base   time.Time // Immutable: the instant the clock readings are taken relative to.

	// notBefore and deadline are the window, in nanoseconds since base.
	// Written under mu, read without it.
	notBefore, deadline atomic.Int64
	// fenced is set once, under mu, by Fence.
	fenced atomic.Bool

	life lifecycle.Tracker

	mu struct {
		sync.Mutex
		// held are the requests waiting, oldest first.
		held []*device.Request
		// timer re-evaluates the window at the next instant it changes
		// for the held requests; nil when none is armed.
		timer *time.Timer
		// cause is Fence's cause, once fenced.
		cause  error
		closed bool
	}

	submitted, held, fencedN, overdue, inflight atomic.Int64
}

var _ device.Device = (*Device)(nil)

// New wraps inner. The wrapper owns inner: its Close closes inner.
func New(inner device.Device, o Options) *Device {
	d := &Device{inner: inner, size: inner.Size(), ioUnit: inner.IOUnit(),
		grace: int64(o.Grace), bound: int64(o.RequestBound), now: o.Now}
	if d.now == nil {
		d.now = time.Now
	}
	d.base = d.now()
	d.notBefore.Store(d.rel(o.NotBefore))
	d.deadline.Store(d.rel(o.Deadline))
	return d
}

// rel returns t in nanoseconds since base; the zero time is the smallest.
func (d *Device) rel(t time.Time) int64 {
	if t.IsZero() {
		return -1 << 62
	}
	return int64(t.Sub(d.base))
}

// Inner returns the wrapped device. I/O submitted to it directly is not
// fenced.
func (d *Device) Inner() device.Device { return d.inner }

// Size returns the inner device's size.
func (d *Device) Size() int64 { return d.size }

// IOUnit returns the inner device's I/O unit.
func (d *Device) IOUnit() int { return d.ioUnit }

// Deadline returns the end of the window.
func (d *Device) Deadline() time.Time { return d.base.Add(time.Duration(d.deadline.Load())) }

// NotBefore returns the start of the window.
func (d *Device) NotBefore() time.Time { return d.base.Add(time.Duration(d.notBefore.Load())) }

// Stats returns the counters, each read atomically.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	heldNow := int64(len(d.mu.held))
	d.mu.Unlock()
	return Stats{Submitted: d.submitted.Load(), Held: d.held.Load(), Fenced: d.fencedN.Load(),
		Overdue: d.overdue.Load(), InFlight: d.inflight.Load(), HeldNow: heldNow}
}

// Submit admits r if the window is open now, holds it while it may open,
// and fails it (through Done) once it cannot.
func (d *Device) Submit(r *device.Request) error {
	if err := device.Check(r, d.size, d.ioUnit); err != nil {
		return err
	}
	if !d.life.Enter() {
		return device.NewError(r, device.ErrClosed)
	}
	d.submitted.Add(1)
	t := d.now()
	now := d.rel(t)
	if !d.fenced.Load() && now >= d.notBefore.Load() && now < d.deadline.Load() {
		d.pass(r, t)
		return nil
	}
	d.mu.Lock()
	t = d.now()
	switch open, err := d.verdictLocked(d.rel(t)); {
	case err != nil:
		d.mu.Unlock()
		go d.fail(r, err)
	case open:
		d.mu.Unlock()
		d.pass(r, t)
	default:
		d.held.Add(1)
		d.mu.held = append(d.mu.held, r)
		d.armLocked()
		d.mu.Unlock()
	}
	return nil
}

// verdictLocked says what becomes of a request at now: pass it (open),
// fail it (err), or hold it (neither).
//
// Preconditions: d.mu is held.
func (d *Device) verdictLocked(now int64) (open bool, err error) {
	switch nb, dl := d.notBefore.Load(), d.deadline.Load(); {
	case d.mu.closed:
		return false, device.ErrClosed
	case d.fenced.Load():
		return false, &FenceError{Reason: "the lease is lost", Cause: d.mu.cause}
	case now < nb:
		return false, nil
	case now < dl:
		return true, nil
	case now-dl >= d.grace:
		return false, &FenceError{Reason: fmt.Sprintf("the lease was not renewed in time (deadline passed %v ago)",
			time.Duration(now-dl).Round(time.Millisecond))}
	}
	return false, nil
}

// armLocked arms the timer for the next instant the held requests' fate
// changes: NotBefore, or the deadline's grace running out.
//
// Preconditions: d.mu is held and requests are held.
func (d *Device) armLocked() {
	now := d.rel(d.now())
	at := d.notBefore.Load()
	if now >= at {
		at = d.deadline.Load() + d.grace
	}
	wait := max(time.Duration(at-now), 0)
	if d.mu.timer == nil {
		d.mu.timer = time.AfterFunc(wait, d.evaluate)
	} else {
		d.mu.timer.Reset(wait)
	}
}

// evaluate passes or fails the held requests as the window says now, or
// re-arms the timer.
func (d *Device) evaluate() {
	d.mu.Lock()
	if len(d.mu.held) == 0 {
		d.mu.Unlock()
		return
	}
	open, err := d.verdictLocked(d.rel(d.now()))
	if err == nil && !open {
		d.armLocked()
		d.mu.Unlock()
		return
	}
	held := d.mu.held
	d.mu.held = nil
	d.mu.Unlock()
	if err != nil {
		// On another goroutine: the caller (an owner's watcher, say) may
		// hold locks that the Done callbacks lead to.
		go func() {
			for _, r := range held {
				d.fail(r, err)
			}
		}()
		return
	}
	t := d.now()
	for _, r := range held {
		d.pass(r, t)
	}
}

// Extend makes deadline the end of the window (after a renewal of the
// lease) and submits the held requests if the window is open now.
func (d *Device) Extend(deadline time.Time) {
	d.mu.Lock()
	d.deadline.Store(d.rel(deadline))
	d.mu.Unlock()
	d.evaluate()
}

// Fence closes the window for good (the lease is lost: cause says how):
// the held requests and every later one fail with ErrFenced. Requests
// already handed to the inner device complete as it completes them. Only
// the first call's cause is kept.
func (d *Device) Fence(cause error) {
	d.mu.Lock()
	if !d.fenced.Load() {
		d.mu.cause = cause
		d.fenced.Store(true)
	}
	d.mu.Unlock()
	d.evaluate()
}

// Fenced reports whether Fence has been called.
func (d *Device) Fenced() bool { return d.fenced.Load() }

// state carries one admitted request through the inner device.
type state struct {
	d     *Device
	r     *device.Request
	start time.Time
	inner device.Request
}

var statePool = sync.Pool{New: func() any { return new(state) }}

// pass hands r, admitted at now, to the inner device.
func (d *Device) pass(r *device.Request, now time.Time) {
	st := statePool.Get().(*state)
	st.d, st.r, st.start = d, r, now
	st.inner = device.Request{Op: r.Op, Off: r.Off, Buf: r.Buf, Done: innerDone, Ctx: st}
	d.inflight.Add(1)
	if err := d.inner.Submit(&st.inner); err != nil {
		// Possibly inside the wrapper's Submit: complete elsewhere.
		go st.finish(err)
	}
}

func innerDone(ir *device.Request, err error) { ir.Ctx.(*state).finish(err) }

// finish completes an admitted request.
func (st *state) finish(err error) {
	d, r := st.d, st.r
	if d.bound > 0 && d.now().Sub(st.start) > time.Duration(d.bound) {
		d.overdue.Add(1)
	}
	d.inflight.Add(-1)
	*st = state{}
	statePool.Put(st)
	d.complete(r, err)
}

// fail completes r with err without submitting it.
func (d *Device) fail(r *device.Request, err error) {
	if errors.Is(err, ErrFenced) {
		d.fencedN.Add(1)
	}
	d.complete(r, err)
}

func (d *Device) complete(r *device.Request, err error) {
	if err != nil {
		var de *device.Error
		if !errors.As(err, &de) {
			err = device.NewError(r, err)
		}
	}
	if r.Done != nil {
		r.Done(r, err)
	}
	d.life.Exit()
}

// Close fails the held requests with device.ErrClosed, waits for every
// admitted request's Done to return, and closes the inner device.
func (d *Device) Close() error {
	if !d.life.Shut() {
		return fmt.Errorf("fencedev: close: %w", device.ErrClosed)
	}
	d.mu.Lock()
	d.mu.closed = true
	if d.mu.timer != nil {
		d.mu.timer.Stop()
	}
	d.mu.Unlock()
	d.evaluate()
	d.life.Wait()
	return d.inner.Close()
}
