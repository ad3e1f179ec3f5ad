package iolock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// Mode is the mode in which a Lock is requested or held. The zero Mode is
// invalid, so that a forgotten mode is caught instead of meaning Shared.
type Mode uint8

const (
	// Shared admits any number of holders at once (XFS_IOLOCK_SHARED).
	Shared Mode = 1
	// Exclusive admits one holder and nobody else (XFS_IOLOCK_EXCL).
	Exclusive Mode = 2
)

// String returns "shared" or "exclusive".
func (m Mode) String() string {
	switch m {
	case Shared:
		return "shared"
	case Exclusive:
		return "exclusive"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// index maps a valid Mode to 0 (Shared) or 1 (Exclusive) and panics on any
// other value.
func (m Mode) index() int {
	if m != Shared && m != Exclusive {
		panic(fmt.Sprintf("iolock: invalid mode %d", uint8(m)))
	}
	return int(m) - 1
}

// The lock word, Lock.state:
//
//	bits  0-23  number of Shared holders
//	bit   24    held Exclusive
//	bit   25    the waiter queue is not empty
//	bits 26-43  Exclusive grants, modulo 2^18
//	bits 44-63  Shared grants, modulo 2^20
//
// The grant counters live in the lock word so that an uncontended Lock is one
// compare-and-swap that both takes the lock and counts it, and Unlock one
// atomic subtract: two atomic read-modify-writes per Lock/Unlock pair, as for
// sync.RWMutex. A grant that would wrap a counter is made under Lock.mu, which
// adds the wrapped amount to a carry (Lock.mu.sharedCarry, exclCarry); Stats
// reads the carries and the word under Lock.mu, so its totals never jump.
//
// Fast paths change the word with one atomic operation, and only while the
// queued bit is clear. While it is set, the only change made outside Lock.mu
// is a Shared holder leaving (an atomic subtract); every grant, Exclusive
// release, Demote and queue change happens under Lock.mu. This is what makes
// grants hand-offs (package doc, Fairness): nobody can take the lock between a
// release and the grant to the queue's head.
const (
	readerMask uint64 = 1<<24 - 1
	writerBit  uint64 = 1 << 24
	queuedBit  uint64 = 1 << 25

	exclShift        = 26
	exclBits         = 18
	exclMask  uint64 = (1<<exclBits - 1) << exclShift

	sharedShift        = exclShift + exclBits // 44
	sharedBits         = 64 - sharedShift     // 20
	sharedMask  uint64 = (1<<sharedBits - 1) << sharedShift
)

// Lock is a per-inode shared/exclusive I/O lock, analogous to the XFS IOLOCK.
// See the package documentation for modes, Demote, the absence of upgrade,
// fairness and which operation takes which mode.
//
// The zero value is an unlocked Lock. A Lock must not be copied after first
// use. It is about 100 bytes and starts no goroutines. At most 2^24-1
// goroutines may hold it Shared at once; one more panics.
type Lock struct {
	// state is the lock word described above. Accessed atomically.
	state atomic.Uint64

	// nwait is the length of the waiter queue, for Waiters. Written under mu,
	// read lock-free.
	nwait atomic.Int32

	mu struct {
		lockrank.Mutex[lockrank.Leaf]
		// head and tail of the FIFO queue of blocked requests, linked
		// through waiter.next/prev. Protected by mu.
		head, tail *waiter
		// sharedCarry and exclCarry are the grants that wrapped the lock
		// word's counters. Protected by mu.
		sharedCarry, exclCarry uint64
	}

	stats lockStats
}

// waiter is one blocked request, queued in arrival order.
type waiter struct {
	mode Mode
	// next and prev link the queue. Protected by Lock.mu.
	next, prev *waiter
	// granted is set when the lock is handed to this waiter. Protected by
	// Lock.mu.
	granted bool
	// ready receives one token when the waiter is granted. Capacity 1, so
	// the granter never blocks.
	ready chan struct{}
}

var waiterPool = sync.Pool{
	New: func() any { return &waiter{ready: make(chan struct{}, 1)} },
}

// lockStats are the counters behind Stats that are not in the lock word.
// They count slow paths only, each with one atomic add outside any mutex.
type lockStats struct {
	contended [2]atomic.Uint64 // indexed by Mode.index
	tryFailed [2]atomic.Uint64
	demoted   atomic.Uint64
	cancelled atomic.Uint64
}

// Stats is a snapshot of a Lock's counters. The counters only grow. Each is
// read atomically, but the snapshot as a whole is not taken at one instant:
// for example a request may show in SharedContended before SharedAcquired.
type Stats struct {
	// SharedAcquired and ExclusiveAcquired count grants of each mode by
	// Lock, LockContext and successful TryLock. A Demote is not a Shared
	// acquisition (see Demoted).
	SharedAcquired, ExclusiveAcquired uint64
	// SharedContended and ExclusiveContended count blocking requests that
	// could not be granted at once and had to queue. A queued LockContext
	// that gives up counts here and in Cancelled, not in Acquired.
	SharedContended, ExclusiveContended uint64
	// SharedTryFailed and ExclusiveTryFailed count TryLock calls that
	// returned false (NOWAIT callers that got EAGAIN from the lock).
	SharedTryFailed, ExclusiveTryFailed uint64
	// Demoted counts Demote calls.
	Demoted uint64
	// Cancelled counts queued LockContext calls that returned ctx.Err().
	Cancelled uint64
}

// Add adds o's counters to s, for totals over many inodes.
func (s *Stats) Add(o Stats) {
	s.SharedAcquired += o.SharedAcquired
	s.ExclusiveAcquired += o.ExclusiveAcquired
	s.SharedContended += o.SharedContended
	s.ExclusiveContended += o.ExclusiveContended
	s.SharedTryFailed += o.SharedTryFailed
	s.ExclusiveTryFailed += o.ExclusiveTryFailed
	s.Demoted += o.Demoted
	s.Cancelled += o.Cancelled
}

// Stats returns a snapshot of l's counters. It never waits for a holder of l:
// it takes only l's internal mutex, for a few instructions.
func (l *Lock) Stats() Stats {
	l.mu.Lock()
	s := l.state.Load()
	shared := l.mu.sharedCarry + (s&sharedMask)>>sharedShift
	excl := l.mu.exclCarry + (s&exclMask)>>exclShift
	l.mu.Unlock()
	st := &l.stats
	return Stats{
		SharedAcquired:     shared,
		ExclusiveAcquired:  excl,
		SharedContended:    st.contended[0].Load(),
		ExclusiveContended: st.contended[1].Load(),
		SharedTryFailed:    st.tryFailed[0].Load(),
		ExclusiveTryFailed: st.tryFailed[1].Load(),
		Demoted:            st.demoted.Load(),
		Cancelled:          st.cancelled.Load(),
	}
}

// Waiters returns how many requests are queued in Lock or LockContext. A
// request is counted from the moment it is queued until it is granted or
// gives up, so a test that sees Waiters() reach n knows that n goroutines are
// blocked (or about to block) and will be granted only by a later release.
func (l *Lock) Waiters() int {
	return int(l.nwait.Load())
}

// Holders reports how l is held at this instant: the number of Shared holders
// and whether it is held Exclusive. It is meant for assertions ("Preconditions:
// the I/O lock is held") and tests; the answer may be stale by the time it is
// used unless the caller's own hold pins it.
func (l *Lock) Holders() (shared int, exclusive bool) {
	s := l.state.Load()
	return int(s & readerMask), s&writerBit != 0
}

// Lock acquires l in mode m, blocking until it is granted (xfs_ilock). It
// queues behind every earlier waiter; see the package documentation,
// Fairness.
func (l *Lock) Lock(m Mode) {
	lockrank.Acquire(lockrank.RankIOLock, 0, unsafe.Pointer(l))
	if l.tryFast(m) != acquired {
		_ = l.lockSlow(context.Background(), m)
	}
}

// LockOrdered is Lock for one of several I/O locks held at once (a clone's
// two files), taken in increasing key order (inode numbers, never 0): the
// lock-order checker verifies the order (package internal/lockrank).
func (l *Lock) LockOrdered(m Mode, key uint64) {
	lockrank.Acquire(lockrank.RankIOLock, key, unsafe.Pointer(l))
	if l.tryFast(m) != acquired {
		_ = l.lockSlow(context.Background(), m)
	}
}

// LockContext is Lock that gives up when ctx is done. It returns nil with l
// held in mode m, or ctx.Err() without it. If ctx is done when LockContext is
// called, it still succeeds when l can be granted at once. If the grant and
// the cancellation race, either outcome may be reported, but the result
// always matches the state: a nil return means l is held.
func (l *Lock) LockContext(ctx context.Context, m Mode) error {
	lockrank.Acquire(lockrank.RankIOLock, 0, unsafe.Pointer(l))
	if l.tryFast(m) == acquired {
		return nil
	}
	err := l.lockSlow(ctx, m)
	if err != nil {
		lockrank.Release(unsafe.Pointer(l))
	}
	return err
}

// TryLock acquires l in mode m if it can be granted at once, and never
// blocks. It is the NOWAIT path (xfs_ilock_nowait): false means the caller
// must fail with EAGAIN. TryLock(Shared) fails while an Exclusive request is
// queued, even if the lock is held only Shared (package doc, Fairness).
func (l *Lock) TryLock(m Mode) bool {
	switch l.tryFast(m) {
	case acquired:
		lockrank.TryAcquired(lockrank.RankIOLock, 0, unsafe.Pointer(l))
		return true
	case mustCarry:
		if l.tryLockCarry(m) {
			lockrank.TryAcquired(lockrank.RankIOLock, 0, unsafe.Pointer(l))
			return true
		}
	}
	l.stats.tryFailed[m.index()].Add(1)
	return false
}

type fastResult uint8

const (
	acquired  fastResult = iota
	busy                 // not grantable at once
	mustCarry            // grantable, but the grant counter wraps: use mu
)

// tryFast is the fast path: it takes l in mode m, with one compare-and-swap
// that also counts the grant, if no waiter is queued and m is compatible with
// the current holders.
func (l *Lock) tryFast(m Mode) fastResult {
	if m != Shared && m != Exclusive {
		m.index() // panics
	}
	for {
		s := l.state.Load()
		if !grantable(s, m) {
			return busy
		}
		ns, carry := addGrants(s, m, 1)
		if carry != 0 {
			return mustCarry
		}
		if l.state.CompareAndSwap(s, ns) {
			return acquired
		}
		// A Shared holder came or went, or a waiter queued; look again.
	}
}

// tryLockCarry is TryLock for a grant that wraps a counter.
func (l *Lock) tryLockCarry(m Mode) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		s := l.state.Load()
		if !grantable(s, m) {
			return false
		}
		if l.casGrantsLocked(s, s, m, 1) {
			return true
		}
	}
}

