package directdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/uring"
)

// uringBackend spreads requests over its rings. See the package
// documentation for the design.
type uringBackend struct {
	// Immutable after newUringBackend.
	rings []*ringOwner

	// next picks the ring for the next request when there are several.
	next atomic.Uint32
}

func newUringBackend(d *Device) (*uringBackend, error) {
	b := &uringBackend{}
	for range d.opts.Rings {
		o, err := startRingOwner(d)
		if err != nil {
			b.close()
			return nil, err
		}
		b.rings = append(b.rings, o)
	}
	return b, nil
}

func (b *uringBackend) submit(r *device.Request) {
	o := b.rings[0]
	if len(b.rings) > 1 {
		o = b.rings[b.next.Add(1)%uint32(len(b.rings))]
	}
	tok := true
	select {
	case o.sem <- struct{}{}:
	default:
		// The ring is full. Wait for a free token, unless this is a Done
		// callback run by an owner: that owner would wait for itself (or
		// for another owner waiting for it).
		if inDoneCallback() {
			tok = false
		} else {
			o.nBlocked.Add(1)
			o.sem <- struct{}{}
		}
	}
	o.mu.Lock()
	o.mu.queue = append(o.mu.queue, item{r: r, tok: tok})
	o.queued.Add(1)
	o.mu.Unlock()
	o.wake()
}

// owners lists the running ring owners of every Device, for
// inDoneCallback.
var owners struct {
	sync.Mutex
	list []*ringOwner
}

// inDoneCallback reports whether the caller is a ring owner, of any Device,
// calling Done callbacks. An owner locks itself to its OS thread and
// publishes the thread's id in dispatchTid while it calls them, and no other
// goroutine runs on a locked thread, so the thread id identifies the owner.
// Checking every device's owners keeps a Done callback that submits to
// another full device from waiting for an owner that waits for it.
func inDoneCallback() bool {
	tid := int32(unix.Gettid())
	owners.Lock()
	defer owners.Unlock()
	for _, o := range owners.list {
		if o.dispatchTid.Load() == tid {
			return true
		}
	}
	return false
}

