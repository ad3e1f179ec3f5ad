package etcdkv

import (
	"bytes"
	"slices"
	"sync"

	"github.com/google/btree"
)

// readCache keeps what KV.Get and KV.Scan read from etcd and what this KV's
// commits wrote, while the KV owns the volume (see "Read cache" in the
// package doc): the owner is the prefix's only writer, so an entry stays
// the key's value until one of the owner's own commits, which updates it,
// and a range read whole stays complete (every key in it is cached).
type readCache struct {
	mu sync.Mutex
	// Protected by mu.
	on bool
	// gen counts the times the cache was emptied, wholly or to make room:
	// a fill whose read started in an earlier generation is dropped, since
	// what it read may be older than a commit whose entry is gone.
	gen uint64
	// entries are the cached keys (etcd keys), in order.
	entries *btree.BTreeG[cacheEntry]
	// complete are the etcd key ranges every key of which is in entries
	// (absent keys need not be): disjoint, ordered by from.
	complete *btree.BTreeG[keyRange]
	// high is the revision of the owner's last commit written through (0:
	// none since the cache was enabled): the cache holds every key it
	// holds as it is at high or later, as no one else writes.
	high int64
	// pending are the etcd keys, sorted, of the owner's commit in flight
	// (sent, not yet written through; owned commits go one at a time):
	// etcd may hold the commit already, so the cache serves none of them,
	// lest a read of one from memory follow a read from etcd that saw the
	// commit.
	pending []string
	max     int // Immutable after Open; 0: no cache.
}

// cacheEntry is a key's value as of etcd revision rev; a nil value says
// the key is absent.
type cacheEntry struct {
	key   string
	value []byte
	rev   int64
}

func newEntries() *btree.BTreeG[cacheEntry] {
	return btree.NewG(32, func(a, b cacheEntry) bool { return a.key < b.key })
}

func newRanges() *btree.BTreeG[keyRange] {
	return btree.NewG(32, func(a, b keyRange) bool { return a.from < b.from })
}

// enable empties the cache and starts serving from it.
func (c *readCache) enable() {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	c.on, c.gen, c.entries, c.complete, c.high = true, c.gen+1, newEntries(), newRanges(), 0
	c.mu.Unlock()
}

// disable empties the cache and stops serving from it (the volume is no
// longer owned, or a commit's outcome is unknown).
func (c *readCache) disable() {
	c.mu.Lock()
	c.on, c.gen, c.entries, c.complete = false, c.gen+1, nil, nil
	c.mu.Unlock()
}

// get returns the cached value of key (nil: absent) and whether the cache
// knows it, and the generation to fill with on a miss.
func (c *readCache) get(key string) (value []byte, hit bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return nil, false, c.gen
	}
	if c.pendingLocked(key, key+"\x00") {
		return nil, false, c.gen
	}
	if e, ok := c.entries.Get(cacheEntry{key: key}); ok {
		return bytes.Clone(e.value), true, c.gen
	}
	return nil, c.completeLocked(key, key+"\x00"), c.gen
}

// pendingLocked reports whether a key of the commit in flight lies in
// [from, to).
//
// Preconditions: c.mu is held.
func (c *readCache) pendingLocked(from, to string) bool {
	i, _ := slices.BinarySearch(c.pending, from)
	return i < len(c.pending) && c.pending[i] < to
}

// begin marks the etcd keys of the owner's commit about to be sent as
// pending, until end.
func (c *readCache) begin(keys []string) {
	c.mu.Lock()
	c.pending = keys
	c.mu.Unlock()
}

// end clears the pending keys: the commit was written through, failed, or
// emptied the cache.
func (c *readCache) end() {
	c.mu.Lock()
	c.pending = nil
	c.mu.Unlock()
}

// scan returns the present entries of [from, to) if the range is complete
// (values copied); otherwise whether the cache is on and the generation to
// fill with.
func (c *readCache) scan(from, to string) (es []cacheEntry, hit, on bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on || c.pendingLocked(from, to) || !c.completeLocked(from, to) {
		return nil, false, c.on, c.gen
	}
	c.entries.AscendRange(cacheEntry{key: from}, cacheEntry{key: to}, func(e cacheEntry) bool {
		if e.value != nil {
			es = append(es, cacheEntry{key: e.key, value: bytes.Clone(e.value), rev: e.rev})
		}
		return true
	})
	return es, true, true, c.gen
}

