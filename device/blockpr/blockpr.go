// Package blockpr issues Linux block persistent reservation commands, the
// IOC_PR_* ioctls of <linux/pr.h>, and runs sluice's reservation protocol
// on a shared data device: the hardware half of the data fence of a volume
// whose ownership is an etcd lease (issue 18; the software half is
// device/fencedev).
//
// # The commands
//
// A block device whose driver has pr_ops (SCSI disks through sd, NVMe
// namespaces, device-mapper over them) turns each ioctl into a PERSISTENT
// RESERVE OUT service action (SPC-4) or an NVMe Reservation Register,
// Acquire or Release command. Device mirrors them one to one
// (blkdev_pr_register, blkdev_pr_reserve, ... in block/ioctl.c):
//
//	Register       IOC_PR_REGISTER       struct pr_registration  register (or, with new key 0, unregister) this host's key
//	Reserve        IOC_PR_RESERVE        struct pr_reservation   take the reservation of a type for a registered key
//	Release        IOC_PR_RELEASE        struct pr_reservation   give it up
//	Preempt        IOC_PR_PREEMPT        struct pr_preempt       remove another key's registration (and reservation)
//	PreemptAbort   IOC_PR_PREEMPT_ABORT  struct pr_preempt       the same, aborting that key's queued commands
//	Clear          IOC_PR_CLEAR          struct pr_clear         remove every registration and the reservation
//
// Registrations belong to a host's connection to the device (an I_T nexus
// in SCSI, a host identifier in NVMe), not to a process or a file
// descriptor: two processes of one host share one registration.
//
// A driver answers with 0, a negative errno (the ioctl fails with it:
// syscall.Errno), or, since Linux 6.3 and with older SCSI and NVMe drivers
// too, a positive status, which the ioctl returns as its result (Status:
// StatusReservationConflict when another key holds the reservation). A
// device without pr_ops answers EOPNOTSUPP (a loop device, virtio-blk), a
// file that is not a block device ENOTTY (an image file); Unsupported
// recognises these answers. The kernel refuses every PR ioctl on a
// partition, and, without CAP_SYS_ADMIN, on a descriptor not open for
// writing (before Linux 6.5: always), with EPERM.
//
// # The protocol
//
// Take and Give are what a volume's owner does with them. Each ownership
// has a key of its own (package volume uses the etcd lease's ID, which etcd
// never hands out twice, and records it, with the earlier owners', where
// the next owner reads it). Take, on acquiring the volume:
//
//  1. registers the key, replacing whatever this host had registered
//     (PR_FL_IGNORE_KEY: REGISTER AND IGNORE EXISTING KEY);
//  2. reserves Write Exclusive: only the holder writes, every host reads
//     (a standby, `sluice stat` and fsck on other hosts read the header);
//  3. if that fails, the reservation is another key's: Take preempts the
//     earlier owners' keys, newest first, with PREEMPT AND ABORT, until it
//     holds the reservation (it reserves again after each). A preemption
//     removes that key's registration, moves the reservation to this key
//     if that key held it, and aborts the commands its host still has
//     queued in the device. From then on the device fails every write of
//     the preempted host with RESERVATION CONFLICT, however late it
//     arrives. Earlier keys than the previous owner's matter when that
//     owner crashed or failed before taking the reservation over.
//
// If no earlier key can be preempted into the reservation (it is held by a
// key that no earlier owner had, or the device refuses the preemption),
// Take unregisters its key and fails: a host that cannot take the
// reservation must not write, and the device would refuse it anyway. Give,
// on a clean release after the last request, releases the reservation and
// unregisters the key, so that the next owner reserves at once.
//
// What reservations do not fence: another process of the same host (it
// shares the registration: Take finds the reservation its own); reads
// (Write Exclusive lets every host read); writes while no reservation
// exists, that is before the first owner's Take and between a clean Give
// and the next owner's Take (a host preempted earlier and frozen since,
// woken in that window, is stopped only by the software fence's
// assumptions); a host that registers and preempts without regard for the
// etcd lease (the protocol trusts every host to take the lease first).
//
// # Testing
//
// Device issues its ioctls through an Ioctl function: Sys in production, a
// fake in tests (blockprtest.Target models a shared device's registrations
// and reservation, and records every command). No device on the machines
// this repository is developed and tested on has pr_ops (no nvmet, no
// scsi_debug, no LIO target), so the path through a real SCSI or NVMe
// device is not exercised by any test here.
//
// # Concurrency
//
// A Device has no state beyond its descriptor: its methods may be called
// concurrently, and the device orders them. Take and Give are meant to be
// called once each per ownership.
package blockpr

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Type is a reservation type (enum pr_type).
type Type uint32

