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
//     fails; after a failed write the contents of the range are unspecified
//     (any mix of old and new sectors).
//   - Concurrency. Every method may be called from many goroutines at once.
//     Concurrent I/Os to overlapping ranges are not ordered with respect to
//     each other: the caller orders them.
//   - Durability. A completed write is visible to later reads at once but is
//     durable only after an OpFlush that was submitted after the write
//     completed has completed successfully. A crash may keep, drop or tear
//     (at a 512 B sector boundary) every write not covered by such a flush.
//     On a failed flush nothing is known about which of the writes it covered
//     are durable, and a later successful flush does not make up for it: a
//     write that completed before a failed flush must be redone before it
//     can be trusted durable.
//   - Ownership. A Request and its buffer belong to the device from Submit
//     until it calls Done; the caller must not touch them in between, and
//     the device does not touch them once it has called Done (so Done may
//     reuse or resubmit the request at once).
//
// # Asynchronous core, synchronous helpers
//
// A Device has one way to do I/O: Submit a Request and be called back.
// Reads, writes and flushes are all requests (a flush is an OpFlush request,
// not a method, so that wrappers see, count, delay and fail it on the same
// path as the rest). Synchronous callers use the package functions ReadAt,
// WriteAt, Flush and Wait, which submit and wait (without allocating: the
// waits are pooled); implementations and wrappers implement only Submit,
// Size, IOUnit and Close. The helpers block until the request completes, so
// a Done callback must not call them: it may run on the goroutine that
// would complete the request.
//
// Errors returned by a device are *Error values that name the operation, the
// range and the cause; callers use errors.Is against syscall errnos.
package device

import (
	"errors"
	"fmt"
	"sync"
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

// Device is a block device: the asynchronous core every implementation and
// wrapper provides. See the package documentation for the contract every
// method obeys, and ReadAt, WriteAt, Flush and Wait for synchronous use.
type Device interface {
	// Submit starts r (a read, a write or a flush) and returns at once. A
	// request that fails validation (misaligned, out of bounds, device
	// closed) returns an error and Done is not called. Otherwise Submit
	// returns nil and r.Done is called exactly once, later. Submit may
	// block briefly when the device's queue is full (back-pressure); it
	// never waits for I/O completion.
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

// ReadAt reads len(p) bytes at off on d into p: it submits an OpRead and
// waits for it. It returns nil, or an error and leaves the contents of p
// unspecified.
func ReadAt(d Device, p []byte, off int64) error {
	return wait(d, OpRead, p, off)
}

// WriteAt writes p at off on d: it submits an OpWrite and waits for it. The
// write is visible to later reads when WriteAt returns, and durable after a
// later Flush returns nil.
func WriteAt(d Device, p []byte, off int64) error {
	return wait(d, OpWrite, p, off)
}

// Flush makes every write on d that completed before Flush was called
// durable: it submits an OpFlush and waits for it. See the package
// documentation for what a failed Flush means.
func Flush(d Device) error {
	return wait(d, OpFlush, nil, 0)
}

// Wait submits r on d and blocks until it completes, returning its error.
// It sets r.Done for the wait and to nil on return. It is for a caller that
// builds its own Request; ReadAt, WriteAt and Flush are shorter.
func Wait(d Device, r *Request) error {
	w := waiterPool.Get().(*waiter)
	err := w.wait(d, r)
	waiterPool.Put(w)
	return err
}

// waiter is a completion channel with the Done that fills it, pooled (with
// a Request for ReadAt, WriteAt and Flush) so that a synchronous call does
// not allocate.
type waiter struct {
	req  Request
	ch   chan error
	done func(*Request, error)
}

var waiterPool = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan error, 1)}
	w.done = func(_ *Request, err error) { w.ch <- err }
	return w
}}

// wait submits r on d with w's Done and waits for it. The channel is empty
// again when it returns: Done ran once and was received, or never ran.
func (w *waiter) wait(d Device, r *Request) error {
	r.Done = w.done
	err := d.Submit(r)
	if err == nil {
		err = <-w.ch
	}
	r.Done = nil
	return err
}

func wait(d Device, op Op, p []byte, off int64) error {
	w := waiterPool.Get().(*waiter)
	w.req = Request{Op: op, Off: off, Buf: p}
	err := w.wait(d, &w.req)
	w.req = Request{}
	waiterPool.Put(w)
	return err
}