func (b *uringBackend) close() error {
	var first error
	for _, o := range b.rings {
		if err := o.stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *uringBackend) stats(s *Stats) {
	for _, o := range b.rings {
		s.Requests += o.nRequests.Load()
		s.SQEs += o.nSQEs.Load()
		s.Enters += o.nEnters.Load()
		s.Batches += o.nBatches.Load()
		s.Wakeups += o.nWakeups.Load()
		s.Blocked += o.nBlocked.Load()
		s.ShortIOs += o.nShort.Load()
		s.DepthNanos += o.nDepthNanos.Load()
	}
}

// Owner states, for ringOwner.state.
const (
	// running: the owner will look at its queue before it sleeps.
	running int32 = iota
	// sleepKernel: the owner waits in io_uring_enter; wake it through the
	// eventfd.
	sleepKernel
	// sleepIdle: the owner has nothing in flight and waits on its idle
	// channel.
	sleepIdle
)

// wakeUserData marks the CQE of the owner's eventfd read.
const wakeUserData = math.MaxUint64

// eventfdOne is the 8-byte native-endian 1 written to wake an owner.
var eventfdOne = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// item is a queued request. tok says whether it holds a semaphore token.
type item struct {
	r   *device.Request
	tok bool
}

// slot is a request in flight. done counts the bytes already transferred by
// earlier (short) completions.
type slot struct {
	r       *device.Request
	done    int
	retries int
	tok     bool
}

// ringOwner is one ring and the goroutine that drives it.
//
// The owner goroutine's loop, analogous to a driver's submit/complete loop:
//
//	reap:  copy CQEs out, finish or resubmit their requests, call Done
//	take:  swap the submitters' queue for an empty slice
//	fill:  resubmissions first, then queued requests while slots are free
//	enter: io_uring_enter(submit, wait for 1 unless more work is queued)
type ringOwner struct {
	// Immutable after startRingOwner.
	d          *Device
	fsyncFlags uint32
	efd        int
	// sem has one token per slot; Submit takes one, completion returns
	// it.
	sem  chan struct{}
	idle chan struct{}
	// exited receives the loop's result when the owner has torn down.
	exited chan error

	mu struct {
		sync.Mutex
		// queue holds submitted requests not yet taken by the owner.
		queue []item
	}
	// queued is len(mu.queue), readable without the lock. Incremented
	// under mu by submitters, reset under mu by the owner.
	queued atomic.Int32
	// closing is set once by stop.
	closing atomic.Bool
	// dispatchTid is the id of the OS thread the owner is locked to while
	// it calls Done callbacks, and 0 otherwise.
	dispatchTid atomic.Int32
	// state is running, sleepKernel or sleepIdle. The owner stores it;
	// a submitter that sees a sleep state and wins the CAS back to running
	// wakes the owner. The owner stores a sleep state and then re-reads
	// queued and closing, and a submitter increments queued and then reads
	// state (both sequentially consistent), so one of them always sees the
	// other.
	state atomic.Int32

	// Owned by the owner goroutine.
	ring        *uring.Ring
	slots       []slot
	free        []uint32
	inflight    int
	pending     []item
	pendingHead int
	retry       []uint32
	cqes        []uring.CQE
	wakeArmed   bool
	// wakeBuf receives the eventfd counter; the kernel writes it while the
	// wake read is in flight.
	wakeBuf *[8]byte

	// Counters for Stats.
	nRequests, nSQEs, nEnters, nBatches, nWakeups, nBlocked, nShort, nDepthNanos atomic.Uint64
}

func startRingOwner(d *Device) (*ringOwner, error) {
	o := &ringOwner{
		d:       d,
		idle:    make(chan struct{}, 1),
		exited:  make(chan error, 1),
		wakeBuf: new([8]byte),
	}
	if !d.blockDev {
		o.fsyncFlags = uring.FsyncDatasync
	}
	ready := make(chan error)
	go o.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return o, nil
}

// setupFlags are tried in order until the kernel accepts one.
//
// The owner is not locked to an OS thread (see loop), so the rings do not use
// IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN, which need one
// thread to do every submission; nor IORING_SETUP_COOP_TASKRUN, which lets
// completion work wait until the submitting thread next enters the kernel,
// and that thread may meanwhile be running unrelated goroutines.
var setupFlags = []uint32{uring.SetupSubmitAll, 0}

func (o *ringOwner) run(ready chan<- error) {
	if err := o.setup(); err != nil {
		ready <- err
		return
	}
	owners.Lock()
	owners.list = append(owners.list, o)
	owners.Unlock()
	ready <- nil
	o.loop()
	owners.Lock()
	owners.list = slices.DeleteFunc(owners.list, func(x *ringOwner) bool { return x == o })
	owners.Unlock()
	o.exited <- o.teardown()
}

func (o *ringOwner) setup() error {
	if testHookUringSetup != nil {
		if err := testHookUringSetup(); err != nil {
			return fmt.Errorf("io_uring: %w", err)
		}
	}
	var ring *uring.Ring
	var err error
	for _, flags := range setupFlags {
		ring, err = uring.New(uint32(o.d.opts.RingEntries), &uring.Params{Flags: flags})
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	if err != nil {
		return err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ring.Close()
		return fmt.Errorf("eventfd: %w", err)
	}
	o.ring, o.efd = ring, efd
	// One CQ entry stays free for the wake read.
	n := int(ring.CQEntries()) - 1
	o.slots = make([]slot, n)
	o.free = make([]uint32, n)
	for i := range o.free {
		o.free[i] = uint32(n - 1 - i)
	}
	o.sem = make(chan struct{}, n)
	o.cqes = make([]uring.CQE, ring.CQEntries())
	return nil
}

// loop runs until stop was called and every request has completed.
//
// After calling Done callbacks the owner yields its P (runtime.Gosched): the
// callbacks typically woke goroutines blocked in ReadAt or WriteAt, which the
// scheduler queued on the owner's P, and they should run (and submit their
// next requests, which the owner then batches) before the owner blocks in
// io_uring_enter, a system call during which the P stays with the owner
// until another P steals them or the runtime's monitor retakes the P, tens
// of microseconds to milliseconds later. An owner locked to its thread (the
// precondition for SINGLE_ISSUER|DEFER_TASKRUN) cannot yield cheaply: its P
// must be handed to another thread and back. On a 2-CPU VM with 4 KiB random
// reads from 32 goroutines, against a locked owner waiting with
// DEFER_TASKRUN, this owner spent about 12 us of CPU per read instead of
// 14-25 at queue depth 1, and took 3 us instead of 10-70 from Done to the
// next Submit; at depth 32 it kept a few percent more of the queue depth in
// the kernel. When the callbacks submitted as many requests as completed
// (Submit from Done, as fio-style loops do), nothing was woken and the owner
// does not yield.
func (o *ringOwner) loop() {
	// The queue depth is integrated over time for Stats: a request counts
	// from fill until reaped. tick charges the time since the last tick at
	// the current depth, so it runs before each change of o.inflight.
	last := time.Now()
	tick := func() {
		now := time.Now()
		o.nDepthNanos.Add(uint64(o.inflight) * uint64(now.Sub(last)))
		last = now
	}
	for {
		tick()
		if n := o.reap(); n > 0 && int(o.queued.Load()) < n {
			// Some callbacks did not submit again themselves: they
			// probably woke goroutines that will.
			runtime.Gosched()
		}
		tick()
		o.take()
		o.fill()
		if o.inflight == 0 && o.pendingHead == len(o.pending) {
			if o.closing.Load() && o.queued.Load() == 0 {
				return
			}
			o.sleepIdle()
			continue
		}
		var wait uint32
		switch {
		case len(o.retry) > 0 || (o.pendingHead < len(o.pending) && len(o.free) > 0):
			// The SQ filled up: submit, and come back for more.
		case o.pendingHead < len(o.pending):
			// Every slot is busy: wait for a completion. New requests
			// just queue, so no wake-up is needed.
			wait = 1
		default:
			// Sleep until a completion or a wake-up. (A closing
			// owner need not stay awake: requests are in flight, so
			// it will look at closing again.)
			o.state.Store(sleepKernel)
			if o.queued.Load() == 0 && o.armWake() {
				wait = 1
			}
		}
		n, err := o.ring.SubmitAndWait(wait)
		o.state.Store(running)
		o.nEnters.Add(1)
		if n > 0 {
			o.nBatches.Add(1)
		}
		if err != nil {
			o.enterFailed(err)
		}
	}
}

// enterFailed handles an io_uring_enter error. Resource shortages are
// transient: completions free resources, so the owner backs off and
// retries. Anything else means the ring is unusable, an invariant
// violation for which there is no way to complete the requests in it.
func (o *ringOwner) enterFailed(err error) {
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOMEM):
		time.Sleep(50 * time.Microsecond)
	default:
		panic(fmt.Sprintf("directdev: %s: %v", o.d.path, err))
	}
}