// The reservation types of <linux/pr.h>.
const (
	WriteExclusive                Type = 1 // PR_WRITE_EXCLUSIVE
	ExclusiveAccess               Type = 2 // PR_EXCLUSIVE_ACCESS
	WriteExclusiveRegOnly         Type = 3 // PR_WRITE_EXCLUSIVE_REG_ONLY
	ExclusiveAccessRegOnly        Type = 4 // PR_EXCLUSIVE_ACCESS_REG_ONLY
	WriteExclusiveAllRegistrants  Type = 5 // PR_WRITE_EXCLUSIVE_ALL_REGS
	ExclusiveAccessAllRegistrants Type = 6 // PR_EXCLUSIVE_ACCESS_ALL_REGS
)

func (t Type) String() string {
	switch t {
	case WriteExclusive:
		return "Write Exclusive"
	case ExclusiveAccess:
		return "Exclusive Access"
	case WriteExclusiveRegOnly:
		return "Write Exclusive, Registrants Only"
	case ExclusiveAccessRegOnly:
		return "Exclusive Access, Registrants Only"
	case WriteExclusiveAllRegistrants:
		return "Write Exclusive, All Registrants"
	case ExclusiveAccessAllRegistrants:
		return "Exclusive Access, All Registrants"
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// FlagIgnoreKey is PR_FL_IGNORE_KEY: Register replaces the host's key
// whatever it is (old is ignored).
const FlagIgnoreKey uint32 = 1 << 0

// Registration is struct pr_registration.
type Registration struct {
	OldKey, NewKey uint64
	Flags          uint32
	_              uint32
}

// Reservation is struct pr_reservation.
type Reservation struct {
	Key   uint64
	Type  Type
	Flags uint32
}

// Preemption is struct pr_preempt.
type Preemption struct {
	OldKey, NewKey uint64
	Type           Type
	Flags          uint32
}

// Clearing is struct pr_clear.
type Clearing struct {
	Key   uint64
	Flags uint32
	_     uint32
}

// The ioctl numbers of <linux/pr.h>: _IOW('p', 200..205, struct ...),
// that is 1<<30 (write) | sizeof(struct)<<16 | 'p'<<8 | nr.
const (
	IOC_PR_REGISTER      = 0x401870c8 // _IOW('p', 200, struct pr_registration)
	IOC_PR_RESERVE       = 0x401070c9 // _IOW('p', 201, struct pr_reservation)
	IOC_PR_RELEASE       = 0x401070ca // _IOW('p', 202, struct pr_reservation)
	IOC_PR_PREEMPT       = 0x401870cb // _IOW('p', 203, struct pr_preempt)
	IOC_PR_PREEMPT_ABORT = 0x401870cc // _IOW('p', 204, struct pr_preempt)
	IOC_PR_CLEAR         = 0x401070cd // _IOW('p', 205, struct pr_clear)
)

// Status is a positive result of a PR ioctl (enum pr_status, or a driver's
// raw status on kernels before 6.3): the device refused the command.
type Status uint32

// The statuses of enum pr_status.
const (
	StatusIOError             Status = 0x2     // PR_STS_IOERR
	StatusReservationConflict Status = 0x18    // PR_STS_RESERVATION_CONFLICT
	StatusPathFailed          Status = 0x10000 // PR_STS_PATH_FAILED
	StatusRetryPathFailure    Status = 0xe0000 // PR_STS_RETRY_PATH_FAILURE
	StatusPathFastFailed      Status = 0xf0000 // PR_STS_PATH_FAST_FAILED
)

func (s Status) Error() string {
	switch s {
	case StatusIOError:
		return "device I/O error"
	case StatusReservationConflict:
		return "reservation conflict"
	case StatusPathFailed:
		return "path failed"
	case StatusRetryPathFailure:
		return "path failure (retryable)"
	case StatusPathFastFailed:
		return "path fast-failed"
	}
	return fmt.Sprintf("device status %#x", uint32(s))
}

// Ioctl issues ioctl(2) request req on fd with argument arg (a pointer to
// one of the structs above). It returns nil for a result of 0, the errno
// (a syscall.Errno) for a failure, and a Status for a positive result.
type Ioctl func(fd uintptr, req uint, arg unsafe.Pointer) error

// Sys is the Ioctl of the running kernel.
func Sys(fd uintptr, req uint, arg unsafe.Pointer) error {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), uintptr(arg))
	switch {
	case errno != 0:
		return errno
	case r != 0:
		return Status(r)
	}
	return nil
}

