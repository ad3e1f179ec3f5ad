// Package device defines the block device contract that every layer of
// sluice above it relies on, and the helpers shared by its implementations.
//
// A Device is a fixed-size array of bytes addressed in units of its I/O unit
// (IOUnit, 512 B by default). Implementations live one level down:
// device/directdev (an image file or block device opened with O_DIRECT, driven
// through io_uring with a pread/pwrite fallback), device/memdev (in memory,
// crashable) and device/faultdev (a wrapper that injects errors, latency and
// gates, and counts I/Os).
//
// # Contract
//
//   - Alignment. Offsets and lengths must be multiples of IOUnit(). Buffer
//     addresses must be aligned to MemAlign(IOUnit()) (the unit, capped at
//     4 KiB). A misaligned request fails with an error wrapping EINVAL and
//     does nothing. AlignedBuf returns suitable buffers.
//   - Bounds. An I/O that does not lie wholly inside [0, Size()) fails with an
//     error wrapping EINVAL and does nothing.
//   - No partial results. A read or write either transfers every byte or
//     returns an error; after a failed write the contents of the range are
//     unspecified (any mix of old and new sectors).
//   - Concurrency. Every method may be called from many goroutines at once.
//     Concurrent I/Os to overlapping ranges are not ordered with respect to
//     each other: the caller orders them.
//   - Durability. A completed write is visible to later reads at once but is
//     durable only after a Flush that was submitted after the write
//     completed has returned successfully. A crash may keep, drop or tear (at
//     a 512 B sector boundary) every write not covered by such a Flush.
//   - Buffers stay owned by the device from Submit until Done runs; the
//     caller must not touch them in between.
//
// Errors returned by a device are *Error values that name the operation, the
// range and the cause; callers use errors.Is against syscall errnos.
package device

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// DefaultIOUnit is the I/O unit of a device that does not declare one: the
// traditional 512 B sector.
const DefaultIOUnit = 512

// MaxIOUnit is the largest I/O unit a device may declare. Units larger than a
// page model block-granular backends (the pNFS block-layout case).
const MaxIOUnit = 1 << 20

// Op names the kind of a device request.
type Op uint8

const (
	// OpRead reads len(Buf) bytes at Off into Buf.
	OpRead Op = iota
	// OpWrite writes Buf at Off.
	OpWrite
	// OpFlush makes every write that completed before it was submitted
	// durable. Off and Buf are ignored.
	OpFlush
)

// String returns "read", "write" or "flush".
func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	case OpFlush:
		return "flush"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Request is one asynchronous device operation.
//
// The submitter owns the Request until Submit; the device owns it, and Buf,
// until it calls Done; after Done the submitter owns both again and may reuse
// them.
type Request struct {
	Op  Op
	Off int64
	Buf []byte
	// Done is called exactly once when the request completes, with nil or an
	// *Error. It is never called on the submitting goroutine before Submit
	// returns, so a submitter may hold locks across Submit that Done also
	// takes. It may run on a device-owned goroutine: it must not block for
	// long (hand long work to another goroutine).
	Done func(r *Request, err error)
	// Ctx is for the submitter; the device never reads it.
	Ctx any
}

// Device is a block device. See the package documentation for the contract
// every method obeys.
type Device interface {
	// ReadAt reads len(p) bytes at off into p and returns nil, or returns an
	// error and leaves the contents of p unspecified. It is Submit of an
	// OpRead followed by a wait.
	ReadAt(p []byte, off int64) error
	// WriteAt writes p at off. The write is visible to later reads when
	// WriteAt returns, and durable after a later Flush returns.
	WriteAt(p []byte, off int64) error
	// Flush makes every write that completed before Flush was called
	// durable. On error, nothing is known about which of them are durable,
	// and a later successful Flush does not make up for it: a write that
	// completed before a failed Flush must be redone before it can be
	// trusted durable.
	Flush() error
	// Submit starts r and returns at once. A request that fails validation
	// (misaligned, out of bounds, device closed) returns an error and Done
	// is not called. Otherwise Submit returns nil and r.Done is called
	// exactly once, later. Submit may block briefly when the device's queue
	// is full (back-pressure); it never waits for I/O completion.
	Submit(r *Request) error
	// Size returns the size of the device in bytes, a multiple of IOUnit.
	// It never changes while the device is open.
	Size() int64
	// IOUnit returns the alignment, in bytes, of every offset and length:
	// a power of two between 512 B and MaxIOUnit.
	IOUnit() int
	// Close waits for submitted requests to complete and releases the
	// device. Calls after Close fail with an error wrapping ErrClosed.
	Close() error
}

