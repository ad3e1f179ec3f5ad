package alloc

import (
	"fmt"
	"syscall"
)

// The errors of the package. Every error a method returns is an *Error
// wrapping one of these, so callers test with errors.Is, against these or
// against the errno each wraps.
var (
	// ErrNoSpace: no block can be allocated or reserved, now or after
	// Unbusy: every free block is reserved, or there is none. Wraps ENOSPC.
	ErrNoSpace error = &sentinel{"no free space", syscall.ENOSPC}

	// ErrBusy: the allocation is allowed, but every free block is busy
	// (freed by a metadata change that is not durable yet). Sync the
	// metadata, call Unbusy with its sequence number, and retry. Wraps
	// ENOSPC, so a caller that does not know about busy extents sees a
	// plain ENOSPC.
	ErrBusy error = &sentinel{"free space busy until the next metadata sync", syscall.ENOSPC}

	// ErrInvalid: an argument is out of range (an extent outside the
	// device or of length zero, a zero-length request, more than is
	// reserved). A caller bug. Wraps EINVAL.
	ErrInvalid error = &sentinel{"invalid argument", syscall.EINVAL}

	// ErrDoubleFree: Free or Cancel was given blocks that are already free.
	// The caller's metadata disagrees with the allocator's. Wraps EUCLEAN
	// (the kernel's EFSCORRUPTED), as XFS reports it.
	ErrDoubleFree error = &sentinel{"double free", syscall.EUCLEAN}

	// ErrCorrupt: persisted free-extent records given to Load are
	// inconsistent, or Check found a broken invariant. Wraps EUCLEAN.
	ErrCorrupt error = &sentinel{"free-space records corrupt", syscall.EUCLEAN}
)

// sentinel is an error of the package that wraps an errno without
// repeating its text.
type sentinel struct {
	msg   string
	errno syscall.Errno
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.errno }

// Error describes a failed call, in the manner of os.PathError.
type Error struct {
	// Op is the method that failed: "alloc", "alloc-reserved", "free",
	// "cancel", "reserve", "unreserve" or "load".
	Op string
	// Extent is what the call concerned: the extent to free or cancel,
	// the bad record given to Load, for Alloc and AllocReserved the hint
	// (Start) and the length wanted (Len), and for Reserve and Unreserve
	// the number of blocks (Len).
	Extent Extent
	// Err is the cause; it wraps one of the package's Err values.
	Err error
}

func (e *Error) Error() string {
	switch e.Op {
	case "alloc", "alloc-reserved":
		return fmt.Sprintf("alloc: %s hint %d want %d: %v", e.Op, e.Extent.Start, e.Extent.Len, e.Err)
	case "reserve", "unreserve":
		return fmt.Sprintf("alloc: %s %d blocks: %v", e.Op, e.Extent.Len, e.Err)
	}
	if e.Extent == (Extent{}) {
		return fmt.Sprintf("alloc: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("alloc: %s %v: %v", e.Op, e.Extent, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// detail wraps sentinel with a more specific message.
func detail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
