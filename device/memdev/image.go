package memdev

import (
	"sync"
	"sync/atomic"
)

// The sparse image: a two-level table of 64 KiB chunks, allocated on first
// write. Lookups are lock-free (atomic pointers); a chunk's bytes are guarded
// by the chunk's own lock.
const (
	chunkShift = 16
	chunkSize  = 1 << chunkShift
	groupShift = 10 // chunks per group: 1024 (64 MiB of device)
	groupSize  = 1 << groupShift
)

// chunk holds 64 KiB of the device.
type chunk struct {
	// mu guards data. Writers hold it exclusively, readers shared.
	mu   sync.RWMutex
	data [chunkSize]byte
}

// group is the second level of the table.
type group [groupSize]atomic.Pointer[chunk]

// image is a sparse byte array of a fixed size. Every method is safe for
// concurrent use; an absent chunk reads as zeros.
type image struct {
	// groups is immutable in length; its entries are set at most once, from
	// nil to a group, with compare-and-swap.
	groups []atomic.Pointer[group]
}

func newImage(size int64) *image {
	nchunks := (size + chunkSize - 1) >> chunkShift
	return &image{groups: make([]atomic.Pointer[group], (nchunks+groupSize-1)>>groupShift)}
}

// chunk returns chunk i, allocating it (and its group) if create is set;
// without create it returns nil for a chunk never written.
func (im *image) chunk(i int64, create bool) *chunk {
	gp := &im.groups[i>>groupShift]
	g := gp.Load()
	if g == nil {
		if !create {
			return nil
		}
		gp.CompareAndSwap(nil, new(group))
		g = gp.Load()
	}
	cp := &g[i&(groupSize-1)]
	c := cp.Load()
	if c == nil {
		if !create {
			return nil
		}
		cp.CompareAndSwap(nil, new(chunk))
		c = cp.Load()
	}
	return c
}

// readAt copies len(p) bytes at off into p, one chunk at a time.
func (im *image) readAt(p []byte, off int64) {
	for len(p) > 0 {
		i, in := off>>chunkShift, int(off&(chunkSize-1))
		n := min(len(p), chunkSize-in)
		if c := im.chunk(i, false); c != nil {
			c.mu.RLock()
			copy(p[:n], c.data[in:])
			c.mu.RUnlock()
		} else {
			clear(p[:n])
		}
		p, off = p[n:], off+int64(n)
	}
}

// writeAt copies p into the image at off. It holds the locks of every chunk
// it touches, taken in ascending order, for the whole copy, and calls
// underLocks (if not nil) before releasing them: two overlapping writeAt
// calls are therefore ordered as wholes, and underLocks observes that order.
func (im *image) writeAt(p []byte, off int64, underLocks func()) {
	first, last := off>>chunkShift, (off+int64(len(p))-1)>>chunkShift
	if first == last {
		// The common case, without the slice.
		c := im.chunk(first, true)
		c.mu.Lock()
		copy(c.data[off&(chunkSize-1):], p)
		if underLocks != nil {
			underLocks()
		}
		c.mu.Unlock()
		return
	}
	cs := make([]*chunk, 0, last-first+1)
	for i := first; i <= last; i++ {
		c := im.chunk(i, true)
		c.mu.Lock()
		cs = append(cs, c)
	}
	q, in := p, int(off&(chunkSize-1))
	for _, c := range cs {
		n := copy(c.data[in:], q)
		q, in = q[n:], 0
	}
	if underLocks != nil {
		underLocks()
	}
	for _, c := range cs {
		c.mu.Unlock()
	}
}

// clone returns a deep copy of im. Concurrent writes to im may or may not be
// reflected, chunk by chunk.
func (im *image) clone() *image {
	out := &image{groups: make([]atomic.Pointer[group], len(im.groups))}
	for gi := range im.groups {
		g := im.groups[gi].Load()
		if g == nil {
			continue
		}
		ng := new(group)
		for ci := range g {
			c := g[ci].Load()
			if c == nil {
				continue
			}
			nc := new(chunk)
			c.mu.RLock()
			nc.data = c.data
			c.mu.RUnlock()
			ng[ci].Store(nc)
		}
		out.groups[gi].Store(ng)
	}
	return out
}

// allocated returns the number of bytes of chunk storage in use.
func (im *image) allocated() int64 {
	var n int64
	for gi := range im.groups {
		g := im.groups[gi].Load()
		if g == nil {
			continue
		}
		for ci := range g {
			if g[ci].Load() != nil {
				n += chunkSize
			}
		}
	}
	return n
}
