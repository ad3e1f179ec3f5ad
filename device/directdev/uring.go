package directdev

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/sys/uring"
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
	o.sq.Lock()
	tok := o.takeTokenLocked()
	if !tok {
		// The ring is full. Wait for a free token, unless this is a Done
		// callback run by an owner: that owner would wait for itself (or
		// for another owner waiting for it). inDoneCallback takes the
		// owners' mutex, a leaf like sq: not under sq.
		o.sq.Unlock()
		inDone := inDoneCallback()
		o.sq.Lock()
		if !inDone {
			o.nBlocked.Add(1)
			o.waitTokenLocked()
			tok = true
		}
	}
	// FIFO: a request queued behind others waits its turn.
	direct := o.pendingHead == len(o.pending) && o.startLocked(r, tok)
	if !direct {
		o.pending = append(o.pending, item{r: r, tok: tok})
	}
	// SQEs published and not yet submitted (this one among them), of
	// which ownerLeft are in the batch the owner's io_uring_enter is
	// submitting (or about to), and requests the kernel has taken and not
	// completed (or whose completions the owner has not reaped yet).
	unsubmitted := int(o.ring.SQPending())
	ownerLeft := max(0, unsubmitted-int(o.ring.SQTail()-o.ownerTail))
	inKernel := o.inflight - unsubmitted
	o.sq.Unlock()
	o.accepted.Add(1)
	switch o.state.Load() {
	case sleepKernel:
		switch {
		case !direct:
			// A request left pending needs a free slot or SQ entry,
			// which only a completion brings, and the owner wakes for
			// those.
		case inKernel >= deferSubmitDepth && (ownerLeft > 0 || unsubmitted < deferSubmitBatch):
			// Enough is in flight that a completion, which wakes the
			// owner, comes soon: its next io_uring_enter submits the
			// SQE with the others published meanwhile (or the
			// submitter that makes a batch does, unless the owner is
			// still submitting its own: that io_uring_enter holds the
			// ring's lock, which this one would spin on).
			o.nDeferred.Add(1)
		default:
			// The owner waits in the kernel for completions: hand the
			// SQE to the kernel here rather than wake it.
			o.enterSubmit()
		}
	case sleepIdle:
		if o.state.CompareAndSwap(sleepIdle, running) {
			o.nWakeups.Add(1)
			select {
			case o.idle <- struct{}{}:
			default:
			}
		}
	}
}

// A submitter that finds the owner asleep in the kernel leaves its SQE
// published for the owner's next io_uring_enter, rather than enter the
// kernel itself, while at least deferSubmitDepth requests are in the
// kernel and fewer than deferSubmitBatch SQEs (its own included) wait to be
// submitted; the submitter that completes a batch submits it, unless the
// owner's io_uring_enter is still submitting the owner's own batch (it
// holds the ring's lock, on which the submitter's would spin).
//
// Deferring is always safe: the owner sleeps in the kernel only with
// requests in flight, all of them submitted, so a completion will wake it,
// and it then submits everything published before it sleeps again. It
// costs a deferred request the wait for that completion or for the batch,
// which with this many in flight is a small share of its own latency, and
// saves a system call per request, a doorbell (one virtio notification per
// batch rather than per request on a VM) and, since io_uring runs a
// request's completion work on the thread that submitted it, a wake-up of
// that submitter's thread, which by then may be idle. Measured on a 2-CPU
// VM with 32 goroutines each keeping one O_DIRECT I/O of 512 B in flight
// (BenchmarkDirectIO in the engine): about 10 SQEs per submitting
// io_uring_enter instead of 2 to 6, and less CPU per I/O by a fifth on
// 50/50 reads and writes and by a tenth on reads, for 1-3% more wall time
// per I/O; deferring every submission made batches of 20 and saved a
// little more CPU but cost up to a tenth of the throughput (the requests
// then reach the device in bursts). Below deferSubmitDepth (a few
// synchronous readers) the wait would be a noticeable share of the
// latency, and submitters enter the kernel themselves.
const (
	deferSubmitDepth = 8
	deferSubmitBatch = 8
)

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
		s.Deferred += o.nDeferred.Load()
		s.Blocked += o.nBlocked.Load()
		s.ShortIOs += o.nShort.Load()
		s.DepthNanos += o.nDepthNanos.Load()
	}
}

