// Package pagecache is sluice's page cache: per-file pages of file data in
// bounded memory, with the page states and waiters that buffered I/O, the
// read-before-write rule (seed 004) and async buffered reads (seed 003)
// are built on. It does no I/O itself: the engine reads pages in and writes
// them back, and drives eviction pressure and writeback through the hooks
// here.
//
// # Pages and their states
//
// A Page caches PageSize bytes of one file at index i (bytes [i*PageSize,
// (i+1)*PageSize)). Its state bits:
//
//	uptodate   every byte of Data is the file's current content
//	locked     someone owns the page: I/O into it is in flight, or a writer
//	           is changing it; others wait (or arm a callback) for unlock
//	dirty      some bytes are newer than the device; written back later
//	writeback  a writeback of the page is in flight (the page is unlocked)
//	partial    not uptodate, but a write is pending on [ValidFrom, ValidTo):
//	           those bytes are valid and dirty, the rest were never read
//	removed    truncated or invalidated: no longer in its mapping
//
// Uptodate pages are read without the lock. A page is locked to read it in,
// to change its bytes or state, and to remove it.
//
// # Waiters
//
// Waiting for a page's unlock is either blocking (Lock, WaitUnlocked) or a
// callback (LockAsync): the callback is queued before the trylock, under the
// page's mutex, so an unlock between the two is never lost (the kernel's
// __folio_lock_async). Waiters are per page, so a wake-up for another page
// never reaches them. A callback does not inherit the lock: it re-issues
// the whole operation, which looks the page up again (so a page removed
// meanwhile is simply not found) and finds a read error in Err instead of
// looping.
//
// # Memory
//
// The cache holds at most CapacityBytes of page data (page buffers come
// from a free list, carved out of aligned slabs, and never exceed the
// capacity). Until it reaches its capacity the cache grows ahead of its
// creators: a goroutine makes the next slab, its memory prefaulted, off
// the cache's lock, while the free list still holds half a slab. A new page evicts the least recently used clean, unlocked,
// unreferenced page when the cache is full; when every page is dirty,
// locked or referenced, the creator waits (after kicking the engine's
// flusher) until one becomes evictable. Writers call ThrottleDirty, which
// waits while dirty pages exceed DirtyRatio of the capacity.
//
// # Lock order
//
//	Page lock (a state bit; may be held across I/O)
//	  Mapping.mu
//	    Page.mu (state and waiters)
//	      Cache.mu (LRU, counts)
//
// Eviction takes a page off the LRU under Cache.mu, lets go of it, then
// takes the page's Mapping.mu and Page.mu (and Cache.mu again) in order.
package pagecache

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// ErrClosed is returned by operations on a closed cache.
var ErrClosed = errors.New("page cache closed")

// Options configures a Cache.
type Options struct {
	// CapacityBytes caps the page data held. The default value is 256 MiB.
	CapacityBytes int64
	// PageSize is the size of a page: a power of two from 512 B. The
	// default value is 4096.
	PageSize int
	// DirtyRatio is the fraction of the capacity that may be dirty before
	// ThrottleDirty makes writers wait. The default value is 0.5.
	DirtyRatio float64
}

// Cache is the page cache shared by every file of a file system.
type Cache struct {
	pageSize  int
	maxPages  int64
	maxDirty  int64
	slabPages int

	mu lockrank.Mutex[lockrank.Cache]
	// Protected by mu.
	lru      lruList  // clean, unlocked, unreferenced pages; front = oldest
	free     [][]byte // page buffers ready for reuse
	buffers  int64    // page buffers in existence (free or in use)
	pages    int64    // pages in mappings
	dirty    int64    // dirty (or partial) pages
	locked   int64    // locked pages (I/O or change in progress)
	mappings map[*Mapping]struct{}
	closed   bool
	// growing says that a slab is being made off the lock (growAhead);
	// its buffers are counted in buffers already.
	growing  bool
	roomCond sync.Cond // signalled when a page may have become evictable, dirty fell or a slab was added

	kick chan struct{}

	stats struct {
		evictions, throttles, roomWaits, created, removed atomic.Int64
	}
}

