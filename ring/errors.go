package ring

import (
	"errors"
	"fmt"
	"syscall"
)

// Errors returned by the ring itself. Errors of the operations (the
// engine's *os.PathError values) arrive unchanged in CQE.Err.
var (
	// ErrRingFull is returned by Submit when every entry is in use
	// (submitted and not yet reaped) and Options.WaitWhenFull is off.
	// Reap completions and submit again.
	ErrRingFull = errors.New("ring: every entry is in use; reap completions first")
	// ErrClosed is returned by Submit after Close or Abort began, and by
	// Wait once the ring is closed and its completion queue is empty.
	ErrClosed = errors.New("ring: closed")
	// ErrCallbackMode is returned by Wait and Peek on a ring whose
	// completions go to Options.Callback.
	ErrCallbackMode = errors.New("ring: completions are delivered to the callback")
	// ErrCanceled is the CQE.Err of an operation that Abort canceled
	// before it started (queued for a worker, or waiting for an async-read
	// retry). errors.Is(err, syscall.ECANCELED) holds, as for io_uring's
	// -ECANCELED.
	ErrCanceled = fmt.Errorf("ring: operation canceled: %w", syscall.ECANCELED)
)

// invalidSQE describes an SQE that Submit refuses (no entry is used).
func invalidSQE(format string, args ...any) error {
	return fmt.Errorf("ring: invalid SQE: "+format+": %w", append(args, syscall.EINVAL)...)
}