// Owner states, for ringOwner.state.
const (
	// running: the owner will enter the kernel (submitting every
	// published SQE) before it sleeps.
	running int32 = iota
	// sleepKernel: the owner waits in io_uring_enter for a completion; a
	// submitter submits its own SQE.
	sleepKernel
	// sleepIdle: the owner has nothing in flight and waits on its idle
	// channel.
	sleepIdle
)

// item is a pending request. tok says whether it holds a semaphore token.
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

// finished is a request whose Done is due.
type finished struct {
	r   *device.Request
	err error
}

// ringOwner is one ring and the goroutine that reaps its completions.
//
// Submission is shared: a submitter takes sq, fills an SQE and a slot and
// publishes the SQE; then, if the owner sleeps in the kernel, it calls
// io_uring_enter itself to submit it, and otherwise leaves it to the
// owner's next io_uring_enter. Requests that find no free slot or SQ entry
// wait in pending, which the owner fills as completions free them.
//
// The owner goroutine's loop, analogous to a driver's completion loop:
//
//	reap:  copy CQEs out; under sq, finish or queue the resubmission of
//	       their requests; then, without sq, call Done
//	fill:  under sq, resubmissions first, then pending requests while
//	       slots and SQ entries are free
//	enter: io_uring_enter(submit what is published, wait for 1 unless
//	       more work is waiting for the SQ)
//
// Lock order: sq is a leaf. Done callbacks run without it, so they may
// Submit.
type ringOwner struct {
	// Immutable after startRingOwner.
	d          *Device
	fsyncFlags uint32
	idle       chan struct{}
	// exited receives the loop's result when the owner has torn down.
	exited chan error

	// sq guards the ring's submission side (GetSQE and publishing) and the
	// slots.
	sq          sync.Mutex
	ring        *uring.Ring // its completion side is the owner's alone
	slots       []slot
	free        []uint32
	inflight    int
	pending     []item
	pendingHead int
	retry       []uint32
	// The semaphore that bounds the requests a ring has accepted (in
	// flight or pending) to its slots: tokens are free, a Submit takes one
	// and its completion returns it; while Submits wait for one
	// (tokenWaiters), a returned token is handed to them (handoffs, with
	// tokenCond on sq) rather than left for a newcomer. One decrement and one increment under sq per request, which
	// each takes anyway.
	tokens, tokenWaiters, handoffs int
	tokenCond                      sync.Cond
	// ownerTail is the SQ tail the owner published for the
	// io_uring_enter it is in or about to make: SQEs before it are its
	// to submit.
	ownerTail uint32

	// accepted counts Submit calls that handed their request to the ring.
	accepted atomic.Uint64
	// closing is set once by stop.
	closing atomic.Bool
	// dispatchTid is the id of the OS thread the owner is locked to while
	// it calls Done callbacks, and 0 otherwise.
	dispatchTid atomic.Int32
	// state is running, sleepKernel or sleepIdle. The owner stores a sleep
	// state and then looks at sq (under the lock); a submitter publishes
	// under sq and then reads state (both sequentially consistent), so
	// either the owner sees the submitter's SQE or the submitter sees the
	// sleep state and submits it or wakes the owner itself.
	state atomic.Int32

	// Owned by the owner goroutine.
	cqes []uring.CQE
	done []finished

	// Counters for Stats.
	nRequests, nSQEs, nEnters, nBatches, nWakeups, nDeferred, nBlocked, nShort, nDepthNanos atomic.Uint64
}

