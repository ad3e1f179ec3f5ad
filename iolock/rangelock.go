package iolock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// RangeLock excludes, from each other, the operations that work on
// overlapping runs of one file's blocks: sluice's block-range lock, which
// the kernel's file systems do not have (their nearest relative is the
// range-locked i_rwsem proposed for Linux and Lustre's extent locks). It is
// taken under a Shared hold of the inode's Lock, never instead of it: the
// Lock decides who may run at all (Exclusive still stops everybody), the
// RangeLock orders the Shared holders that must not interleave on a block.
// See the package doc ("Block ranges") for who takes it.
//
// A request names the blocks [first, first+n), n >= 1. Requests are ordered
// strictly by arrival: a request is granted once every earlier request whose
// blocks overlap its own has been unlocked, and never waits for a later one
// or for one that shares no block with it. So two requests for different
// blocks never wait for each other, two for a common block run one after the
// other in arrival order, and a stream of requests can starve nobody. A
// goroutine that holds one range and asks for a second on the same RangeLock
// may deadlock; the engine takes one range per operation.
//
// Enqueue fixes a request's place in that order without waiting, which lets
// a caller queue ranges in an order it chooses under a lock of its own (the
// engine queues appends' ranges in reservation order) and wait for them
// later, outside it.
//
// The zero value has no requests. A RangeLock must not be copied after first
// use. It starts no goroutines. Every call costs one mutex and a walk of the
// requests present (the engine has at most a few dozen per file).
type RangeLock struct {
	mu struct {
		lockrank.Mutex[lockrank.Leaf]
		// head and tail of every request that is queued or held, in
		// arrival order, linked through Range.next/prev. Protected by mu.
		head, tail *Range
		// n counts them, waiting counts the queued ones. Protected by mu.
		n, waiting int
	}
	stats struct {
		acquired, contended, tryFailed atomic.Uint64
		maxHeld                        atomic.Int64
	}
}

// Range is one request of a RangeLock, from Lock, TryLock or Enqueue until
// Unlock. It must not be used after Unlock.
type Range struct {
	first, end uint64 // the blocks [first, end). Immutable.
	// next and prev link the requests. Protected by RangeLock.mu.
	next, prev *Range
	// blockers counts earlier overlapping requests not yet unlocked.
	// Protected by RangeLock.mu.
	blockers int
	// granted is set once blockers reaches zero. Protected by
	// RangeLock.mu.
	granted bool
	// ready receives one token when a queued request is granted.
	// Capacity 1, so the granter never blocks.
	ready chan struct{}
}

var rangePool = sync.Pool{New: func() any { return &Range{ready: make(chan struct{}, 1)} }}

// RangeStats is a snapshot of a RangeLock's counters, which only grow
// (MaxHeld aside, a high-water mark).
type RangeStats struct {
	// Acquired counts grants: Lock, Wait of an Enqueue, and successful
	// TryLock.
	Acquired uint64
	// Contended counts requests that could not be granted when they
	// arrived and had to queue behind an overlapping one.
	Contended uint64
	// TryFailed counts TryLock calls that returned nil.
	TryFailed uint64
	// MaxHeld is the largest number of ranges held at once.
	MaxHeld int64
}

// First and End return the blocks [First, End) the request names.
func (r *Range) First() uint64 { return r.first }

// End returns the end of the range (exclusive).
func (r *Range) End() uint64 { return r.end }

func (r *Range) overlaps(o *Range) bool { return r.first < o.end && o.first < r.end }

// Lock requests the blocks [first, first+n) and waits until they are
// granted.
func (l *RangeLock) Lock(first, n uint64) *Range {
	lockrank.Wait(lockrank.RankBlockRange, 0, nil)
	r := l.Enqueue(first, n)
	l.wait(r)
	return r
}

// TryLock grants the blocks [first, first+n) if no earlier request that is
// still present overlaps them, and returns nil otherwise, queueing nothing
// (NOWAIT callers).
func (l *RangeLock) TryLock(first, n uint64) *Range {
	r := l.newRange(first, n)
	l.mu.Lock()
	for o := l.mu.head; o != nil; o = o.next {
		if o.overlaps(r) {
			l.mu.Unlock()
			rangePool.Put(r)
			l.stats.tryFailed.Add(1)
			return nil
		}
	}
	r.granted = true
	l.pushLocked(r)
	l.mu.Unlock()
	l.stats.acquired.Add(1)
	lockrank.TryAcquired(lockrank.RankBlockRange, 0, unsafe.Pointer(r))
	return r
}

