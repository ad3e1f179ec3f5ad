package extmap

import (
	"fmt"
	"syscall"

	"github.com/sluicefs/sluice/meta"
)

// The errors of the package. Every error a function returns is an *Error
// wrapping one of these, so callers test with errors.Is, against these or
// against what each wraps.
var (
	// ErrInvalid: an argument is malformed (an extent of length zero, one
	// whose file or device range overflows, an unknown state, an unwritten
	// extent with a non-zero epoch, a remap of epoch 0 or of blocks that
	// are not written). A caller bug. Wraps EINVAL.
	ErrInvalid error = &sentinel{msg: "invalid extent", wraps: []error{syscall.EINVAL}}

	// ErrMapped: Insert was given a range that is not wholly a hole. A
	// caller bug (the engine maps only what Lookup showed as a hole under
	// the same lock). Wraps EEXIST.
	ErrMapped error = &sentinel{msg: "range already mapped", wraps: []error{syscall.EEXIST}}

	// ErrCorrupt: records given to Load are inconsistent (overlapping in
	// the file, or on the device unless both are written; empty,
	// overflowing, of unknown state), or
	// Check found a broken invariant. Wraps meta.ErrCorrupt and EUCLEAN
	// (the kernel's EFSCORRUPTED).
	ErrCorrupt error = &sentinel{msg: "extent map corrupt", wraps: []error{meta.ErrCorrupt, syscall.EUCLEAN}}
)

// sentinel is an error of the package that wraps others without repeating
// their text.
type sentinel struct {
	msg   string
	wraps []error
}

func (s *sentinel) Error() string   { return s.msg }
func (s *sentinel) Unwrap() []error { return s.wraps }

// Error describes a failed call, in the manner of os.PathError.
type Error struct {
	// Op is the function that failed: "insert", "remap", "insert range",
	// "load" or "check".
	Op string
	// Extent is the extent the failure concerns (zero when none does).
	Extent Extent
	// Err is the cause; it wraps one of the package's Err values.
	Err error
}

func (e *Error) Error() string {
	if e.Extent == (Extent{}) {
		return fmt.Sprintf("extmap: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("extmap: %s %v: %v", e.Op, e.Extent, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// detail wraps sentinel with a more specific message.
func detail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