func startRingOwner(d *Device) (*ringOwner, error) {
	o := &ringOwner{
		d:      d,
		idle:   make(chan struct{}, 1),
		exited: make(chan error, 1),
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
// The owner is not locked to an OS thread (see loop) and submitters submit
// from their own threads, so the rings do not use
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
	o.exited <- o.ring.Close()
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
	o.ring = ring
	// One slot per CQ entry: the CQ cannot overflow.
	n := int(ring.CQEntries())
	o.slots = make([]slot, n)
	o.free = make([]uint32, n)
	for i := range o.free {
		o.free[i] = uint32(n - 1 - i)
	}
	o.tokens = n
	o.tokenCond.L = &o.sq
	o.cqes = make([]uring.CQE, ring.CQEntries())
	return nil
}

// loop runs until stop was called and every request has completed.
//
// After calling Done callbacks the owner yields its P (runtime.Gosched): the
// callbacks typically woke goroutines blocked in device.ReadAt or WriteAt, which the
// scheduler queued on the owner's P, and they should run (and submit their
// next requests, which the owner then submits together) before the owner
// blocks in io_uring_enter, a system call during which the P stays with the
// owner until another P steals them or the runtime's monitor retakes the P,
// tens of microseconds to milliseconds later. An owner locked to its thread
// (the precondition for SINGLE_ISSUER|DEFER_TASKRUN) cannot yield cheaply:
// its P must be handed to another thread and back. On a 2-CPU VM with 4 KiB
// random reads from 32 goroutines, against a locked owner waiting with
// DEFER_TASKRUN, this owner spent about 12 us of CPU per read instead of
// 14-25 at queue depth 1, and took 3 us instead of 10-70 from Done to the
// next Submit; at depth 32 it kept a few percent more of the queue depth in
// the kernel. When the callbacks submitted as many requests as completed
// (Submit from Done, as fio-style loops do), nothing was woken and the owner
// does not yield.
func (o *ringOwner) loop() {
	// The queue depth is integrated over time for Stats: a request counts
	// from fill until reaped. tick charges the time since the last tick at
	// the current depth.
	last := time.Now()
	depth := 0
	tick := func() {
		now := time.Now()
		o.nDepthNanos.Add(uint64(depth) * uint64(now.Sub(last)))
		last = now
	}
	for {
		tick()
		before := o.accepted.Load()
		if n := o.reap(); n > 0 && int(o.accepted.Load()-before) < n {
			// Some callbacks did not submit again themselves: they
			// probably woke goroutines that will.
			runtime.Gosched()
		}
		tick()
		o.sq.Lock()
		o.fillLocked()
		depth = o.inflight
		idle := o.inflight == 0 && o.pendingHead == len(o.pending)
		// More to fill once the kernel has consumed the SQ: submit, and
		// come back without waiting.
		more := len(o.retry) > 0 || (o.pendingHead < len(o.pending) && len(o.free) > 0)
		o.sq.Unlock()
		if idle {
			if o.closing.Load() {
				return
			}
			o.sleepIdle()
			continue
		}
		wait := uint32(1)
		if more {
			wait = 0
		} else {
			o.state.Store(sleepKernel)
		}
		o.sq.Lock()
		toSubmit := o.ring.Publish()
		o.ownerTail = o.ring.SQTail()
		o.sq.Unlock()
		// A submitter that saw sleepKernel may submit some of these
		// first; then the kernel finds fewer than toSubmit and returns
		// without waiting, and the loop comes round again.
		n, err := o.ring.Enter(toSubmit, wait)
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

// enterSubmit submits every published SQE, on a submitter's thread.
func (o *ringOwner) enterSubmit() {
	for {
		n, err := o.ring.SubmitPublished()
		o.nEnters.Add(1)
		if n > 0 {
			o.nBatches.Add(1)
		}
		if err == nil {
			return
		}
		// Retry until the kernel takes the SQEs: the owner may be
		// waiting for exactly this request.
		o.enterFailed(err)
	}
}

// enterFailed handles an io_uring_enter error. Resource shortages are
// transient: completions free resources, so the caller backs off and
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

// sleepIdle waits until a submitter or stop wakes the owner, unless work
// arrived meanwhile.
func (o *ringOwner) sleepIdle() {
	o.state.Store(sleepIdle)
	o.sq.Lock()
	busy := o.inflight > 0 || o.pendingHead < len(o.pending)
	o.sq.Unlock()
	if !busy && !o.closing.Load() {
		<-o.idle
	} else if !o.state.CompareAndSwap(sleepIdle, running) {
		<-o.idle // a submitter won the CAS and sends a wake-up: take it
	}
	o.state.Store(running)
}

// takeTokenLocked takes a free token if there is one. There is none while
// a waiter has not been handed one: tokens are returned to waiters first,
// so tokens > 0 only when every waiter has its handoff.
//
// Preconditions: o.sq is held.
func (o *ringOwner) takeTokenLocked() bool {
	if o.tokens == 0 || o.tokenWaiters > o.handoffs {
		return false
	}
	o.tokens--
	return true
}

// waitTokenLocked waits until a returned token is handed to the caller.
//
// Preconditions: o.sq is held (and is while it waits).
func (o *ringOwner) waitTokenLocked() {
	if o.takeTokenLocked() {
		return // returned while the caller let go of sq
	}
	o.tokenWaiters++
	for o.handoffs == 0 {
		o.tokenCond.Wait()
	}
	o.handoffs--
	o.tokenWaiters--
}

// returnTokenLocked returns a token: to a waiting Submit, if any.
//
// Preconditions: o.sq is held.
func (o *ringOwner) returnTokenLocked() {
	if o.tokenWaiters > o.handoffs {
		o.handoffs++
		o.tokenCond.Signal()
		return
	}
	o.tokens++
}

// startLocked puts r in a free slot and a free SQE, publishes it and
// reports true; false if there is no free slot or SQ entry.
//
// Preconditions: o.sq is held.
func (o *ringOwner) startLocked(r *device.Request, tok bool) bool {
	if len(o.free) == 0 {
		return false
	}
	sqe := o.ring.GetSQE()
	if sqe == nil {
		return false
	}
	i := o.free[len(o.free)-1]
	o.free = o.free[:len(o.free)-1]
	o.slots[i] = slot{r: r, tok: tok}
	o.inflight++
	o.prep(sqe, i)
	o.ring.Publish()
	return true
}

// fillLocked turns resubmissions and pending requests into SQEs while there
// are free SQEs and slots.
//
// Preconditions: o.sq is held.
func (o *ringOwner) fillLocked() {
	for len(o.retry) > 0 {
		sqe := o.ring.GetSQE()
		if sqe == nil {
			return
		}
		i := o.retry[len(o.retry)-1]
		o.retry = o.retry[:len(o.retry)-1]
		o.prep(sqe, i)
	}
	for o.pendingHead < len(o.pending) {
		it := &o.pending[o.pendingHead]
		if !o.startLocked(it.r, it.tok) {
			break
		}
		*it = item{}
		o.pendingHead++
	}
	if o.pendingHead == len(o.pending) {
		o.pending, o.pendingHead = o.pending[:0], 0
	}
}

// prep fills sqe for what is left of slot i's request.
//
// Preconditions: o.sq is held.
func (o *ringOwner) prep(sqe *uring.SQE, i uint32) {
	s := &o.slots[i]
	r := s.r
	if r.Op == device.OpFlush {
		sqe.PrepFsync(o.d.fd, o.fsyncFlags)
	} else {
		prepTransfer(sqe, o.d.fd, r, s.done)
	}
	sqe.UserData = uint64(i)
	o.nSQEs.Add(1)
}

// reap handles every ready CQE and returns the number of Done callbacks it
// called.
func (o *ringOwner) reap() int {
	calls := 0
	for {
		n := o.ring.PeekBatch(o.cqes)
		if n == 0 {
			break
		}
		o.sq.Lock()
		for i := range n {
			o.completeLocked(o.cqes[i])
		}
		o.sq.Unlock()
		if len(o.done) > 0 {
			// Identify this goroutine to inDoneCallback while
			// completions may call Done.
			runtime.LockOSThread()
			o.dispatchTid.Store(int32(unix.Gettid()))
			for i, f := range o.done {
				o.nRequests.Add(1)
				f.r.Done(f.r, f.err)
				o.done[i] = finished{}
			}
			calls += len(o.done)
			o.done = o.done[:0]
			o.dispatchTid.Store(0)
			runtime.UnlockOSThread()
		}
		if n < len(o.cqes) {
			break
		}
	}
	return calls
}

// completeLocked handles one CQE: it queues the rest of a short transfer
// for resubmission, or frees the request's slot and queues its Done call.
//
// Preconditions: o.sq is held.
func (o *ringOwner) completeLocked(c uring.CQE) {
	i := uint32(c.UserData)
	s := &o.slots[i]
	r := s.r
	done, more, err := resultOf(r, s.done, c.Res)
	s.done = done
	if again(more, err, &s.retries, &o.nShort) {
		o.retry = append(o.retry, i)
		return
	}
	tok := s.tok
	*s = slot{}
	o.free = append(o.free, i)
	o.inflight--
	if tok {
		o.returnTokenLocked()
	}
	o.done = append(o.done, finished{r, err})
}

// stop asks the owner to finish the requests it has and exit, and waits.
func (o *ringOwner) stop() error {
	o.closing.Store(true)
	if o.state.CompareAndSwap(sleepIdle, running) {
		select {
		case o.idle <- struct{}{}:
		default:
		}
	}
	return <-o.exited
}
