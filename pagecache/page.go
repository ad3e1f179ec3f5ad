package pagecache

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// Page state bits. Protected by Page.mu.
const (
	flagUptodate = 1 << iota
	flagLocked
	flagDirty
	flagWriteback
)

// Page is one cached page of a file. Data is valid while the caller holds
// a reference (from Get, GetOrCreate or Range); its bytes may be changed
// only with the page locked.
type Page struct {
	m     *Mapping
	Index uint64 // Immutable.
	// Data holds the page's bytes. It is PageSize long and aligned for
	// direct device I/O.
	Data []byte

	mu lockrank.Mutex[lockrank.PageState]
	// Protected by mu.
	flags     uint32
	validFrom int // with !uptodate and dirty: the valid (dirty) bytes
	validTo   int
	err       error // the read error that left the page not uptodate
	// The unlock's waiters, in arrival order: the first inline (when
	// hasWaiter is set, so that one waiter allocates nothing), the others
	// in waiters.
	waiter0   waiter
	hasWaiter bool
	waiters   []waiter
	wbWaiters []chan struct{}
	refs      int
	removed   bool
	dirtiedAt time.Time

	// The page's place in the LRU (lruList). Protected by Cache.mu.
	lruPrev, lruNext *Page
	onLRU            bool

	// dropBehind marks a page of uncached I/O (SetDropBehind).
	dropBehind atomic.Bool
}

// waiter is a goroutine blocked on a page's unlock, or a callback to run at
// it.
type waiter struct {
	ch chan struct{}
	cb func()
}

func (p *Page) has(f uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flags&f != 0
}

// Uptodate reports whether every byte of the page is valid.
func (p *Page) Uptodate() bool { return p.has(flagUptodate) }

// Locked reports whether the page is locked.
func (p *Page) Locked() bool { return p.has(flagLocked) }

// Dirty reports whether the page has bytes not yet written back.
func (p *Page) Dirty() bool { return p.has(flagDirty) }

// Writeback reports whether a writeback of the page is in flight.
func (p *Page) Writeback() bool { return p.has(flagWriteback) }

// Removed reports whether the page left its mapping (truncate,
// invalidation, eviction): a holder must look it up again.
func (p *Page) Removed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.removed
}

// Err returns the error of the last failed read into the page.
func (p *Page) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Valid returns the range of valid bytes of a page that is not uptodate
// but has a pending write (from == to when there is none).
func (p *Page) Valid() (from, to int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagUptodate != 0 {
		return 0, len(p.Data)
	}
	return p.validFrom, p.validTo
}

// WritePending reports whether a write of the page is pending: it is dirty
// (fully, or partially without being uptodate) and not yet written back.
func (p *Page) WritePending() bool { return p.has(flagDirty) }

// Lock locks the page, waiting for the current owner to unlock it.
func (p *Page) Lock() {
	lockrank.Acquire(lockrank.RankPage, p.Index+1, unsafe.Pointer(p))
	p.mu.Lock()
	for p.flags&flagLocked != 0 {
		ch := make(chan struct{})
		p.addWaiterLocked(waiter{ch: ch})
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
	}
	p.lockLocked()
	p.mu.Unlock()
}

// TryLock locks the page if it is unlocked, and reports whether it did.
func (p *Page) TryLock() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagLocked != 0 {
		return false
	}
	p.lockLocked()
	p.tookWithoutWaiting()
	return true
}

// tookWithoutWaiting tells the lock-order checker that the calling goroutine
// holds the page lock, taken without waiting (so in any order).
func (p *Page) tookWithoutWaiting() {
	lockrank.TryAcquired(lockrank.RankPage, p.Index+1, unsafe.Pointer(p))
}

// Handoff hands the page lock, held by the calling goroutine, to an
// asynchronous request that unlocks the page when it completes: for the
// lock-order checker, the goroutine no longer holds it.
func (p *Page) Handoff() { lockrank.Handoff(unsafe.Pointer(p)) }

// lockLocked sets the lock bit. Lock checked the lock order before
// waiting; the callers that do not wait (TryLock, LockAsync) record the lock
// with tookWithoutWaiting.
//
// Preconditions: p.mu is held and the page is unlocked.
func (p *Page) lockLocked() {
	p.flags |= flagLocked
	c := p.m.c
	c.mu.Lock()
	c.locked++
	c.mu.Unlock()
}

