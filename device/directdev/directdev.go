// Package directdev implements device.Device over an image file or a block
// device opened with O_DIRECT, driven through io_uring, with a
// pread/pwrite worker pool as the fallback.
//
// # Opening
//
// Open takes a path and Options. A regular file's size must be a non-zero
// multiple of Options.IOUnit (create an image with `truncate -s 1G img` or,
// to avoid allocation on first write, `fallocate -l 1G img`); a block
// device's size comes from BLKGETSIZE64 and its logical sector size
// (BLKSSZGET) bounds IOUnit from below. Open asks the file system for its
// direct-I/O alignment (statx STATX_DIOALIGN) and probes one read, so a file
// system that accepts O_DIRECT but cannot honour it for this IOUnit fails at
// Open and not at the first I/O. A file system that refuses O_DIRECT (ramfs,
// some FUSE and network file systems) fails Open with an error wrapping
// ErrNoDirectIO unless Options.AllowBuffered is set.
//
// # Backends
//
// The io_uring backend (Uring) runs Options.Rings rings. Submitters fill
// SQEs themselves, under a short per-ring mutex; each ring has one owner
// goroutine, which alone reaps the completion queue: it waits for
// completions in io_uring_enter, calls Done, and fills SQEs for requests
// that had to wait for a free slot.
//
//   - Batching. While the owner is awake (reaping, calling Done), a Submit
//     only publishes its SQE and returns: the owner submits everything
//     published with the same io_uring_enter that waits for the next
//     completion, so under load one system call submits many requests and
//     reaps many completions (Stats counts both).
//   - Wake-ups. While the owner sleeps in io_uring_enter waiting for a
//     completion, a Submit calls io_uring_enter itself to submit its SQE,
//     and the owner sleeps on: no wake-up, no handoff between goroutines
//     before the request reaches the kernel. With many requests in flight
//     (deferSubmitDepth), the Submit leaves its SQE to the owner instead,
//     which submits it after the next completion wakes it, together with
//     the others published meanwhile, unless it makes a batch
//     (deferSubmitBatch) that it then submits itself (Stats.Deferred). An
//     owner with nothing in flight sleeps on a channel, and the first
//     Submit wakes it.
//   - Scheduling. After calling Done callbacks the owner yields
//     (runtime.Gosched), so that the goroutines the callbacks woke run, and
//     submit their next requests, before the owner blocks in the kernel
//     again. This is why the owner is not locked to an OS thread and the
//     rings do not use IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN: a locked
//     goroutine cannot yield without handing its P to another thread and
//     back, and measured slower (see ringOwner.loop).
//   - Back-pressure. A ring never has more requests in flight than its
//     completion queue holds, so the CQ cannot overflow. Each Submit
//     takes a token from a per-ring semaphore of that size (a count under
//     the ring's mutex, handed to blocked Submits before newcomers) and
//     blocks while none is free. A Done callback that calls Submit
//     must not block (the owner would wait for itself): while it calls Done
//     callbacks the owner locks itself to its thread and publishes the
//     thread id, and a Submit from that thread skips the semaphore; the
//     request waits for a free slot instead.
//   - Buffers. The in-flight table references every request, and so its
//     buffer, until its completion has been reaped: the GC cannot free a
//     buffer the kernel is using, and the Go heap does not move objects.
//   - No partial results. A short read or write is resubmitted for the rest;
//     a transfer of zero bytes fails the request with EIO.
//   - Host rings. A read or write submitted on a thread that lends its own
//     ring (uring.ThreadHost: an io_uring FUSE queue's owner while it
//     starts a READ or WRITE) travels on that ring, submitted and reaped
//     by its owner, which calls Done on its thread; flushes, and requests
//     the host has no room for, take the device's rings. Close waits for
//     them too (host.go).
//
// The Pread backend runs Options.PreadWorkers goroutines that take requests
// from a bounded queue and issue one pread(2), pwrite(2) or
// fdatasync(2)/fsync(2) each. Synchronous callers (device.ReadAt and the
// rest) submit and wait like any other: a synchronous path issuing the
// system call on the caller's goroutine saved a goroutine handoff of a few
// microseconds, below the noise of one 4 KiB O_DIRECT read (70 to 140 us on
// the development VM, either way), and the engine never reached it (its
// counting wrapper submits). It is the fallback when io_uring is not available (ENOSYS on old
// kernels or under seccomp, EPERM with sysctl kernel.io_uring_disabled=2);
// with the Auto backend Open chooses it automatically and Device.Fallback
// says why.
//
// An OpFlush is fdatasync for an image file and fsync for a block device,
// issued as IORING_OP_FSYNC on the io_uring backend.
//
// # Concurrency
//
// Every method may be called from any number of goroutines. Done callbacks
// run on a ring's owner goroutine (one at a time per ring) or on a pread
// worker: they must be short and must not wait for other I/O on the same
// device (device.ReadAt, WriteAt, Flush and Wait, or Close), though they
// may Submit. Each ring
// owner holds a P (GOMAXPROCS slot) while it waits in io_uring_enter, as any
// goroutine in a blocking system call does, until the runtime retakes it.
// Close waits for every submitted request to complete; calls after it fail
// with an error wrapping device.ErrClosed.
//
// Lock order:
//
//	Device.closeMu (Close only; held while Close waits for the backend)
//	  ringOwner.sq, preadBackend.mu, owners (leaves: never held while
//	  calling Done or taking another lock)
package directdev

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/internal/lifecycle"
	"github.com/sluicefs/sluice/internal/sys/uring"
)

