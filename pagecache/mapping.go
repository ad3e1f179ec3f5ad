package pagecache

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// Mapping holds the cached pages of one file (the kernel's address_space).
type Mapping struct {
	c *Cache
	// Owner is the engine's object for the file. Immutable.
	Owner any

	mu lockrank.Mutex[lockrank.Mapping]
	// pages maps index to page. Protected by mu.
	pages map[uint64]*Page
	// wbErr is the first writeback error not yet reported. Protected by mu.
	wbErr error

	ndirty     atomic.Int64 // dirty pages
	nwriteback atomic.Int64 // pages under writeback, removed ones included
	npages     atomic.Int64 // len(pages), readable without mu
}

// NewMapping returns an empty mapping for a file.
func (c *Cache) NewMapping(owner any) *Mapping {
	m := &Mapping{c: c, Owner: owner, pages: map[uint64]*Page{}}
	c.mu.Lock()
	c.mappings[m] = struct{}{}
	c.mu.Unlock()
	return m
}

// Len returns the number of cached pages (without locking: a snapshot).
func (m *Mapping) Len() int { return int(m.npages.Load()) }

// DirtyCount returns the number of dirty pages.
func (m *Mapping) DirtyCount() int64 { return m.ndirty.Load() }

// Get returns page idx with a reference taken, or nil. Release it.
func (m *Mapping) Get(idx uint64) *Page {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pages[idx]
	if p != nil {
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
	}
	return p
}

// Ref takes one more reference on page p, which the caller holds one on
// (the kernel's folio_get): no lookup of the page table. Release it.
func (m *Mapping) Ref(p *Page) {
	p.mu.Lock()
	p.refs++
	p.mu.Unlock()
}

// GetOrCreate returns page idx with a reference taken. A page it creates
// is locked and not uptodate, and created is true: the caller fills it (or
// marks it) and unlocks it. Its Data holds arbitrary bytes (buffers are
// recycled between files without clearing, which would cost as much CPU as
// a cold read's other work): the caller writes every byte it marks valid,
// and every byte of a page it marks uptodate. When the cache is full it evicts, or waits for
// room; with nowait it fails with ErrNoRoom instead of waiting.
func (m *Mapping) GetOrCreate(idx uint64, nowait bool) (p *Page, created bool, err error) {
	c := m.c
	m.mu.Lock()
	if p := m.pages[idx]; p != nil {
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
		m.mu.Unlock()
		return p, false, nil
	}
	// A miss: while the cache has a free buffer or room to grow, take it
	// and insert the page in this critical section (one lookup of the
	// page table, no second one after getting the buffer).
	c.mu.Lock()
	buf, ok := c.takeFreeLocked()
	if ok {
		p = m.insertLocked(idx, buf)
		c.mu.Unlock()
		m.mu.Unlock()
		return m.created(p), true, nil
	}
	c.mu.Unlock()
	m.mu.Unlock()
	// Eviction or a wait for room: Cache.mu alone, then look again.
	buf, err = c.getBuffer(nowait)
	if err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	if p := m.pages[idx]; p != nil { // lost a race
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
		m.mu.Unlock()
		c.mu.Lock()
		c.free = append(c.free, buf)
		c.roomCond.Broadcast()
		c.mu.Unlock()
		return p, false, nil
	}
	c.mu.Lock()
	p = m.insertLocked(idx, buf)
	c.mu.Unlock()
	m.mu.Unlock()
	return m.created(p), true, nil
}

// insertLocked adds a new locked page idx, with one reference, over buf.
//
// Preconditions: m.mu and m.c.mu are held; idx is not in m.pages.
func (m *Mapping) insertLocked(idx uint64, buf []byte) *Page {
	p := &Page{m: m, Index: idx, Data: buf, refs: 1, flags: flagLocked}
	m.pages[idx] = p
	m.npages.Add(1)
	m.c.pages++
	m.c.locked++
	return p
}

// created finishes GetOrCreate's creation of p, after the locks.
func (m *Mapping) created(p *Page) *Page {
	p.tookWithoutWaiting()
	m.c.stats.created.Add(1)
	return p
}

// Release drops a reference from Get, GetOrCreate or Range.
func (m *Mapping) Release(p *Page) {
	p.mu.Lock()
	p.refs--
	if p.refs == 0 && p.removed && p.Data != nil {
		c := m.c
		buf := p.Data
		p.Data = nil
		c.mu.Lock()
		c.free = append(c.free, buf)
		c.roomCond.Broadcast()
		c.mu.Unlock()
	} else {
		p.maybeLRULocked()
	}
	p.mu.Unlock()
}