// addWaiterLocked queues w for the next unlock.
//
// Preconditions: p.mu is held.
func (p *Page) addWaiterLocked(w waiter) {
	if !p.hasWaiter {
		p.waiter0, p.hasWaiter = w, true
	} else {
		p.waiters = append(p.waiters, w)
	}
}

// LockAsync locks the page now and returns true, or, if it is locked,
// queues cb to run once at its next unlock and returns false. The check
// and the queueing happen under the page's state mutex, which the unlock
// takes, so an unlock in between is never lost. cb does not own the lock:
// it must retry from the lookup. cb runs on the unlocking goroutine and
// must not block.
func (p *Page) LockAsync(cb func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagLocked != 0 {
		p.addWaiterLocked(waiter{cb: cb})
		return false
	}
	p.lockLocked()
	p.tookWithoutWaiting()
	return true
}

// WaitUnlockedAsync returns true if the page is unlocked now; otherwise it
// queues cb to run once at the next unlock and returns false. As for
// LockAsync, no unlock can come between the check and the queueing. One
// waiter on a page allocates nothing.
func (p *Page) WaitUnlockedAsync(cb func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagLocked != 0 {
		p.addWaiterLocked(waiter{cb: cb})
		return false
	}
	return true
}

// WaitUnlocked blocks until the page is unlocked (without locking it).
func (p *Page) WaitUnlocked() {
	lockrank.Wait(lockrank.RankPage, p.Index+1, unsafe.Pointer(p))
	p.mu.Lock()
	if p.flags&flagLocked == 0 {
		p.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	p.addWaiterLocked(waiter{ch: ch})
	p.mu.Unlock()
	<-ch
}

// Unlock unlocks the page and wakes every waiter: blocked goroutines race
// for the lock again; callbacks run here, in order.
func (p *Page) Unlock() {
	lockrank.Release(unsafe.Pointer(p))
	p.mu.Lock()
	if p.flags&flagLocked == 0 {
		p.mu.Unlock()
		panic("pagecache: unlock of unlocked page")
	}
	p.flags &^= flagLocked
	w0, has0, ws := p.waiter0, p.hasWaiter, p.waiters
	p.waiter0, p.hasWaiter, p.waiters = waiter{}, false, nil
	c := p.m.c
	c.mu.Lock()
	c.locked--
	c.roomCond.Broadcast()
	c.mu.Unlock()
	p.maybeLRULocked()
	p.mu.Unlock()
	if has0 {
		w0.wake()
	}
	for _, w := range ws {
		w.wake()
	}
}

// wake runs the waiter's callback or wakes its goroutine.
func (w waiter) wake() {
	if w.cb != nil {
		w.cb()
	} else {
		close(w.ch)
	}
}

// SetUptodate marks every byte valid and clears a read error.
//
// Preconditions: the page is locked.
func (p *Page) SetUptodate() {
	p.mu.Lock()
	p.flags |= flagUptodate
	p.err = nil
	p.validFrom, p.validTo = 0, 0
	p.mu.Unlock()
}

// ClearUptodate marks the page's bytes invalid (after a failed read it
// carries err).
//
// Preconditions: the page is locked.
func (p *Page) ClearUptodate(err error) {
	p.mu.Lock()
	p.flags &^= flagUptodate
	p.err = err
	p.mu.Unlock()
}

// MarkDirty marks bytes [from, to) dirty. On a page that is not uptodate
// they extend its valid range (a pending partial write); the caller keeps
// that range contiguous.
//
// Preconditions: the page is locked.
func (p *Page) MarkDirty(from, to int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagUptodate == 0 {
		if p.flags&flagDirty == 0 || p.validFrom == p.validTo {
			p.validFrom, p.validTo = from, to
		} else {
			p.validFrom, p.validTo = min(p.validFrom, from), max(p.validTo, to)
		}
		if p.validFrom == 0 && p.validTo == len(p.Data) {
			p.flags |= flagUptodate
			p.validFrom, p.validTo = 0, 0
		}
	}
	if p.flags&flagDirty == 0 {
		p.flags |= flagDirty
		p.dirtiedAt = time.Now()
		p.m.ndirty.Add(1)
		c := p.m.c
		c.mu.Lock()
		c.dirty++
		c.mu.Unlock()
		p.removeLRULocked()
	}
}

// StartWriteback clears the dirty bit and sets writeback: the caller is
// about to write the page's valid bytes. It returns false if the page was
// not dirty.
//
// Preconditions: the page is locked.
func (p *Page) StartWriteback() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flags&flagDirty == 0 {
		return false
	}
	p.flags = p.flags&^flagDirty | flagWriteback
	p.m.nwriteback.Add(1) // before ndirty drops: see HasDirty
	p.m.ndirty.Add(-1)
	c := p.m.c
	c.mu.Lock()
	c.dirty--
	c.roomCond.Broadcast()
	c.mu.Unlock()
	return true
}