// New returns an empty cache.
func New(o Options) *Cache {
	if o.CapacityBytes == 0 {
		o.CapacityBytes = 256 << 20
	}
	if o.PageSize == 0 {
		o.PageSize = 4096
	}
	if o.DirtyRatio == 0 {
		o.DirtyRatio = 0.5
	}
	c := &Cache{
		pageSize: o.PageSize,
		maxPages: max(o.CapacityBytes/int64(o.PageSize), 16),
		kick:     make(chan struct{}, 1),
		mappings: map[*Mapping]struct{}{},
	}
	c.maxDirty = max(int64(float64(c.maxPages)*o.DirtyRatio), 1)
	c.slabPages = max(1, min(64, int(c.maxPages/16)))
	c.roomCond.L = &c.mu
	return c
}

// PageSize returns the page size.
func (c *Cache) PageSize() int { return c.pageSize }

// Close wakes every waiter; later page creations fail with ErrClosed.
func (c *Cache) Close() {
	c.mu.Lock()
	c.closed = true
	c.roomCond.Broadcast()
	c.mu.Unlock()
}

// Kick returns the channel the cache signals when the engine's flusher
// should write back: dirty pages over the limit, or no room for a new page.
func (c *Cache) Kick() <-chan struct{} { return c.kick }

func (c *Cache) kickFlusher() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Stats is a snapshot of the cache's counters.
type Stats struct {
	Pages, DirtyPages, LockedPages, Buffers, CapacityPages int64
	Bytes                                                  int64
	Evictions, Throttles, RoomWaits, Created, Removed      int64
}

// Values returns the stats by name, for metrics.
func (s Stats) Values() map[string]int64 {
	return map[string]int64{
		"Pages": s.Pages, "DirtyPages": s.DirtyPages, "LockedPages": s.LockedPages,
		"Bytes": s.Bytes, "Buffers": s.Buffers, "CapacityPages": s.CapacityPages,
		"Evictions": s.Evictions, "Throttles": s.Throttles, "RoomWaits": s.RoomWaits,
		"PagesCreated": s.Created, "PagesRemoved": s.Removed,
	}
}

// Stats returns the current counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Pages: c.pages, DirtyPages: c.dirty, LockedPages: c.locked, Buffers: c.buffers,
		CapacityPages: c.maxPages, Bytes: c.pages * int64(c.pageSize),
		Evictions: c.stats.evictions.Load(), Throttles: c.stats.throttles.Load(),
		RoomWaits: c.stats.roomWaits.Load(), Created: c.stats.created.Load(), Removed: c.stats.removed.Load(),
	}
}

// OverDirtyLimit reports whether dirty pages exceed the dirty limit.
func (c *Cache) OverDirtyLimit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dirty > c.maxDirty
}

// ThrottleDirty makes a writer wait while dirty pages exceed the limit,
// kicking the flusher (balance_dirty_pages). It returns at once when the
// cache is below the limit.
func (c *Cache) ThrottleDirty() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty <= c.maxDirty {
		return
	}
	c.stats.throttles.Add(1)
	// Throttling is best effort: if writeback makes no headway (a failing
	// device keeps pages dirty), the writer goes on after a while rather
	// than hang.
	deadline := time.Now().Add(throttleLimit)
	for c.dirty > c.maxDirty && !c.closed && time.Now().Before(deadline) {
		c.kickFlusher()
		c.waitRoomLocked()
	}
}

// throttleLimit bounds one ThrottleDirty wait, and roomLimit one wait for
// room for a new page.
const (
	throttleLimit = 5 * time.Second
	roomLimit     = 30 * time.Second
)

// waitRoomLocked waits for a state change that may make room, with a
// timeout so that a missed kick cannot hang a writer.
//
// Preconditions: c.mu is held.
func (c *Cache) waitRoomLocked() {
	t := time.AfterFunc(100*time.Millisecond, func() {
		c.mu.Lock()
		c.roomCond.Broadcast()
		c.mu.Unlock()
	})
	c.roomCond.Wait()
	t.Stop()
}