func (o *ringOwner) sleepIdle() {
	o.state.Store(sleepIdle)
	if o.queued.Load() == 0 && !o.closing.Load() {
		<-o.idle
	}
	o.state.Store(running)
}

// wake makes a sleeping owner look at its queue. Called by submitters and
// stop.
func (o *ringOwner) wake() {
	switch o.state.Load() {
	case sleepKernel:
		if o.state.CompareAndSwap(sleepKernel, running) {
			o.nWakeups.Add(1)
			for {
				if _, err := unix.Write(o.efd, eventfdOne[:]); err != unix.EINTR {
					break
				}
			}
		}
	case sleepIdle:
		if o.state.CompareAndSwap(sleepIdle, running) {
			select {
			case o.idle <- struct{}{}:
			default:
			}
		}
	}
}

// armWake makes sure the eventfd read is in flight; false if the SQ is full.
func (o *ringOwner) armWake() bool {
	if o.wakeArmed {
		return true
	}
	sqe := o.ring.GetSQE()
	if sqe == nil {
		return false
	}
	sqe.PrepRead(o.efd, o.wakeBuf[:], 0)
	sqe.UserData = wakeUserData
	o.wakeArmed = true
	return true
}

// take moves the submitters' queue to pending.
func (o *ringOwner) take() {
	if o.queued.Load() == 0 {
		return
	}
	o.mu.Lock()
	q := o.mu.queue
	if o.pendingHead == len(o.pending) {
		// Common case: swap the slices, no copy.
		o.mu.queue = o.pending[:0]
		o.pending, o.pendingHead = q, 0
	} else {
		o.pending = append(o.pending, q...)
		clear(q)
		o.mu.queue = q[:0]
	}
	o.queued.Store(0)
	o.mu.Unlock()
}

