package ring

import (
	"errors"
	"fmt"
)

// Limits checked by Validate.
const (
	// MaxEntries is the largest ring New accepts.
	MaxEntries = 1 << 16
	// DefaultMaxWorkers caps the default pool size (Options.Workers).
	DefaultMaxWorkers = 256
	// MaxWorkers is the largest pool Validate accepts.
	MaxWorkers = 1 << 14
)

// Options configures a Ring. The zero value is valid: every field has a
// default. New applies EnsureDefaults and Validate to its own copy.
type Options struct {
	// Workers bounds the worker pool that runs punted operations in
	// blocking mode (the kernel's io-wq). Workers are started on demand,
	// one per punted operation that finds no idle worker, up to this
	// bound, and stay until Close; punted work beyond it queues. A worker
	// runs one operation, or one inode's hashed chain, at a time, so this
	// is also the largest number of punted operations in the engine at
	// once. The default value is the ring's number of entries, at most
	// DefaultMaxWorkers (256): every operation the ring can hold may have
	// its own worker, as io-wq creates workers while work waits.
	Workers int

	// ForceAsync sends every operation to the pool without the inline
	// attempt, as io_uring's IOSQE_ASYNC (fio's force_async=1) does, so
	// that the pool and its per-inode hashing can be measured. SQE.Async
	// does the same for one operation. A caller's RWFNoWait still applies
	// in the pool: the worker's attempt returns EAGAIN instead of
	// blocking. The default value is false.
	ForceAsync bool

	// WaitWhenFull makes Submit wait for a free entry when every entry is
	// in use (submitted and not yet reaped) instead of failing with
	// ErrRingFull. Entries are freed by Wait and Peek, or, with Callback,
	// just before each callback runs. A Callback must not submit on a ring
	// with WaitWhenFull when it could find the ring full: it would wait
	// for itself. The default value is false.
	WaitWhenFull bool

	// Callback, when set, receives every completion instead of the
	// completion queue: it runs on the ring's completion goroutine, one
	// completion at a time, in completion order, and must not block for
	// long (it delays every later completion and every async-read retry).
	// It may Submit. Wait and Peek then fail with ErrCallbackMode. The
	// default value is nil (completions are reaped with Wait and Peek).
	Callback func(CQE)
}

// EnsureDefaults fills unset fields for a ring of entries and returns o. A
// nil o gives all defaults.
func (o *Options) EnsureDefaults(entries int) *Options {
	if o == nil {
		o = &Options{}
	}
	if o.Workers == 0 {
		o.Workers = min(max(entries, 1), DefaultMaxWorkers)
	}
	return o
}

// Validate reports every problem with o, and with entries, at once.
func (o *Options) Validate(entries int) error {
	var errs []error
	if entries < 1 || entries > MaxEntries {
		errs = append(errs, fmt.Errorf("entries %d is not in [1, %d]", entries, MaxEntries))
	}
	if o.Workers < 1 || o.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("option Workers %d is not in [1, %d]", o.Workers, MaxWorkers))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("ring: invalid options: %w", errors.Join(errs...))
}

// String renders o on one line, so that a benchmark or a test can record
// exactly what it ran with.
func (o *Options) String() string {
	return fmt.Sprintf("workers=%d force_async=%t wait_when_full=%t callback=%t",
		o.Workers, o.ForceAsync, o.WaitWhenFull, o.Callback != nil)
}