// Range returns the pages with index in [first, last], in index order,
// each with a reference taken.
func (m *Mapping) Range(first, last uint64) []*Page {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Page
	if last-first < uint64(len(m.pages)) {
		for i := first; ; i++ {
			if p := m.pages[i]; p != nil {
				out = append(out, p)
			}
			if i == last {
				break
			}
		}
	} else {
		for i, p := range m.pages {
			if i >= first && i <= last {
				out = append(out, p)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	}
	for _, p := range out {
		p.mu.Lock()
		p.refs++
		p.mu.Unlock()
	}
	return out
}

// ReleaseAll releases every page of ps.
func (m *Mapping) ReleaseAll(ps []*Page) {
	for _, p := range ps {
		m.Release(p)
	}
}

// Remove takes page p out of the mapping: later lookups miss it, and
// waiters that retry look it up again. Its dirty state is dropped (the
// caller wrote it back or no longer wants it).
//
// Preconditions: p is locked and referenced by the caller.
func (m *Mapping) Remove(p *Page) {
	m.mu.Lock()
	p.mu.Lock()
	if !p.removed {
		p.removed = true
		if m.pages[p.Index] == p {
			delete(m.pages, p.Index)
			m.npages.Add(-1)
		}
		c := m.c
		c.mu.Lock()
		c.pages--
		if p.flags&flagDirty != 0 {
			p.flags &^= flagDirty
			m.ndirty.Add(-1)
			c.dirty--
		}
		if p.onLRU {
			c.lru.remove(p)
		}
		c.roomCond.Broadcast()
		c.mu.Unlock()
		c.stats.removed.Add(1)
	}
	p.mu.Unlock()
	m.mu.Unlock()
}

// HasDirty reports whether any page in [first, last] is dirty or under
// writeback.
func (m *Mapping) HasDirty(first, last uint64) bool {
	// Without a lock: a page going from dirty to writeback is counted in
	// nwriteback before it leaves ndirty, and one going back to dirty (a
	// failed writeback) in ndirty before it leaves nwriteback, so reading
	// ndirty, nwriteback, ndirty sees a page that is dirty or under
	// writeback throughout the call even if it moves once between the two.
	// This is what a direct read finds on a file that nobody writes through
	// the cache: three atomic loads, no mutex, no walk of the pages.
	if m.ndirty.Load() == 0 && m.nwriteback.Load() == 0 && m.ndirty.Load() == 0 {
		return false
	}
	ps := m.Range(first, last)
	defer m.ReleaseAll(ps)
	for _, p := range ps {
		if p.has(flagDirty | flagWriteback) {
			return true
		}
	}
	return false
}

// OldestDirty returns when the longest-dirty page became dirty (zero time
// if none is).
func (m *Mapping) OldestDirty() time.Time {
	if m.ndirty.Load() == 0 {
		return time.Time{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var oldest time.Time
	for _, p := range m.pages {
		p.mu.Lock()
		if p.flags&flagDirty != 0 && (oldest.IsZero() || p.dirtiedAt.Before(oldest)) {
			oldest = p.dirtiedAt
		}
		p.mu.Unlock()
	}
	return oldest
}

// DirtyIndexes returns the indexes of dirty pages in [first, last], in
// order.
func (m *Mapping) DirtyIndexes(first, last uint64) []uint64 {
	if m.ndirty.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []uint64
	for i, p := range m.pages {
		if i < first || i > last {
			continue
		}
		p.mu.Lock()
		if p.flags&flagDirty != 0 {
			out = append(out, i)
		}
		p.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Evictable reports whether the mapping holds nothing that must be kept:
// no dirty, locked, under-writeback or referenced page.
func (m *Mapping) Evictable() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pages {
		p.mu.Lock()
		busy := p.refs > 0 || p.flags&(flagLocked|flagDirty|flagWriteback) != 0
		p.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// Drop removes every page (all clean and unreferenced: see Evictable) and
// forgets the mapping.
func (m *Mapping) Drop() {
	m.mu.Lock()
	c := m.c
	for i, p := range m.pages {
		p.mu.Lock()
		p.removed = true
		c.mu.Lock()
		if p.onLRU {
			c.lru.remove(p)
		}
		c.pages--
		if p.refs == 0 && p.Data != nil {
			c.free = append(c.free, p.Data)
			p.Data = nil
		}
		c.mu.Unlock()
		p.mu.Unlock()
		delete(m.pages, i)
		m.npages.Add(-1)
	}
	m.mu.Unlock()
	c.mu.Lock()
	delete(c.mappings, m)
	c.roomCond.Broadcast()
	c.mu.Unlock()
}

// setError records a writeback error for the next TakeError.
func (m *Mapping) setError(err error) {
	m.mu.Lock()
	if m.wbErr == nil {
		m.wbErr = err
	}
	m.mu.Unlock()
}

// TakeError returns and clears the first writeback error since the last
// call (what Fsync reports).
func (m *Mapping) TakeError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.wbErr
	m.wbErr = nil
	return err
}
