package ring

import (
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
)

// Stats is a snapshot of a ring's counters (Ring.Stats). Counts are since
// New or the last ResetStats; Peak values are the largest current value
// seen since then. Each field is read atomically, but not all at the same
// instant: a snapshot is exact only when the ring is quiescent or the test
// has pinned its operations (at a device gate, say).
type Stats struct {
	// Submitted counts operations accepted by Submit.
	Submitted int64
	// Completed counts completions posted (to the queue or the callback).
	Completed int64
	// Inline counts operations completed by an inline attempt (the first
	// one, or an async-read retry) without waiting for anything.
	Inline int64
	// Queued counts inline attempts that submitted device I/O and
	// completed later from the device's completion, without a worker.
	Queued int64
	// Punts counts operations handed to the worker pool: those that would
	// have blocked, those with no non-blocking form (Fsync, Fdatasync,
	// Fallocate, Truncate) and forced ones.
	Punts int64
	// ForcedPunts counts the punts made by Options.ForceAsync or SQE.Async.
	ForcedPunts int64
	// HashedPunts counts punts serialised per inode (writes, fallocates
	// and truncates of files that do not take parallel direct writes).
	HashedPunts int64
	// HashedWaits counts hashed punts that queued behind an earlier
	// operation of the same inode's chain instead of starting a chain.
	HashedWaits int64
	// NoWaitEAGAIN counts EAGAIN completions of operations whose caller
	// asked for RWFNoWait (never punted).
	NoWaitEAGAIN int64
	// RetriesArmed counts async buffered reads parked on a page's unlock
	// (sluice.ErrRetryArmed).
	RetriesArmed int64
	// RetriesFired counts those callbacks that fired and queued the
	// read's re-issue in the completion context.
	RetriesFired int64
	// Canceled counts operations completed with ErrCanceled by Abort.
	Canceled int64
	// RingFull counts Submit calls refused with ErrRingFull.
	RingFull int64
	// Workers is the number of pool workers started (they stay until
	// Close); WorkersPeak the most at once.
	Workers, WorkersPeak int64
	// WorkersBusy counts workers running punted work (one operation or one
	// chain); WorkersBusyPeak the most at once.
	WorkersBusy, WorkersBusyPeak int64
	// WorkersBlocked counts workers inside a blocking engine call now (a
	// worker waiting on a page, a lock, a drain or its device I/O);
	// WorkersBlockedPeak the most at once.
	WorkersBlocked, WorkersBlockedPeak int64
}

// String renders the non-zero counters on one line.
func (s Stats) String() string {
	var b strings.Builder
	v := reflect.ValueOf(s)
	for i := 0; i < v.NumField(); i++ {
		if n := v.Field(i).Int(); n != 0 {
			fmt.Fprintf(&b, "%s=%d ", v.Type().Field(i).Name, n)
		}
	}
	return strings.TrimSpace(b.String())
}

// counters are the live counters behind Stats: atomics updated on the I/O
// path, no locks.
type counters struct {
	submitted, completed, inline, queued atomic.Int64
	punts, forcedPunts, hashedPunts      atomic.Int64
	hashedWaits, noWaitEAGAIN            atomic.Int64
	retriesArmed, retriesFired           atomic.Int64
	canceled, ringFull                   atomic.Int64
	workers, workersPeak                 atomic.Int64
	workersBusy, workersBusyPeak         atomic.Int64
	workersBlocked, workersBlockedPeak   atomic.Int64
	_                                    [64]byte
}

func (c *counters) snapshot() Stats {
	return Stats{
		Submitted:          c.submitted.Load(),
		Completed:          c.completed.Load(),
		Inline:             c.inline.Load(),
		Queued:             c.queued.Load(),
		Punts:              c.punts.Load(),
		ForcedPunts:        c.forcedPunts.Load(),
		HashedPunts:        c.hashedPunts.Load(),
		HashedWaits:        c.hashedWaits.Load(),
		NoWaitEAGAIN:       c.noWaitEAGAIN.Load(),
		RetriesArmed:       c.retriesArmed.Load(),
		RetriesFired:       c.retriesFired.Load(),
		Canceled:           c.canceled.Load(),
		RingFull:           c.ringFull.Load(),
		Workers:            c.workers.Load(),
		WorkersPeak:        c.workersPeak.Load(),
		WorkersBusy:        c.workersBusy.Load(),
		WorkersBusyPeak:    c.workersBusyPeak.Load(),
		WorkersBlocked:     c.workersBlocked.Load(),
		WorkersBlockedPeak: c.workersBlockedPeak.Load(),
	}
}

// reset zeroes the counts and sets each peak to the current value.
func (c *counters) reset() {
	for _, a := range []*atomic.Int64{&c.submitted, &c.completed, &c.inline, &c.queued,
		&c.punts, &c.forcedPunts, &c.hashedPunts, &c.hashedWaits, &c.noWaitEAGAIN,
		&c.retriesArmed, &c.retriesFired, &c.canceled, &c.ringFull} {
		a.Store(0)
	}
	c.workersPeak.Store(c.workers.Load())
	c.workersBusyPeak.Store(c.workersBusy.Load())
	c.workersBlockedPeak.Store(c.workersBlocked.Load())
}

// gaugeAdd adds d to a current value and raises its peak.
func gaugeAdd(cur, peak *atomic.Int64, d int64) {
	v := cur.Add(d)
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}
