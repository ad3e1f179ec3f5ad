package ring

import (
	"sync"

	"github.com/sluicefs/sluice"
)

// pool is the bounded worker pool that runs punted operations in blocking
// mode: the kernel's io-wq, with its hashed work.
//
// Hashing (io_wq_hash_work, io_get_next_work): the hashed punts of one
// inode form a chain. The first one starts the chain and puts it on the
// run queue; later ones append to it while it exists (a "hashed wait").
// One worker claims the chain from the run queue and runs its operations
// in order, one at a time, until it is empty; no other worker ever sees
// it. Unhashed punts are queued alone and run on any worker at once.
//
// Chains are keyed by the exact inode number (a map, not io-wq's 64
// buckets), so two inodes never share a chain, with one exception: files
// of two different file systems (sluice.FS values) submitted to the same
// ring that have the same inode number share one, because a File does not
// expose its FS. That only serialises them; see the package documentation
// on why hashing is an efficiency measure, not a correctness one.
type pool struct {
	r   *Ring
	max int // Immutable.

	mu sync.Mutex
	// work signals idle workers. L is &mu.
	work sync.Cond
	// Protected by mu.
	queue  []unit // the run queue, from qhead
	qhead  int
	chains map[sluice.Ino]*chain
	spare  *chain // recycled chains
	// workers counts the worker goroutines started and not exited.
	workers int
	// idle counts workers waiting on work and not yet signalled.
	idle     int
	stopped  bool
	aborting bool

	exited sync.WaitGroup
}

// unit is one entry of the run queue: a lone operation or a chain.
type unit struct {
	q *request
	c *chain
}

// chain is the queue of one inode's hashed punts.
type chain struct {
	ino        sluice.Ino
	head, tail *request
	next       *chain // in the spare list
}

func (p *pool) init(r *Ring, workers int) {
	p.r = r
	p.max = workers
	p.work.L = &p.mu
	p.chains = map[sluice.Ino]*chain{}
}

// enqueue queues q (on its inode's chain if hashed) and makes sure a
// worker will run it: an idle one is signalled, or, below the bound, a new
// one started. It returns false, queueing nothing, once Abort began.
func (p *pool) enqueue(q *request, hashed bool, ino sluice.Ino) bool {
	q.next = nil
	p.mu.Lock()
	if p.aborting {
		p.mu.Unlock()
		return false
	}
	if hashed {
		if c := p.chains[ino]; c != nil {
			// The chain is queued or being run: its worker will get
			// to q in order.
			if c.tail == nil {
				c.head = q
			} else {
				c.tail.next = q
			}
			c.tail = q
			q.flags |= CQEHashWaited
			p.mu.Unlock()
			p.r.stats.hashedWaits.Add(1)
			return true
		}
		c := p.spare
		if c != nil {
			p.spare = c.next
			c.next = nil
		} else {
			c = &chain{}
		}
		c.ino, c.head, c.tail = ino, q, q
		p.chains[ino] = c
		p.queue = append(p.queue, unit{c: c})
	} else {
		p.queue = append(p.queue, unit{q: q})
	}
	switch {
	case p.idle > 0:
		p.idle--
		p.work.Signal()
	case p.workers < p.max:
		p.workers++
		p.exited.Add(1)
		gaugeAdd(&p.r.stats.workers, &p.r.stats.workersPeak, 1)
		go p.worker()
	}
	p.mu.Unlock()
	return true
}

// popLocked takes the oldest unit of the run queue.
//
// Preconditions: p.mu is held.
func (p *pool) popLocked() (unit, bool) {
	if p.qhead == len(p.queue) {
		return unit{}, false
	}
	u := p.queue[p.qhead]
	p.queue[p.qhead] = unit{}
	p.qhead++
	switch {
	case p.qhead == len(p.queue):
		p.queue, p.qhead = p.queue[:0], 0
	case p.qhead >= 256 && p.qhead*2 >= len(p.queue):
		n := copy(p.queue, p.queue[p.qhead:])
		clear(p.queue[n:])
		p.queue, p.qhead = p.queue[:n], 0
	}
	return u, true
}

// worker runs units until the pool stops.
func (p *pool) worker() {
	defer p.exited.Done()
	st := &p.r.stats
	p.mu.Lock()
	for {
		u, ok := p.popLocked()
		if !ok {
			if p.stopped {
				p.workers--
				p.mu.Unlock()
				st.workers.Add(-1)
				return
			}
			p.idle++
			p.work.Wait()
			continue
		}
		p.mu.Unlock()
		gaugeAdd(&st.workersBusy, &st.workersBusyPeak, 1)
		if u.c != nil {
			p.runChain(u.c)
		} else {
			p.r.runBlocking(u.q)
		}
		st.workersBusy.Add(-1)
		p.mu.Lock()
	}
}

// runChain runs a claimed chain's operations in order until it is empty,
// then retires it (a later hashed punt of the inode starts a new one).
func (p *pool) runChain(c *chain) {
	for {
		p.mu.Lock()
		q := c.head
		if q == nil {
			delete(p.chains, c.ino)
			c.tail = nil
			c.next = p.spare
			p.spare = c
			p.mu.Unlock()
			return
		}
		c.head = q.next
		if c.head == nil {
			c.tail = nil
		}
		p.mu.Unlock()
		q.next = nil
		p.r.runBlocking(q)
	}
}

// cancelQueued stops accepting work and removes every operation not yet
// started: lone ones and unclaimed chains in the run queue, and the rest
// of every claimed chain. The caller completes them. A worker holding a
// chain finds it empty and retires it.
func (p *pool) cancelQueued() []*request {
	var out []*request
	take := func(c *chain) {
		for q := c.head; q != nil; {
			next := q.next
			q.next = nil
			out = append(out, q)
			q = next
		}
		c.head, c.tail = nil, nil
	}
	p.mu.Lock()
	p.aborting = true
	for {
		u, ok := p.popLocked()
		if !ok {
			break
		}
		if u.q != nil {
			out = append(out, u.q)
			continue
		}
		// An unclaimed chain: nobody else will retire it.
		take(u.c)
		delete(p.chains, u.c.ino)
		u.c.next = p.spare
		p.spare = u.c
	}
	for _, c := range p.chains {
		take(c)
	}
	p.mu.Unlock()
	return out
}

// stop makes the workers exit once the run queue is empty, and waits.
func (p *pool) stop() {
	p.mu.Lock()
	p.stopped = true
	p.idle = 0
	p.work.Broadcast()
	p.mu.Unlock()
	p.exited.Wait()
}