// DirtyMappings returns the mappings that hold dirty pages, oldest first
// dirtied first.
func (c *Cache) DirtyMappings() []*Mapping {
	c.mu.Lock()
	var out []*Mapping
	for m := range c.mappings {
		out = append(out, m)
	}
	c.mu.Unlock()
	var dirty []*Mapping
	for _, m := range out {
		if m.DirtyCount() > 0 {
			dirty = append(dirty, m)
		}
	}
	sort.Slice(dirty, func(i, j int) bool { return dirty[i].OldestDirty().Before(dirty[j].OldestDirty()) })
	return dirty
}

// takeFreeLocked returns a free page buffer, growing the cache by a slab
// if it may, when a new page fits without evicting one; ok is false
// otherwise (or once the cache is closed, which getBuffer reports).
//
// Preconditions: c.mu is held.
func (c *Cache) takeFreeLocked() (buf []byte, ok bool) {
	if c.closed || c.pages >= c.maxPages {
		return nil, false
	}
	if len(c.free) == 0 {
		if c.buffers >= c.maxPages {
			return nil, false
		}
		c.growLocked()
	}
	return c.popFreeLocked(), true
}

// popFreeLocked takes a buffer off the free list, which is not empty, and
// starts making the next slab (growAhead) when the list runs low and the
// cache may still grow, so that creators seldom make one themselves.
//
// Preconditions: c.mu is held.
func (c *Cache) popFreeLocked() []byte {
	n := len(c.free)
	buf := c.free[n-1]
	c.free = c.free[:n-1]
	if n-1 <= c.slabPages/2 && !c.growing && c.buffers < c.maxPages && !c.closed {
		k := min(int64(c.slabPages), c.maxPages-c.buffers)
		c.buffers += k
		c.growing = true
		go c.growAhead(k)
	}
	return buf
}

// getBuffer returns a page buffer, evicting a clean page or waiting for
// room when the cache is full.
func (c *Cache) getBuffer(nowait bool) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	waited := false
	var deadline time.Time
	for {
		if c.closed {
			return nil, ErrClosed
		}
		if len(c.free) > 0 && c.pages < c.maxPages {
			return c.popFreeLocked(), nil
		}
		if c.pages < c.maxPages && c.buffers < c.maxPages {
			c.growLocked()
			continue
		}
		if p := c.lru.head; p != nil {
			// Evict the least recently used page. Its mapping's lock
			// comes before c.mu, so let go of c.mu to take it.
			c.lru.remove(p)
			c.mu.Unlock()
			c.tryEvict(p)
			c.mu.Lock()
			continue
		}
		if c.growing && c.pages < c.maxPages {
			// The room left is the slab being made: wait for it, even
			// with nowait (an allocation, not I/O).
			c.roomCond.Wait()
			continue
		}
		if nowait {
			return nil, errNoRoom
		}
		if !waited {
			c.stats.roomWaits.Add(1)
			waited = true
			deadline = time.Now().Add(roomLimit)
		} else if time.Now().After(deadline) {
			// Every page is dirty and writeback keeps failing.
			return nil, errNoRoom
		}
		c.kickFlusher()
		c.waitRoomLocked()
	}
}

// errNoRoom is returned to nowait creators when the cache is full of pages
// that cannot be evicted, and to others when that lasts (writeback keeps
// failing).
var errNoRoom = errors.New("page cache full of pages that cannot be evicted")

// ErrNoRoom is errNoRoom, for callers that test for it.
var ErrNoRoom = errNoRoom

// growLocked allocates a slab of page buffers, under c.mu: a creator that
// found the free list empty (growAhead did not keep up). Its memory
// faults in at first use.
//
// Preconditions: c.mu is held.
func (c *Cache) growLocked() {
	n := min(int64(c.slabPages), c.maxPages-c.buffers)
	c.free = append(c.free, c.newSlab(n, false)...)
	c.buffers += n
}

