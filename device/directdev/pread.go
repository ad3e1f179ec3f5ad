package directdev

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
)

// preadBackend is a bounded pool of workers issuing pread(2), pwrite(2) and
// fdatasync(2)/fsync(2), one request at a time each.
//
// Back-pressure: Submit waits while limit requests are queued, unless every
// worker is inside a Done callback. Such a Done may itself be the caller of
// Submit, and no worker would be left to drain the queue; the request is
// then queued beyond the limit.
type preadBackend struct {
	// Immutable after newPreadBackend.
	d       *Device
	workers int
	limit   int

	mu struct {
		sync.Mutex
		// queue is a FIFO: queue[head:] are waiting.
		queue []*device.Request
		head  int
		// inDone counts workers inside a Done callback.
		inDone int
		// spaceWaiters counts submitters waiting on space.
		spaceWaiters int
		closing      bool
	}
	// work is signalled when a request is queued or closing is set.
	work sync.Cond
	// space is signalled when a request leaves a full queue or every
	// worker is inside Done.
	space sync.Cond
	wg    sync.WaitGroup

	nRequests, nBlocked atomic.Uint64
}

func newPreadBackend(d *Device) *preadBackend {
	b := &preadBackend{d: d, workers: d.opts.PreadWorkers, limit: 2 * d.opts.PreadWorkers}
	b.work.L = &b.mu
	b.space.L = &b.mu
	b.mu.queue = make([]*device.Request, 0, b.limit)
	b.wg.Add(b.workers)
	for range b.workers {
		go b.worker()
	}
	return b
}

func (b *preadBackend) submit(r *device.Request) {
	b.mu.Lock()
	if b.queuedLocked() >= b.limit && b.mu.inDone < b.workers {
		b.nBlocked.Add(1)
		b.mu.spaceWaiters++
		for b.queuedLocked() >= b.limit && b.mu.inDone < b.workers {
			b.space.Wait()
		}
		b.mu.spaceWaiters--
	}
	b.mu.queue = append(b.mu.queue, r)
	b.mu.Unlock()
	b.work.Signal()
}

// queuedLocked returns the number of waiting requests.
//
// Preconditions: b.mu is held.
func (b *preadBackend) queuedLocked() int {
	return len(b.mu.queue) - b.mu.head
}

// popLocked removes and returns the oldest waiting request, or nil.
//
// Preconditions: b.mu is held.
func (b *preadBackend) popLocked() *device.Request {
	if b.mu.head == len(b.mu.queue) {
		return nil
	}
	r := b.mu.queue[b.mu.head]
	b.mu.queue[b.mu.head] = nil
	b.mu.head++
	if b.mu.head == len(b.mu.queue) {
		b.mu.queue, b.mu.head = b.mu.queue[:0], 0
	} else if b.mu.head >= cap(b.mu.queue)/2 {
		// Slide the live part down so the slice does not grow forever.
		n := copy(b.mu.queue, b.mu.queue[b.mu.head:])
		clear(b.mu.queue[n:])
		b.mu.queue, b.mu.head = b.mu.queue[:n], 0
	}
	if b.mu.spaceWaiters > 0 {
		b.space.Signal()
	}
	return r
}

func (b *preadBackend) worker() {
	defer b.wg.Done()
	b.mu.Lock()
	for {
		r := b.popLocked()
		if r == nil {
			if b.mu.closing {
				b.mu.Unlock()
				return
			}
			b.work.Wait()
			continue
		}
		b.mu.Unlock()

		err := b.do(r)

		b.mu.Lock()
		b.mu.inDone++
		if b.mu.inDone == b.workers && b.mu.spaceWaiters > 0 {
			b.space.Broadcast()
		}
		b.mu.Unlock()
		b.nRequests.Add(1)
		r.Done(r, err)
		b.mu.Lock()
		b.mu.inDone--
	}
}

// do performs r synchronously with the no-partial-results rule of resultOf.
func (b *preadBackend) do(r *device.Request) error {
	fd := b.d.fd
	done, retries := 0, 0
	for {
		var n int
		var err error
		switch r.Op {
		case device.OpRead:
			n, err = unix.Pread(fd, r.Buf[done:], r.Off+int64(done))
		case device.OpWrite:
			n, err = unix.Pwrite(fd, r.Buf[done:], r.Off+int64(done))
		case device.OpFlush:
			if b.d.blockDev {
				err = unix.Fsync(fd)
			} else {
				err = unix.Fdatasync(fd)
			}
		}
		res := int32(n)
		if errno, ok := err.(unix.Errno); ok {
			res = -int32(errno)
		}
		var more bool
		done, more, err = resultOf(r, done, res)
		if !more {
			return err
		}
		if err != nil {
			if retries++; retries > maxRetries {
				return err
			}
		}
	}
}

func (b *preadBackend) close() error {
	b.mu.Lock()
	b.mu.closing = true
	b.mu.Unlock()
	b.work.Broadcast()
	b.wg.Wait()
	return nil
}

func (b *preadBackend) stats(s *Stats) {
	s.Requests += b.nRequests.Load()
	s.Blocked += b.nBlocked.Load()
}