// Unsupported reports whether err says that the device has no persistent
// reservations: ENOTTY (not a block device: an image file), EOPNOTSUPP (a
// block device without pr_ops: loop, virtio-blk without PR), EINVAL and
// ENOSYS (a file system or FUSE server that does not know the ioctl).
func Unsupported(err error) bool {
	return errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS)
}

// Conflict reports whether err is the device's RESERVATION CONFLICT.
func Conflict(err error) bool {
	var s Status
	return errors.As(err, &s) && s == StatusReservationConflict
}

// OpError is the error of one PR command.
type OpError struct {
	Op  string // "IOC_PR_REGISTER", ...
	Err error
}

func (e *OpError) Error() string { return e.Op + ": " + e.Err.Error() }

// Unwrap returns the errno or Status.
func (e *OpError) Unwrap() error { return e.Err }

// Device issues the PR commands on one open block device.
type Device struct {
	fd    uintptr // Immutable.
	ioctl Ioctl   // Immutable.
}

// New returns the Device of descriptor fd (which the caller keeps open
// while it uses the Device; open it for writing, see the package doc),
// issuing its commands through ioctl (nil: Sys).
func New(fd uintptr, ioctl Ioctl) *Device {
	if ioctl == nil {
		ioctl = Sys
	}
	return &Device{fd: fd, ioctl: ioctl}
}

func (d *Device) do(op string, req uint, arg unsafe.Pointer) error {
	if err := d.ioctl(d.fd, req, arg); err != nil {
		return &OpError{Op: op, Err: err}
	}
	return nil
}

// Register registers newKey for this host (IOC_PR_REGISTER), replacing
// oldKey, or whatever key it had with FlagIgnoreKey; a newKey of 0
// unregisters oldKey.
func (d *Device) Register(oldKey, newKey uint64, flags uint32) error {
	r := Registration{OldKey: oldKey, NewKey: newKey, Flags: flags}
	return d.do("IOC_PR_REGISTER", IOC_PR_REGISTER, unsafe.Pointer(&r))
}

// Reserve takes the reservation of type t for key (IOC_PR_RESERVE).
func (d *Device) Reserve(key uint64, t Type, flags uint32) error {
	r := Reservation{Key: key, Type: t, Flags: flags}
	return d.do("IOC_PR_RESERVE", IOC_PR_RESERVE, unsafe.Pointer(&r))
}

// Release gives up the reservation of type t that key holds
// (IOC_PR_RELEASE).
func (d *Device) Release(key uint64, t Type, flags uint32) error {
	r := Reservation{Key: key, Type: t, Flags: flags}
	return d.do("IOC_PR_RELEASE", IOC_PR_RELEASE, unsafe.Pointer(&r))
}

// Preempt removes oldKey's registration and, if it holds the reservation,
// gives newKey (registered) a reservation of type t instead
// (IOC_PR_PREEMPT); with abort, also aborts oldKey's queued commands
// (IOC_PR_PREEMPT_ABORT).
func (d *Device) Preempt(oldKey, newKey uint64, t Type, abort bool, flags uint32) error {
	p := Preemption{OldKey: oldKey, NewKey: newKey, Type: t, Flags: flags}
	if abort {
		return d.do("IOC_PR_PREEMPT_ABORT", IOC_PR_PREEMPT_ABORT, unsafe.Pointer(&p))
	}
	return d.do("IOC_PR_PREEMPT", IOC_PR_PREEMPT, unsafe.Pointer(&p))
}

// Clear removes every registration and the reservation (IOC_PR_CLEAR), for
// a registered key.
func (d *Device) Clear(key uint64) error {
	c := Clearing{Key: key}
	return d.do("IOC_PR_CLEAR", IOC_PR_CLEAR, unsafe.Pointer(&c))
}