// completeLocked reports whether [from, to) lies in one complete range.
//
// Preconditions: c.mu is held.
func (c *readCache) completeLocked(from, to string) bool {
	in := false
	c.complete.DescendLessOrEqual(keyRange{from: from}, func(r keyRange) bool {
		in = r.to >= to
		return false
	})
	return in
}

// fill records what a read of key at revision rev found (nil value: absent)
// unless the cache was emptied since generation gen or holds a newer
// state. A fill that finds the cache full empties it instead (a new
// generation) and records nothing.
func (c *readCache) fill(gen uint64, key string, value []byte, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on || c.gen != gen {
		return
	}
	if !c.roomLocked(key, 1) {
		return
	}
	c.fillLocked(key, value, rev)
}

// roomLocked reports whether n new keys (key among them, if it is cached
// already it needs no room) fit; if not, it empties the cache, starting a
// new generation, and returns false. Emptying it all, rather than some
// keys, keeps every complete range whole and every fill in flight
// (dropped by the new generation) from putting back a state older than
// a commit whose entry it took.
//
// Preconditions: c.mu is held, c.on.
func (c *readCache) roomLocked(key string, n int) bool {
	if n == 1 {
		if _, ok := c.entries.Get(cacheEntry{key: key}); ok {
			return true
		}
	}
	if c.entries.Len()+n <= c.max {
		return true
	}
	c.gen++
	c.entries, c.complete = newEntries(), newRanges()
	return false
}

// fillLocked records one key as fill does; the room is made.
//
// Preconditions: c.mu is held, c.on.
func (c *readCache) fillLocked(key string, value []byte, rev int64) {
	if e, ok := c.entries.Get(cacheEntry{key: key}); ok && e.rev >= rev {
		return
	}
	c.entries.ReplaceOrInsert(cacheEntry{key: key, value: value, rev: rev})
}

// fillRange records a whole read of [from, to) at revision rev, which
// found es: each key as fill does, and the range as complete. A key in it
// that a commit after rev wrote is cached already, with the newer state.
func (c *readCache) fillRange(gen uint64, from, to string, es []cacheEntry, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on || c.gen != gen {
		return
	}
	if !c.roomLocked("", len(es)+1) {
		return
	}
	// Keys cached as present but absent at rev, if not written since,
	// were deleted by a commit before rev, whose write-through made them
	// absent already: nothing to drop.
	for _, e := range es {
		c.fillLocked(e.key, e.value, rev)
	}
	if c.complete.Len() >= c.max {
		c.complete.Clear(false)
	}
	// Merge with the complete ranges it overlaps or touches.
	var drop []keyRange
	c.complete.DescendLessOrEqual(keyRange{from: from}, func(r keyRange) bool {
		if r.to >= from {
			drop = append(drop, r)
			from = min(from, r.from)
			to = max(to, r.to)
		}
		return false
	})
	c.complete.AscendGreaterOrEqual(keyRange{from: from}, func(r keyRange) bool {
		if r.from > to {
			return false
		}
		drop = append(drop, r)
		to = max(to, r.to)
		return true
	})
	for _, r := range drop {
		c.complete.Delete(r)
	}
	c.complete.ReplaceOrInsert(keyRange{from: from, to: to})
}

// knownEmpty records that no key in [from, to) exists as of the owner's
// last commit, as fillRange does for a read that found none
// (KV.KnownEmpty).
func (c *readCache) knownEmpty(from, to string) {
	c.mu.Lock()
	gen, on, high := c.gen, c.on, c.high
	c.mu.Unlock()
	if on && high != 0 {
		c.fillRange(gen, from, to, nil, high)
	}
}

// committed records the writes of a commit applied at revision rev: they
// are always written through, the cache emptied first if they do not fit.
func (c *readCache) committed(ws []write, prefix string, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.on {
		return
	}
	if !c.roomLocked("", len(ws)) {
		if len(ws) > c.max {
			return // emptied, and too many to keep
		}
	}
	for _, w := range ws {
		var v []byte
		if !w.del {
			v = w.value
			if v == nil {
				v = []byte{}
			}
		}
		c.entries.ReplaceOrInsert(cacheEntry{key: prefix + w.key, value: v, rev: rev})
	}
	c.high = max(c.high, rev)
}

// len returns the number of entries.
func (c *readCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		return 0
	}
	return c.entries.Len()
}