// ErrNoDirectIO is wrapped by the error Open returns when the file system
// refuses O_DIRECT and Options.AllowBuffered is not set.
var ErrNoDirectIO = errors.New("file system does not support O_DIRECT")

// Device is a device.Device over a file opened with O_DIRECT. See the
// package documentation.
type Device struct {
	// Immutable after Open.
	path     string
	fd       int
	size     int64
	ioUnit   int
	opts     Options
	backend  Backend
	direct   bool
	blockDev bool
	readOnly bool
	fallback error
	be       ioBackend

	// life counts the goroutines inside Submit, and says
	// whether the device is closed.
	life lifecycle.Tracker
	// hosted counts the requests in flight on host rings (host.go), which
	// Close waits for.
	hosted sync.WaitGroup
	// nHosted and nHostShort count them, and their short transfers.
	nHosted, nHostShort atomic.Uint64
	// closeMu serialises Close.
	closeMu sync.Mutex
}

// ioBackend is what a backend provides to Device.
type ioBackend interface {
	// submit queues a validated request. It may block for back-pressure.
	submit(r *device.Request)
	// close waits for every submitted request to complete (calling Done)
	// and releases the backend. No submit call is running or will start.
	close() error
	// stats adds the backend's counters to s.
	stats(s *Stats)
}

// testHookUringSetup, when non-nil, is called before each ring is created;
// a non-nil error is used as the ring's setup error. Tests use it to force
// the Auto fallback.
var testHookUringSetup func() error

// Open opens the image file or block device at path. See the package
// documentation.
func Open(path string, opts Options) (*Device, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("directdev: open %s: %w", path, err)
	}
	d := &Device{path: path, ioUnit: opts.IOUnit, opts: opts, readOnly: opts.ReadOnly}
	if err := d.open(); err != nil {
		return nil, err
	}

	var err error
	switch opts.Backend {
	case Auto, Uring:
		d.backend = Uring
		d.be, err = newUringBackend(d)
		if err != nil && opts.Backend == Auto {
			d.fallback = err
			d.backend = Pread
			d.be, err = newPreadBackend(d), nil
		}
	case Pread:
		d.backend = Pread
		d.be = newPreadBackend(d)
	}
	if err != nil {
		unix.Close(d.fd)
		return nil, fmt.Errorf("directdev: open %s: %w", path, err)
	}
	return d, nil
}