// Enqueue places a request for the blocks [first, first+n) behind every
// request present and returns at once; Wait waits for its grant. Its lock
// order is checked by Wait, not here, so it may be called under locks ranked
// after BlockRange.
func (l *RangeLock) Enqueue(first, n uint64) *Range {
	r := l.newRange(first, n)
	l.mu.Lock()
	for o := l.mu.head; o != nil; o = o.next {
		if o.overlaps(r) {
			r.blockers++
		}
	}
	granted := r.blockers == 0
	r.granted = granted
	if !granted {
		l.mu.waiting++
	}
	l.pushLocked(r)
	l.mu.Unlock()
	if !granted {
		l.stats.contended.Add(1)
	}
	return r
}

// Wait waits until r, from Enqueue, is granted. It may be called once.
func (l *RangeLock) Wait(r *Range) {
	lockrank.Wait(lockrank.RankBlockRange, 0, nil)
	l.wait(r)
}

// Granted reports whether r is granted now (a queued request may be granted
// by any Unlock).
func (l *RangeLock) Granted(r *Range) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.granted
}

func (l *RangeLock) wait(r *Range) {
	l.mu.Lock()
	granted := r.granted
	l.mu.Unlock()
	if !granted {
		<-r.ready
	}
	l.stats.acquired.Add(1)
	lockrank.TryAcquired(lockrank.RankBlockRange, 0, unsafe.Pointer(r))
}

// Unlock releases r, granted or not (a request that was only queued gives
// up its place), and grants the requests that were waiting only for it.
func (l *RangeLock) Unlock(r *Range) {
	lockrank.Release(unsafe.Pointer(r))
	l.mu.Lock()
	if !r.granted {
		l.mu.waiting--
	}
	for o := r.next; o != nil; o = o.next {
		if !o.overlaps(r) {
			continue
		}
		if o.blockers--; o.blockers == 0 {
			o.granted = true
			l.mu.waiting--
			o.ready <- struct{}{}
		}
	}
	l.removeLocked(r)
	l.mu.Unlock()
	select { // a token sent to a request that gave up before waiting
	case <-r.ready:
	default:
	}
	*r = Range{ready: r.ready}
	rangePool.Put(r)
}

// Handoff says that r, held by the calling goroutine, now belongs to a
// request whose completion unlocks it (lockrank.Handoff).
func (l *RangeLock) Handoff(r *Range) { lockrank.Handoff(unsafe.Pointer(r)) }

func (l *RangeLock) newRange(first, n uint64) *Range {
	if n == 0 || first+n < first {
		panic(fmt.Sprintf("iolock: invalid block range [%d, +%d)", first, n))
	}
	r := rangePool.Get().(*Range)
	r.first, r.end = first, first+n
	return r
}

// pushLocked appends r to the requests.
//
// Preconditions: l.mu is held.
func (l *RangeLock) pushLocked(r *Range) {
	r.prev = l.mu.tail
	if l.mu.tail != nil {
		l.mu.tail.next = r
	} else {
		l.mu.head = r
	}
	l.mu.tail = r
	l.mu.n++
	if held := int64(l.mu.n - l.mu.waiting); held > l.stats.maxHeld.Load() {
		l.stats.maxHeld.Store(held)
	}
}

// removeLocked unlinks r.
//
// Preconditions: l.mu is held.
func (l *RangeLock) removeLocked(r *Range) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		l.mu.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		l.mu.tail = r.prev
	}
	l.mu.n--
}

// Len returns the number of requests present (held or queued) and how many
// of them are queued.
func (l *RangeLock) Len() (present, waiting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.n, l.mu.waiting
}

// Stats returns a snapshot of l's counters.
func (l *RangeLock) Stats() RangeStats {
	return RangeStats{
		Acquired:  l.stats.acquired.Load(),
		Contended: l.stats.contended.Load(),
		TryFailed: l.stats.tryFailed.Load(),
		MaxHeld:   l.stats.maxHeld.Load(),
	}
}

// ResetMaxHeld restarts MaxHeld from the number of ranges held now.
func (l *RangeLock) ResetMaxHeld() {
	l.mu.Lock()
	l.stats.maxHeld.Store(int64(l.mu.n - l.mu.waiting))
	l.mu.Unlock()
}
