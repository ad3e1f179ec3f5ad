package lockrank

import (
	"sync"
	"unsafe"
)

// Mutex is a sync.Mutex of rank R. The zero value is unlocked; it must not
// be copied after first use.
type Mutex[R Ranked] struct {
	mu sync.Mutex
}

// Lock locks m, checking the rank order first.
func (m *Mutex[R]) Lock() {
	if enabled {
		var r R
		Acquire(r.Rank(), 0, unsafe.Pointer(m))
	}
	m.mu.Lock()
}

// LockOrdered locks m as one of several locks of a multi rank held at once,
// taken in increasing key order (an inode number, a page index).
func (m *Mutex[R]) LockOrdered(key uint64) {
	if enabled {
		var r R
		Acquire(r.Rank(), key, unsafe.Pointer(m))
	}
	m.mu.Lock()
}

// TryLock locks m if it is unlocked and reports whether it did.
func (m *Mutex[R]) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	if enabled {
		var r R
		TryAcquired(r.Rank(), 0, unsafe.Pointer(m))
	}
	return true
}

// Unlock unlocks m.
func (m *Mutex[R]) Unlock() {
	if enabled {
		Release(unsafe.Pointer(m))
	}
	m.mu.Unlock()
}

// RWMutex is a sync.RWMutex of rank R. A goroutine may not hold it twice,
// in either mode (a recursive read lock deadlocks behind a waiting writer).
type RWMutex[R Ranked] struct {
	mu sync.RWMutex
}

// Lock locks rw for writing.
func (rw *RWMutex[R]) Lock() {
	if enabled {
		var r R
		Acquire(r.Rank(), 0, unsafe.Pointer(rw))
	}
	rw.mu.Lock()
}

// Unlock unlocks rw for writing.
func (rw *RWMutex[R]) Unlock() {
	if enabled {
		Release(unsafe.Pointer(rw))
	}
	rw.mu.Unlock()
}

// RLock locks rw for reading.
func (rw *RWMutex[R]) RLock() {
	if enabled {
		var r R
		Acquire(r.Rank(), 0, unsafe.Pointer(rw))
	}
	rw.mu.RLock()
}

// RUnlock undoes one RLock.
func (rw *RWMutex[R]) RUnlock() {
	if enabled {
		Release(unsafe.Pointer(rw))
	}
	rw.mu.RUnlock()
}