// open opens the file, determines its size and checks IOUnit against what
// the kernel requires.
func (d *Device) open() error {
	errorf := func(format string, args ...any) error {
		return fmt.Errorf("directdev: open %s: "+format, append([]any{d.path}, args...)...)
	}
	flags := unix.O_CLOEXEC | unix.O_RDWR
	if d.readOnly {
		flags = unix.O_CLOEXEC | unix.O_RDONLY
	}
	noDirect := func(call string, cause error) error {
		return errorf("%w (%s: %w): put the image on a file system that supports it (ext4, xfs, btrfs) or a block device, or set Options.AllowBuffered to use the page cache", ErrNoDirectIO, call, cause)
	}
	fd, err := openRetry(d.path, flags|unix.O_DIRECT)
	d.direct = true
	if errors.Is(err, unix.EINVAL) {
		if !d.opts.AllowBuffered {
			return noDirect("open", err)
		}
		fd, err = openRetry(d.path, flags)
		d.direct = false
	}
	if err != nil {
		return errorf("%w", err)
	}
	d.fd = fd
	fail := func(err error) error {
		unix.Close(fd)
		return err
	}

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(errorf("fstat: %w", err))
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		d.size = st.Size
	case unix.S_IFBLK:
		d.blockDev = true
		var size uint64
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
			return fail(errorf("ioctl BLKGETSIZE64: %w", errno))
		}
		d.size = int64(size)
		sector, err := unix.IoctlGetInt(fd, unix.BLKSSZGET)
		if err != nil {
			return fail(errorf("ioctl BLKSSZGET: %w", err))
		}
		if d.ioUnit < sector {
			return fail(errorf("IOUnit %d is smaller than the device's %d B logical sector size; set Options.IOUnit to at least %d: %w", d.ioUnit, sector, sector, unix.EINVAL))
		}
	default:
		return fail(errorf("not a regular file or block device (mode %#o): %w", st.Mode&unix.S_IFMT, unix.EINVAL))
	}
	if d.size == 0 {
		return fail(errorf("empty file; give it a size that is a multiple of %d B first (truncate -s or fallocate -l): %w", d.ioUnit, unix.EINVAL))
	}
	if d.size%int64(d.ioUnit) != 0 {
		return fail(errorf("size %d B is not a multiple of the %d B I/O unit; resize it or choose a smaller Options.IOUnit: %w", d.size, d.ioUnit, unix.EINVAL))
	}

	if !d.direct {
		return nil
	}
	// Ask for the file system's direct-I/O alignment (Linux 6.1) ...
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &stx); err == nil && stx.Mask&unix.STATX_DIOALIGN != 0 && !d.blockDev {
		switch {
		case stx.Dio_offset_align == 0:
			if !d.opts.AllowBuffered {
				return fail(noDirect("statx reports no direct I/O alignment", unix.EINVAL))
			}
			return d.reopenBuffered(flags)
		case d.ioUnit < int(stx.Dio_offset_align):
			return fail(errorf("IOUnit %d is smaller than the file system's %d B direct-I/O alignment; set Options.IOUnit to at least %d: %w", d.ioUnit, stx.Dio_offset_align, stx.Dio_offset_align, unix.EINVAL))
		case device.MemAlign(d.ioUnit) < int(stx.Dio_mem_align):
			return fail(errorf("the file system needs %d B aligned buffers for direct I/O, more than IOUnit %d guarantees: %w", stx.Dio_mem_align, d.ioUnit, unix.EINVAL))
		}
	}
	// ... and check with one read, since some file systems accept
	// O_DIRECT at open and refuse it at the first I/O.
	probe := device.AlignedBuf(d.ioUnit)
	for {
		_, err = unix.Pread(fd, probe, 0)
		if err != unix.EINTR {
			break
		}
	}
	if errors.Is(err, unix.EINVAL) {
		if !d.opts.AllowBuffered {
			return fail(noDirect("read", err))
		}
		return d.reopenBuffered(flags)
	}
	if err != nil {
		return fail(errorf("probe read: %w", err))
	}
	return nil
}