// fill turns resubmissions and pending requests into SQEs while there are
// free SQEs and slots.
func (o *ringOwner) fill() {
	for len(o.retry) > 0 {
		sqe := o.ring.GetSQE()
		if sqe == nil {
			return
		}
		i := o.retry[len(o.retry)-1]
		o.retry = o.retry[:len(o.retry)-1]
		o.prep(sqe, i)
	}
	for o.pendingHead < len(o.pending) && len(o.free) > 0 {
		sqe := o.ring.GetSQE()
		if sqe == nil {
			break
		}
		it := &o.pending[o.pendingHead]
		i := o.free[len(o.free)-1]
		o.free = o.free[:len(o.free)-1]
		o.slots[i] = slot{r: it.r, tok: it.tok}
		*it = item{}
		o.pendingHead++
		o.inflight++
		o.prep(sqe, i)
	}
	if o.pendingHead == len(o.pending) {
		o.pending, o.pendingHead = o.pending[:0], 0
	}
}

// prep fills sqe for what is left of slot i's request.
func (o *ringOwner) prep(sqe *uring.SQE, i uint32) {
	s := &o.slots[i]
	r := s.r
	switch r.Op {
	case device.OpRead:
		sqe.PrepRead(o.d.fd, r.Buf[s.done:], uint64(r.Off)+uint64(s.done))
	case device.OpWrite:
		sqe.PrepWrite(o.d.fd, r.Buf[s.done:], uint64(r.Off)+uint64(s.done))
	case device.OpFlush:
		sqe.PrepFsync(o.d.fd, o.fsyncFlags)
	}
	sqe.UserData = uint64(i)
	o.nSQEs.Add(1)
}

// reap handles every ready CQE and returns the number of Done callbacks it
// called.
func (o *ringOwner) reap() int {
	done := 0
	for {
		n := o.ring.PeekBatch(o.cqes)
		if n > 0 && o.dispatchTid.Load() == 0 {
			// Identify this goroutine to inDoneCallback while
			// completions may call Done.
			runtime.LockOSThread()
			o.dispatchTid.Store(int32(unix.Gettid()))
		}
		for i := range n {
			if o.complete(o.cqes[i]) {
				done++
			}
		}
		if n < len(o.cqes) {
			break
		}
	}
	if o.dispatchTid.Load() != 0 {
		o.dispatchTid.Store(0)
		runtime.UnlockOSThread()
	}
	return done
}

// complete handles one CQE: it resubmits the rest of a short transfer, or
// finishes the request, calls Done and returns true.
func (o *ringOwner) complete(c uring.CQE) bool {
	if c.UserData == wakeUserData {
		o.wakeArmed = false
		return false
	}
	i := uint32(c.UserData)
	s := &o.slots[i]
	r := s.r
	done, more, err := resultOf(r, s.done, c.Res)
	s.done = done
	if more && (err == nil || s.retries < maxRetries) {
		if err == nil {
			o.nShort.Add(1)
		} else {
			s.retries++
		}
		o.retry = append(o.retry, i)
		return false
	}
	tok := s.tok
	*s = slot{}
	o.free = append(o.free, i)
	o.inflight--
	if tok {
		<-o.sem
	}
	o.nRequests.Add(1)
	r.Done(r, err)
	return true
}

// stop asks the owner to finish the requests it has and exit, and waits.
func (o *ringOwner) stop() error {
	o.closing.Store(true)
	o.wake()
	return <-o.exited
}

// teardown cancels the wake read by completing it, then closes the ring and
// the eventfd, on the owner thread.
func (o *ringOwner) teardown() error {
	if o.wakeArmed {
		if _, err := unix.Write(o.efd, eventfdOne[:]); err != nil {
			return fmt.Errorf("eventfd write: %w", err)
		}
		for o.wakeArmed {
			if _, err := o.ring.SubmitAndWait(1); err != nil {
				return err
			}
			o.reap()
		}
	}
	err := o.ring.Close()
	if cerr := unix.Close(o.efd); err == nil && cerr != nil {
		err = fmt.Errorf("close eventfd: %w", cerr)
	}
	return err
}
