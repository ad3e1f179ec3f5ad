package iolock

import (
	"context"
	"log/slog"
	"math/bits"
	"runtime/debug"
	"sync/atomic"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// DIO counts the direct I/Os of one inode that have been submitted and not yet
// completed, analogous to the kernel's inode->i_dio_count with
// inode_dio_begin, inode_dio_end and inode_dio_wait.
//
// The engine calls Begin before submitting the first device I/O of a direct
// read or write and End in its completion, after unwritten-extent conversion
// and the size update and before any O_SYNC/O_DSYNC flush, the order of the
// kernel's iomap_dio_complete (->end_io, which is xfs_dio_write_end_io for
// XFS, then inode_dio_end, then generic_write_sync). Operations that change the file's size or layout
// (truncate, punch, fallocate, EOF zeroing, the exclusive sub-block write)
// call Wait while holding the inode's Lock Exclusive: Exclusive stops new
// submissions, and Wait lets the ones already submitted under an earlier
// Shared hold finish. Wait without Exclusive returns at some instant when the
// count was zero, which may no longer be true when it returns.
//
// Begin, End and InFlight are lock-free. The zero value has nothing in flight.
// A DIO must not be copied after first use.
type DIO struct {
	// n is the number of direct I/Os in flight. Never negative.
	n atomic.Int64
	// max is the high-water mark of n since the last ResetMax.
	max atomic.Int64
	// underflows counts End calls made with n already zero.
	underflows atomic.Uint64
	// waiting is set while a Wait may be blocked, so that the End that
	// brings n to zero knows to take mu. Written under mu.
	waiting atomic.Bool

	mu struct {
		lockrank.Mutex[lockrank.Leaf]
		// done is closed, and reset to nil, when n reaches zero while a
		// Wait is blocked. Protected by mu.
		done chan struct{}
	}
}

// Begin records that one more direct I/O is in flight (inode_dio_begin).
func (d *DIO) Begin() {
	n := d.n.Add(1)
	for {
		m := d.max.Load()
		if n <= m || d.max.CompareAndSwap(m, n) {
			return
		}
	}
}

// End records that a direct I/O begun with Begin has completed
// (inode_dio_end), and wakes Wait callers if none is left in flight.
//
// End without a matching Begin is a bug in the caller. With the invariants
// build tag it panics. Otherwise the call is ignored (the count stays at
// zero), counted in Underflows, and logged through log/slog with a stack trace
// at the 1st, 2nd, 4th, 8th ... occurrence: loud, but it does not bring a
// server down.
func (d *DIO) End() {
	for {
		n := d.n.Load()
		if n <= 0 {
			d.underflow()
			return
		}
		if d.n.CompareAndSwap(n, n-1) {
			if n == 1 && d.waiting.Load() {
				d.wake()
			}
			return
		}
	}
}

func (d *DIO) underflow() {
	if invariantsEnabled {
		panic("iolock: DIO.End without a matching Begin")
	}
	u := d.underflows.Add(1)
	if bits.OnesCount64(u) == 1 {
		slog.Error("iolock: DIO.End without a matching Begin; ignored",
			"underflows", u, "stack", string(debug.Stack()))
	}
}

// wake releases the blocked Wait callers if the count is still zero. If a
// Begin got in first, the End that brings the count back to zero wakes them.
func (d *DIO) wake() {
	d.mu.Lock()
	if d.n.Load() == 0 && d.mu.done != nil {
		close(d.mu.done)
		d.mu.done = nil
		d.waiting.Store(false)
	}
	d.mu.Unlock()
}

// InFlight returns the number of direct I/Os in flight.
func (d *DIO) InFlight() int {
	return int(d.n.Load())
}

// Max returns the largest number of direct I/Os that were in flight at once
// since the DIO was created or ResetMax was last called.
func (d *DIO) Max() int {
	return int(d.max.Load())
}

// ResetMax restarts the high-water mark from the current in-flight count and
// returns the previous mark. A Begin racing with ResetMax may be counted in
// either mark.
func (d *DIO) ResetMax() int {
	return int(d.max.Swap(d.n.Load()))
}

// Underflows returns how many End calls found nothing in flight. Anything but
// zero is a bug in the engine; see End.
func (d *DIO) Underflows() uint64 {
	return d.underflows.Load()
}

// Wait blocks until no direct I/O is in flight (inode_dio_wait).
//
// Preconditions: the caller holds the inode's Lock Exclusive, so that no new
// Begin can start; otherwise the count may be non-zero again by the time Wait
// returns.
func (d *DIO) Wait() {
	// Completions lock pages (invalidation) and the inode's mutex.
	lockrank.Wait(lockrank.RankPage, 0, nil)
	if done := d.waitChan(); done != nil {
		<-done
	}
}

// WaitContext is Wait that gives up when ctx is done. It returns nil once the
// count has been seen at zero, or ctx.Err().
func (d *DIO) WaitContext(ctx context.Context) error {
	lockrank.Wait(lockrank.RankPage, 0, nil)
	done := d.waitChan()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		// The channel (and the waiting flag) stay for other waiters; the
		// next End to reach zero clears them.
		return ctx.Err()
	}
}

// waitChan returns nil if nothing is in flight, or a channel that is closed
// when the count next reaches zero.
func (d *DIO) waitChan() chan struct{} {
	if d.n.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Set waiting before re-reading the count. An End that takes the count
	// to zero after this load sees waiting and takes mu, after us; an End
	// that did so before it is seen here as a zero count. (Go's atomics
	// are sequentially consistent.)
	d.waiting.Store(true)
	if d.n.Load() == 0 {
		if d.mu.done == nil {
			d.waiting.Store(false)
		}
		return nil
	}
	if d.mu.done == nil {
		d.mu.done = make(chan struct{})
	}
	return d.mu.done
}
