package directdev

import (
	"fmt"
	"strings"

	"github.com/sluicefs/sluice/device"
)

// Backend selects how a Device issues I/O.
type Backend int

const (
	// Auto uses io_uring, and falls back to Pread when a ring cannot be
	// set up (kernel without io_uring, sysctl kernel.io_uring_disabled,
	// seccomp). Device.Fallback says why it fell back.
	Auto Backend = iota
	// Uring uses io_uring and fails Open if a ring cannot be set up.
	Uring
	// Pread uses pread(2)/pwrite(2) on a bounded pool of worker
	// goroutines.
	Pread
)

// String returns "auto", "uring" or "pread".
func (b Backend) String() string {
	switch b {
	case Auto:
		return "auto"
	case Uring:
		return "uring"
	case Pread:
		return "pread"
	}
	return fmt.Sprintf("backend(%d)", int(b))
}

// Limits checked by Validate.
const (
	maxRings        = 64
	minRingEntries  = 2
	maxRingEntries  = 4096
	maxPreadWorkers = 4096
)

// Options configure Open. The zero value is valid and means every default;
// Open applies EnsureDefaults and Validate to its copy.
type Options struct {
	// IOUnit is the device's I/O unit (device.Device.IOUnit): the
	// alignment of every offset and length. It must be a power of two in
	// [512, device.MaxIOUnit], at least the logical sector size of a block
	// device (BLKSSZGET) and at least the direct-I/O offset alignment the
	// file system reports for an image file (statx STATX_DIOALIGN).
	//
	// The default value is 512.
	IOUnit int

	// Backend selects io_uring or pread/pwrite.
	//
	// The default value is Auto.
	Backend Backend

	// AllowBuffered lets Open fall back to buffered I/O (no O_DIRECT)
	// when the file system refuses O_DIRECT, as ramfs and some FUSE and
	// network file systems do. Buffered I/O goes through the page cache:
	// every write is still made durable by a flush, but memory is used twice
	// and the timing of I/O is the kernel's. Without it, Open fails with an
	// error wrapping ErrNoDirectIO. Device.Direct reports what was used.
	//
	// The default value is false.
	AllowBuffered bool

	// Rings is the number of io_uring rings, each driven by its own owner
	// goroutine. Requests are spread over the rings round-robin. One ring
	// keeps 4 KiB random reads at queue depth 32 within a few percent of
	// fio on a 2-CPU host. Each owner holds a P while it waits in the
	// kernel, so keep Rings well below GOMAXPROCS: with two rings and
	// GOMAXPROCS=2 the submitting goroutines starve and throughput drops.
	//
	// The default value is 1.
	Rings int

	// RingEntries is the number of submission queue entries of each ring,
	// a power of two in [2, 4096]. The completion queue has twice as many,
	// and a ring keeps at most 2*RingEntries requests in flight: Submit
	// blocks briefly beyond that, so the completion queue can never
	// overflow.
	//
	// The default value is 128.
	RingEntries int

	// PreadWorkers is the number of worker goroutines of the Pread backend,
	// each with at most one pread/pwrite in flight: the queue depth of
	// requests started with Submit, which blocks briefly once
	// 2*PreadWorkers of them wait.
	//
	// The default value is 64.
	PreadWorkers int

	// ReadOnly opens the file O_RDONLY; writes then fail validation with
	// an error wrapping EROFS.
	//
	// The default value is false.
	ReadOnly bool
}

// Defaults.
const (
	defaultRings        = 1
	defaultRingEntries  = 128
	defaultPreadWorkers = 64
)

// EnsureDefaults replaces every zero field with its default and returns o.
func (o *Options) EnsureDefaults() *Options {
	if o.IOUnit == 0 {
		o.IOUnit = device.DefaultIOUnit
	}
	if o.Rings == 0 {
		o.Rings = defaultRings
	}
	if o.RingEntries == 0 {
		o.RingEntries = defaultRingEntries
	}
	if o.PreadWorkers == 0 {
		o.PreadWorkers = defaultPreadWorkers
	}
	return o
}

// Validate reports every invalid field at once, joined with errors.Join, or
// returns nil. It does not apply defaults: call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	if !device.ValidIOUnit(o.IOUnit) {
		errs = append(errs, fmt.Errorf("IOUnit %d is not a power of two in [512, %d]", o.IOUnit, device.MaxIOUnit))
	}
	if o.Backend < Auto || o.Backend > Pread {
		errs = append(errs, fmt.Errorf("Backend %d is not Auto, Uring or Pread", int(o.Backend)))
	}
	if o.Rings < 1 || o.Rings > maxRings {
		//lint:ignore ST1005 it names the field, as its neighbours do (staticcheck knows only type and function names)
		errs = append(errs, fmt.Errorf("Rings %d is not in [1, %d]", o.Rings, maxRings))
	}
	if o.RingEntries < minRingEntries || o.RingEntries > maxRingEntries || o.RingEntries&(o.RingEntries-1) != 0 {
		errs = append(errs, fmt.Errorf("RingEntries %d is not a power of two in [%d, %d]", o.RingEntries, minRingEntries, maxRingEntries))
	}
	if o.PreadWorkers < 1 || o.PreadWorkers > maxPreadWorkers {
		errs = append(errs, fmt.Errorf("PreadWorkers %d is not in [1, %d]", o.PreadWorkers, maxPreadWorkers))
	}
	if len(errs) == 0 {
		return nil
	}
	return optionsError(errs)
}

// optionsError lists every problem Validate found, on one line. errors.Is
// and errors.As see each of them.
type optionsError []error

func (e optionsError) Error() string {
	var b strings.Builder
	b.WriteString("invalid directdev.Options: ")
	for i, err := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e optionsError) Unwrap() []error { return e }

// String returns every field on one line, for logs and benchmark records.
func (o Options) String() string {
	return fmt.Sprintf("IOUnit=%d Backend=%s AllowBuffered=%t Rings=%d RingEntries=%d PreadWorkers=%d ReadOnly=%t",
		o.IOUnit, o.Backend, o.AllowBuffered, o.Rings, o.RingEntries, o.PreadWorkers, o.ReadOnly)
}