// grantable reports whether a new request for mode m may be granted at once:
// nobody is queued and m is compatible with the holders.
func grantable(s uint64, m Mode) bool {
	return s&queuedBit == 0 && compatible(s, m)
}

// compatible reports whether mode m can be granted given the holders in s
// (ignoring the queue).
func compatible(s uint64, m Mode) bool {
	if m == Exclusive {
		return s&(writerBit|readerMask) == 0
	}
	return s&writerBit == 0
}

// addGrants returns s with n more holders of mode m (n is 1 for Exclusive),
// counted in the word's grant counter, and the number of grants that wrapped
// off the counter (a multiple of its modulus; 0 almost always).
func addGrants(s uint64, m Mode, n uint64) (ns, carry uint64) {
	if m == Exclusive {
		c := (s&exclMask)>>exclShift + 1
		carry = c &^ (1<<exclBits - 1)
		c &= 1<<exclBits - 1
		return s&^exclMask | c<<exclShift | writerBit, carry
	}
	if s&readerMask+n > readerMask {
		panic("iolock: too many shared holders")
	}
	c := (s&sharedMask)>>sharedShift + n
	carry = c &^ (1<<sharedBits - 1)
	c &= 1<<sharedBits - 1
	return s&^sharedMask | c<<sharedShift + n, carry
}