// growAhead makes a slab of n page buffers, already counted in c.buffers,
// off the lock, with its memory prefaulted, and adds it to the free list:
// the cache grows ahead of its creators, and neither they nor the
// completions that take c.mu wait for the allocation.
func (c *Cache) growAhead(n int64) {
	bufs := c.newSlab(n, true)
	c.mu.Lock()
	c.free = append(c.free, bufs...)
	c.growing = false
	c.roomCond.Broadcast()
	c.mu.Unlock()
}

// newSlab allocates n page buffers, aligned for direct I/O, in one slab,
// and prefaults its memory if asked to.
func (c *Cache) newSlab(n int64, fault bool) [][]byte {
	ps := c.pageSize
	align := min(ps, 4096)
	raw := make([]byte, int(n)*ps+align)
	if fault {
		prefault(raw)
	}
	off := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & uintptr(align-1)); r != 0 {
		off = align - r
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		s := off + i*ps
		bufs[i] = raw[s : s+ps : s+ps]
	}
	return bufs
}

// prefault maps the memory of a new slab in with one
// madvise(MADV_POPULATE_WRITE) (Linux 5.14) rather than one page fault per
// page when the page is first used (the device's read into it), which a
// cold read into fresh memory pays: on a 2-CPU VM 3.2 us per 4 KiB page
// faulted at a first touch, 1 us populated. Best effort: on an older
// kernel (EINVAL) the pages fault at first use.
func prefault(b []byte) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mask := uintptr(os.Getpagesize() - 1)
	lo := (base + mask) &^ mask
	hi := (base + uintptr(len(b))) &^ mask
	if hi > lo {
		_ = unix.Madvise(b[lo-base:hi-base], unix.MADV_POPULATE_WRITE)
	}
}

// tryEvict drops page p, taken off the LRU by the caller, if it is still
// evictable: clean, unlocked, unreferenced. A page that is not stays off
// the LRU until its next unlock or release puts it back.
func (c *Cache) tryEvict(p *Page) {
	m := p.m
	m.mu.Lock()
	defer m.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed || p.refs > 0 || p.flags&(flagLocked|flagDirty|flagWriteback) != 0 {
		return
	}
	p.removed = true
	if m.pages[p.Index] == p {
		delete(m.pages, p.Index)
		m.npages.Add(-1)
	}
	c.mu.Lock()
	if p.onLRU { // put back by a release that raced the caller
		c.lru.remove(p)
	}
	c.pages--
	c.free = append(c.free, p.Data)
	c.roomCond.Broadcast()
	c.mu.Unlock()
	p.Data = nil
	c.stats.removed.Add(1)
	c.stats.evictions.Add(1)
}

// String describes the cache briefly.
func (c *Cache) String() string {
	s := c.Stats()
	return fmt.Sprintf("pagecache{pages %d/%d dirty %d locked %d}", s.Pages, s.CapacityPages, s.DirtyPages, s.LockedPages)
}

// lruList is the cache's LRU: a doubly linked list of pages, oldest first,
// linked through the pages themselves (Page.lruPrev, lruNext), so that
// putting a page on it allocates nothing. Protected by Cache.mu.
type lruList struct {
	head, tail *Page
}

// pushBack puts p, which is not on the list, at its back.
func (l *lruList) pushBack(p *Page) {
	p.lruPrev, p.lruNext, p.onLRU = l.tail, nil, true
	if l.tail != nil {
		l.tail.lruNext = p
	} else {
		l.head = p
	}
	l.tail = p
}

// remove takes p, which is on the list, off it.
func (l *lruList) remove(p *Page) {
	if p.lruPrev != nil {
		p.lruPrev.lruNext = p.lruNext
	} else {
		l.head = p.lruNext
	}
	if p.lruNext != nil {
		p.lruNext.lruPrev = p.lruPrev
	} else {
		l.tail = p.lruPrev
	}
	p.lruPrev, p.lruNext, p.onLRU = nil, nil, false
}

// moveToBack moves p, which is on the list, to its back.
func (l *lruList) moveToBack(p *Page) {
	if l.tail != p {
		l.remove(p)
		l.pushBack(p)
	}
}