// ErrClosed is wrapped by errors from a device that has been closed.
var ErrClosed = errors.New("device closed")

// Error describes a failed device request.
type Error struct {
	Op  Op
	Off int64
	Len int
	Err error
}

func (e *Error) Error() string {
	if e.Op == OpFlush {
		return fmt.Sprintf("device flush: %v", e.Err)
	}
	return fmt.Sprintf("device %s [%d, +%d): %v", e.Op, e.Off, e.Len, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// NewError wraps err for request r.
func NewError(r *Request, err error) *Error {
	return &Error{Op: r.Op, Off: r.Off, Len: len(r.Buf), Err: err}
}

// MemAlign returns the buffer-address alignment required by a device with
// the given I/O unit: the unit itself, capped at 4 KiB.
func MemAlign(ioUnit int) int {
	if ioUnit > 4096 {
		return 4096
	}
	return ioUnit
}

// ValidIOUnit reports whether u is a power of two in [512, MaxIOUnit].
func ValidIOUnit(u int) bool {
	return u >= 512 && u <= MaxIOUnit && u&(u-1) == 0
}

// Check validates request r against a device of the given size and I/O
// unit, and returns nil or an *Error wrapping EINVAL that says what is wrong.
// Implementations call it from Submit.
func Check(r *Request, size int64, ioUnit int) error {
	switch r.Op {
	case OpFlush:
		return nil
	case OpRead, OpWrite:
	default:
		return NewError(r, fmt.Errorf("unknown op: %w", syscall.EINVAL))
	}
	u := int64(ioUnit)
	n := int64(len(r.Buf))
	switch {
	case n == 0:
		return NewError(r, fmt.Errorf("empty buffer: %w", syscall.EINVAL))
	case r.Off%u != 0 || n%u != 0:
		return NewError(r, fmt.Errorf("offset and length must be multiples of the %d B I/O unit: %w", ioUnit, syscall.EINVAL))
	case !IsAligned(r.Buf, MemAlign(ioUnit)):
		return NewError(r, fmt.Errorf("buffer address must be %d B aligned: %w", MemAlign(ioUnit), syscall.EINVAL))
	case r.Off < 0 || r.Off+n > size:
		return NewError(r, fmt.Errorf("beyond the %d B device: %w", size, syscall.EINVAL))
	}
	return nil
}

// IsAligned reports whether the first byte of p lies at an address that is a
// multiple of align (a power of two). An empty slice is aligned.
func IsAligned(p []byte, align int) bool {
	if len(p) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(&p[0]))&uintptr(align-1) == 0
}

// BufAlign is the address alignment of buffers from AlignedBuf: 4 KiB, which
// satisfies every device.
const BufAlign = 4096

// AlignedBuf returns a zeroed buffer of n bytes whose first byte is
// BufAlign-aligned. The buffer lives on the Go heap (which does not move
// objects), so it may be handed to the kernel for the duration of an I/O as
// long as a reference to it is kept.
func AlignedBuf(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	raw := make([]byte, n+BufAlign)
	off := BufAlign - int(uintptr(unsafe.Pointer(&raw[0]))&(BufAlign-1))
	if off == BufAlign {
		off = 0
	}
	return raw[off : off+n : off+n]
}

// Wait submits r on d and blocks until it completes, returning its error.
// It overwrites r.Done. Implementations use it for ReadAt, WriteAt and Flush.
func Wait(d Device, r *Request) error {
	ch := make(chan error, 1)
	r.Done = func(_ *Request, err error) { ch <- err }
	if err := d.Submit(r); err != nil {
		return err
	}
	return <-ch
}