// reopenBuffered replaces d.fd with one opened without O_DIRECT.
func (d *Device) reopenBuffered(flags int) error {
	unix.Close(d.fd)
	fd, err := openRetry(d.path, flags)
	if err != nil {
		return fmt.Errorf("directdev: open %s: %w", d.path, err)
	}
	d.fd, d.direct = fd, false
	return nil
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// Backend returns the backend in use: Uring or Pread, never Auto.
func (d *Device) Backend() Backend { return d.backend }

// Fallback returns why the Auto backend fell back to Pread, or nil.
func (d *Device) Fallback() error { return d.fallback }

// Direct reports whether the file is open with O_DIRECT (false only with
// Options.AllowBuffered on a file system that refuses O_DIRECT).
func (d *Device) Direct() bool { return d.direct }

// Options returns the options in effect, defaults applied.
func (d *Device) Options() Options { return d.opts }

// Size returns the device size in bytes.
func (d *Device) Size() int64 { return d.size }

// IOUnit returns Options.IOUnit.
func (d *Device) IOUnit() int { return d.ioUnit }

// String describes the device for logs.
func (d *Device) String() string {
	return fmt.Sprintf("directdev %s (%d B, backend %s, direct %t, %s)", d.path, d.size, d.backend, d.direct, d.opts)
}

// Submit validates r and queues it. See device.Device.Submit.
func (d *Device) Submit(r *device.Request) error {
	if !d.life.Enter() {
		return device.NewError(r, device.ErrClosed)
	}
	defer d.life.Exit()
	if r.Done == nil {
		return device.NewError(r, fmt.Errorf("request without Done: %w", syscall.EINVAL))
	}
	if err := d.check(r); err != nil {
		return err
	}
	if !d.submitOnHost(r) {
		d.be.submit(r)
	}
	return nil
}

// check validates r: device.Check, then the read-only rule.
func (d *Device) check(r *device.Request) error {
	if err := device.Check(r, d.size, d.ioUnit); err != nil {
		return err
	}
	if r.Op == device.OpWrite && d.readOnly {
		return device.NewError(r, fmt.Errorf("device opened read-only: %w", syscall.EROFS))
	}
	return nil
}

// Close waits for submitted requests to complete, stops the backend and
// closes the file. A Done callback must not call Close.
func (d *Device) Close() error {
	d.closeMu.Lock()
	defer d.closeMu.Unlock()
	if !d.life.Shut() {
		return fmt.Errorf("directdev: close %s: %w", d.path, device.ErrClosed)
	}
	d.life.Wait()   // the last Submit in progress has left
	d.hosted.Wait() // and the host rings have completed its requests
	err := d.be.close()
	if cerr := unix.Close(d.fd); err == nil && cerr != nil {
		err = fmt.Errorf("directdev: close %s: %w", d.path, cerr)
	}
	return err
}

// Stats are cumulative counters of a device's backend.
type Stats struct {
	// Requests counts requests completed (Done called).
	Requests uint64
	// SQEs counts SQEs submitted for requests, resubmissions included.
	SQEs uint64
	// Enters counts io_uring_enter calls.
	Enters uint64
	// Batches counts io_uring_enter calls that submitted at least one
	// SQE; SQEs/Batches is the mean submission batch.
	Batches uint64
	// Wakeups counts Submit calls that woke an idle owner (one with
	// nothing in flight).
	Wakeups uint64
	// Deferred counts Submit calls that found the owner waiting in the
	// kernel with enough in flight and left their SQE for the owner's
	// next io_uring_enter instead of entering the kernel themselves.
	Deferred uint64
	// Blocked counts Submit calls that waited for back-pressure.
	Blocked uint64
	// ShortIOs counts short reads and writes that were resubmitted.
	ShortIOs uint64
	// Hosted counts the requests that travelled on a host ring (the
	// submitting thread's, see uring.ThreadHost) instead of the
	// device's; they are not in Requests, SQEs or ShortIOs.
	Hosted uint64
	// HostShortIOs counts their short transfers.
	HostShortIOs uint64
	// DepthNanos is the io_uring queue depth integrated over time, in
	// request-nanoseconds: a request counts from its SQE until its CQE is
	// reaped. Its increase over an interval divided by the interval's
	// length is the mean queue depth the device saw.
	DepthNanos uint64
}

// Stats returns the backend's counters.
func (d *Device) Stats() Stats {
	s := Stats{Hosted: d.nHosted.Load(), HostShortIOs: d.nHostShort.Load()}
	d.be.stats(&s)
	return s
}

// maxRetries bounds the resubmissions of a request that completes with
// EAGAIN or EINTR.
const maxRetries = 16

// resultOf applies the no-partial-results rule to one completion of request
// r, analogous to the kernel's iomap_dio_complete deciding what a direct
// I/O returns. done bytes had moved before; res is the completion's result,
// a byte count or -errno. It returns the new done count and:
//
//   - more=false, err=nil: the request is complete;
//   - more=true, err=nil: a short transfer, resubmit the rest;
//   - more=true, err!=nil: EAGAIN or EINTR, resubmit unless retried too
//     often, then fail with err;
//   - more=false, err!=nil: fail with err, an *device.Error wrapping the
//     errno (or EIO for a transfer of zero bytes).
func resultOf(r *device.Request, done int, res int32) (newDone int, more bool, err error) {
	switch {
	case res < 0:
		errno := syscall.Errno(-res)
		return done, errno == syscall.EAGAIN || errno == syscall.EINTR, device.NewError(r, errno)
	case r.Op == device.OpFlush:
		return done, false, nil
	case res == 0:
		return done, false, device.NewError(r, errZeroTransfer(r.Op, r.Off+int64(done)))
	}
	done += int(res)
	return done, done < len(r.Buf), nil
}

// again reports whether a request whose completion resultOf judged (more,
// err) is submitted again for the rest: a short transfer always (counted
// in short), an EAGAIN or EINTR up to maxRetries times (counted in
// *retries).
func again(more bool, err error, retries *int, short *atomic.Uint64) bool {
	switch {
	case !more:
		return false
	case err == nil:
		short.Add(1)
		return true
	case *retries < maxRetries:
		*retries++
		return true
	}
	return false
}

// prepTransfer fills sqe for what is left of read or write r after its
// first done bytes.
func prepTransfer(sqe *uring.SQE, fd int, r *device.Request, done int) {
	if r.Op == device.OpRead {
		sqe.PrepRead(fd, r.Buf[done:], uint64(r.Off)+uint64(done))
	} else {
		sqe.PrepWrite(fd, r.Buf[done:], uint64(r.Off)+uint64(done))
	}
}

// errZeroTransfer is the cause of a request that the kernel completed with
// zero bytes transferred: a short read at the end of a file that shrank
// under us, or a write the device accepted none of.
func errZeroTransfer(op device.Op, off int64) error {
	return fmt.Errorf("%s transferred 0 bytes at offset %d: %w", op, off, syscall.EIO)
}