// casGrantsLocked grants n requests of mode m by changing the lock word from
// s to addGrants(base, m, n), where base is s with any queue-bit change the
// caller wants, and adds a wrapped count to the carry.
//
// Preconditions: l.mu is held.
func (l *Lock) casGrantsLocked(s, base uint64, m Mode, n uint64) bool {
	ns, carry := addGrants(base, m, n)
	if !l.state.CompareAndSwap(s, ns) {
		return false
	}
	if m == Exclusive {
		l.mu.exclCarry += carry
	} else {
		l.mu.sharedCarry += carry
	}
	return true
}

// lockSlow queues a request for mode m and waits for its grant, or for ctx
// to be done.
func (l *Lock) lockSlow(ctx context.Context, m Mode) error {
	i := m.index()
	l.mu.Lock()
	for {
		s := l.state.Load()
		if s&queuedBit == 0 {
			if compatible(s, m) {
				// The holders left while we took the mutex, or the
				// fast path found a counter about to wrap.
				if l.casGrantsLocked(s, s, m, 1) {
					l.mu.Unlock()
					return nil
				}
				continue
			}
			// Publish that a waiter is about to be queued: from now
			// on no fast path may take the lock, and the release
			// that makes the head grantable comes to the mutex.
			if !l.state.CompareAndSwap(s, s|queuedBit) {
				continue
			}
		}
		break
	}
	if ctx.Err() != nil {
		l.removeLocked(nil)
		l.mu.Unlock()
		return ctx.Err()
	}
	w := waiterPool.Get().(*waiter)
	w.mode = m
	l.pushLocked(w)
	l.stats.contended[i].Add(1)
	l.mu.Unlock()

	if ctx.Done() == nil {
		<-w.ready
		l.putWaiter(w)
		return nil
	}
	select {
	case <-w.ready:
		l.putWaiter(w)
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	if w.granted {
		// Granted while we were giving up: keep it.
		l.mu.Unlock()
		<-w.ready
		l.putWaiter(w)
		return nil
	}
	l.removeLocked(w)
	l.mu.Unlock()
	l.stats.cancelled.Add(1)
	l.putWaiter(w)
	return ctx.Err()
}

func (l *Lock) putWaiter(w *waiter) {
	*w = waiter{ready: w.ready}
	waiterPool.Put(w)
}

// pushLocked appends w to the queue.
//
// Preconditions: l.mu is held; the queued bit is set.
func (l *Lock) pushLocked(w *waiter) {
	w.prev = l.mu.tail
	if l.mu.tail != nil {
		l.mu.tail.next = w
	} else {
		l.mu.head = w
	}
	l.mu.tail = w
	l.nwait.Add(1)
}

// removeLocked unlinks w (if not nil) from the queue because it gave up, then
// clears the queued bit if the queue is empty, or grants the new head if it
// can run: removing an Exclusive waiter can unblock the Shared waiters behind
// it.
//
// Preconditions: l.mu is held; w is queued and not granted.
func (l *Lock) removeLocked(w *waiter) {
	if w != nil {
		if w.prev != nil {
			w.prev.next = w.next
		} else {
			l.mu.head = w.next
		}
		if w.next != nil {
			w.next.prev = w.prev
		} else {
			l.mu.tail = w.prev
		}
		w.next, w.prev = nil, nil
		l.nwait.Add(-1)
	}
	if l.mu.head != nil {
		l.grantLocked()
		return
	}
	for {
		s := l.state.Load()
		if l.state.CompareAndSwap(s, s&^queuedBit) {
			break
		}
	}
	// A Shared holder that left while the queued bit was set saw it and
	// will take (or has taken) the mutex to grant; with an empty queue it
	// finds nothing to do. Nothing else is owed.
}

// grantLocked hands l to the waiters at the head of the queue that can run
// now, and wakes them (rwsem_mark_wake). An Exclusive head is granted alone
// if l is free; a Shared head is granted with every consecutive Shared waiter
// behind it if l is not held Exclusive.
//
// Preconditions: l.mu is held.
func (l *Lock) grantLocked() {
	for {
		w := l.mu.head
		if w == nil {
			return
		}
		s := l.state.Load()
		if !compatible(s, w.mode) {
			return
		}
		n, last := 1, w
		if w.mode == Shared {
			for last.next != nil && last.next.mode == Shared {
				n++
				last = last.next
			}
		}
		base := s
		if last.next == nil {
			base &^= queuedBit
		}
		if !l.casGrantsLocked(s, base, w.mode, uint64(n)) {
			continue // a Shared holder left meanwhile
		}
		l.popLocked(n)
		return
	}
}

// popLocked removes the first n waiters and wakes them.
//
// Preconditions: l.mu is held; the lock word already accounts for the n
// waiters as holders.
func (l *Lock) popLocked(n int) {
	for ; n > 0; n-- {
		w := l.mu.head
		l.mu.head = w.next
		if w.next != nil {
			w.next.prev = nil
		} else {
			l.mu.tail = nil
		}
		w.next = nil
		w.granted = true
		l.nwait.Add(-1)
		w.ready <- struct{}{}
	}
}

// Unlock releases l, held in mode m (xfs_iunlock). If this leaves the queue's
// head grantable, the lock is handed to it before Unlock returns. Unlock of a
// mode that is not held panics.
func (l *Lock) Unlock(m Mode) {
	lockrank.Release(unsafe.Pointer(l))
	switch m {
	case Shared:
		s := l.state.Add(^uint64(0)) // subtract 1
		if s&readerMask == readerMask {
			panic("iolock: Unlock(Shared) of a lock not held shared")
		}
		if s&queuedBit != 0 && s&readerMask == 0 {
			// Last Shared holder out with waiters queued: the head
			// is an Exclusive waiter.
			l.mu.Lock()
			l.grantLocked()
			l.mu.Unlock()
		}
	case Exclusive:
		s := l.state.Load()
		if s&(writerBit|readerMask|queuedBit) == writerBit && l.state.CompareAndSwap(s, s&^writerBit) {
			return
		}
		l.mu.Lock()
		for {
			s := l.state.Load()
			if s&(writerBit|readerMask) != writerBit {
				l.mu.Unlock()
				panic("iolock: Unlock(Exclusive) of a lock not held exclusive")
			}
			if l.state.CompareAndSwap(s, s&^writerBit) {
				break
			}
		}
		l.grantLocked()
		l.mu.Unlock()
	default:
		m.index() // panics
	}
}

// Demote turns an Exclusive hold into a Shared hold without releasing l
// (xfs_ilock_demote). No other request of any mode is granted in between.
// Shared waiters at the head of the queue are admitted with the demoted
// holder; an Exclusive waiter stays queued. The caller then holds l Shared and
// must eventually call Unlock(Shared). Demote of a lock not held Exclusive
// panics.
func (l *Lock) Demote() {
	s := l.state.Load()
	if s&(writerBit|readerMask|queuedBit) == writerBit && l.state.CompareAndSwap(s, s&^writerBit+1) {
		l.stats.demoted.Add(1)
		return
	}
	l.mu.Lock()
	for {
		s := l.state.Load()
		if s&(writerBit|readerMask) != writerBit {
			l.mu.Unlock()
			panic("iolock: Demote of a lock not held exclusive")
		}
		if l.state.CompareAndSwap(s, s&^writerBit+1) {
			break
		}
	}
	l.grantLocked()
	l.mu.Unlock()
	l.stats.demoted.Add(1)
}

// Handoff hands l, held by the calling goroutine, to an asynchronous request
// that unlocks it when it completes (on another goroutine): for the
// lock-order checker, the goroutine no longer holds l.
func (l *Lock) Handoff() { lockrank.Handoff(unsafe.Pointer(l)) }

// String describes l's state for debugging, e.g.
// "shared(2) queue=[exclusive shared]". It takes l's internal mutex.
func (l *Lock) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state.Load()
	var b []byte
	switch {
	case s&writerBit != 0:
		b = append(b, "exclusive"...)
	case s&readerMask != 0:
		b = fmt.Appendf(b, "shared(%d)", s&readerMask)
	default:
		b = append(b, "unlocked"...)
	}
	if l.mu.head != nil {
		b = append(b, " queue=["...)
		for w := l.mu.head; w != nil; w = w.next {
			if w != l.mu.head {
				b = append(b, ' ')
			}
			b = append(b, w.mode.String()...)
		}
		b = append(b, ']')
	}
	return string(b)
}