// EndWriteback ends a writeback. After a failure the page is dirty again
// (its data must not be forgotten or reported durable: the fsyncgate
// lesson) and the error is kept in the mapping for the next Fsync.
// It does not need the page lock.
func (p *Page) EndWriteback(err error) {
	c := p.m.c
	p.mu.Lock()
	// Dirty again before the writeback count drops, so that HasDirty's
	// counters never both read zero for this page on the way.
	if err != nil && p.flags&flagDirty == 0 && !p.removed {
		p.flags |= flagDirty
		p.m.ndirty.Add(1)
		c.mu.Lock()
		c.dirty++
		c.mu.Unlock()
	}
	if p.flags&flagWriteback != 0 {
		p.flags &^= flagWriteback
		p.m.nwriteback.Add(-1)
	}
	p.maybeLRULocked()
	wws := p.wbWaiters
	p.wbWaiters = nil
	p.mu.Unlock()
	for _, ch := range wws {
		close(ch)
	}
	if err != nil {
		p.m.setError(err)
	}
	c.mu.Lock()
	c.roomCond.Broadcast()
	c.mu.Unlock()
}

// DirtiedAt returns when the page last became dirty.
func (p *Page) DirtiedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dirtiedAt
}

// maybeLRULocked puts the page at the back of the LRU if it is evictable.
//
// Preconditions: p.mu is held.
func (p *Page) maybeLRULocked() {
	if p.removed || p.refs > 0 || p.flags&(flagLocked|flagDirty|flagWriteback) != 0 {
		return
	}
	c := p.m.c
	c.mu.Lock()
	if p.onLRU {
		c.lru.moveToBack(p)
	} else {
		c.lru.pushBack(p)
	}
	c.roomCond.Broadcast()
	c.mu.Unlock()
}

// removeLRULocked takes the page off the LRU.
//
// Preconditions: p.mu is held.
func (p *Page) removeLRULocked() {
	c := p.m.c
	c.mu.Lock()
	if p.onLRU {
		c.lru.remove(p)
	}
	c.mu.Unlock()
}

// WaitWriteback blocks until no writeback of the page is in flight.
func (p *Page) WaitWriteback() {
	// The writeback's completion takes the inode's mutex, never the page
	// lock: a page lock may be held across this wait.
	lockrank.Wait(lockrank.RankInodeMu, 0, nil)
	for {
		p.mu.Lock()
		if p.flags&flagWriteback == 0 {
			p.mu.Unlock()
			return
		}
		ch := make(chan struct{})
		p.wbWaiters = append(p.wbWaiters, ch)
		p.mu.Unlock()
		<-ch
	}
}

// SetDropBehind marks the page as brought in or dirtied by uncached I/O
// (RWF_DONTCACHE): whoever sees it clean drops it (the kernel's
// PG_dropbehind). Set by the page's creator.
func (p *Page) SetDropBehind() { p.dropBehind.Store(true) }

// ClearDropBehind keeps the page cached: a cached access found it.
func (p *Page) ClearDropBehind() { p.dropBehind.Store(false) }

// DropBehind reports whether the page is to be dropped once clean. One
// atomic load, so cached accesses can check it on every page.
func (p *Page) DropBehind() bool { return p.dropBehind.Load() }
