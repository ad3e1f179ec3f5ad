// Package uring is a small hand-written binding to Linux io_uring, built on
// golang.org/x/sys/unix. It covers what sluice's direct device needs and
// nothing more: ring setup and teardown, the opcodes NOP, READ, WRITE, FSYNC
// and URING_CMD (a driver-defined command, used by FUSE over io_uring),
// rings with 64- or 128-byte SQEs, submission, and completion reaping.
//
// # Model
//
// A Ring is one io_uring instance: a submission queue (SQ) of SQEs that the
// program fills and the kernel consumes, and a completion queue (CQ) of CQEs
// that the kernel fills and the program consumes. Both queues are rings of
// power-of-two size shared with the kernel through mmap, indexed by
// free-running 32-bit head and tail counters. The methods follow liburing's
// io_uring_get_sqe, io_uring_submit, io_uring_submit_and_wait,
// io_uring_peek_cqe and io_uring_cq_advance loosely.
//
// A request's life:
//
//	sqe := r.GetSQE()              // nil when the SQ is full
//	sqe.PrepRead(fd, buf, off)     // or PrepWrite, PrepFsync, PrepNop
//	sqe.UserData = id              // comes back in the CQE
//	r.Submit()                     // io_uring_enter: the kernel takes the SQEs
//	...
//	cqe := r.PeekCQE()             // or WaitCQE / PeekBatch
//	use cqe.UserData, cqe.Res      // Res < 0 is -errno
//	r.CQAdvance(1)
//
// # Memory ordering
//
// The program is the only writer of the SQ tail and the CQ head; the kernel
// is the only writer of the SQ head and the CQ tail. The program publishes
// filled SQEs with an atomic store of the SQ tail (a release), reads the SQ
// head and the CQ tail with atomic loads (acquires) before it reuses an SQE
// slot or reads a CQE, and returns CQEs to the kernel with an atomic store of
// the CQ head after it has copied them. Go's sync/atomic operations are
// sequentially consistent, which is at least as strong as the kernel's
// smp_load_acquire/smp_store_release pairing.
//
// # Buffers
//
// The kernel reads or writes a buffer at any time between Submit and the
// request's CQE. The caller must keep the buffer reachable until then (the
// Go heap does not move objects, so a reachable heap buffer stays put) and
// must not pass memory that may live on a goroutine stack, which the runtime
// moves when the stack grows: use memory from make with a non-constant size
// or from device.AlignedBuf, and hold a reference in a heap object.
//
// # Concurrency
//
// A Ring is not safe for concurrent use. The submission side (GetSQE,
// GetSQE128, Submit, SubmitAndWait, SQSpace) and the completion side (PeekCQE,
// PeekBatch, CQAdvance, CQReady, WaitCQE) may each be driven by one
// goroutine, and the two goroutines may differ, except on a ring created with
// SetupSingleIssuer, where every io_uring_enter must come from the OS thread
// that created the ring (lock it with runtime.LockOSThread).
//
// Enter, SubmitPublished and SQPollWakeup read no user-side submission
// state and may run on any goroutine at any time. Where the kernel queues
// completion work for "the submitting task" (task work: driver commands
// such as FUSE's complete that way), it is the OS thread that ran the
// io_uring_enter that issued the request, or the SQ polling thread on a
// SetupSQPoll ring.
//
// # Errors
//
// System call failures are returned as errors wrapping the unix.Errno. A
// failed request is reported in its CQE as a negative Res (-errno); CQE.Err
// converts it.
package uring

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// Opcodes (enum io_uring_op in include/uapi/linux/io_uring.h). Only the ones
// this package prepares are listed.
const (
	// OpNop does nothing and completes with Res 0.
	OpNop uint8 = 0
	// OpFsync is fsync(2), or fdatasync(2) with FsyncDatasync.
	OpFsync uint8 = 3
	// OpRead is pread(2) into a single buffer.
	OpRead uint8 = 22
	// OpWrite is pwrite(2) from a single buffer.
	OpWrite uint8 = 23
	// OpURingCmd (IORING_OP_URING_CMD) passes a driver-defined command to
	// the file's uring_cmd handler: the command number in the low 32 bits
	// of the off union (cmd_op), the driver's arguments in the SQE's
	// command area (SQE128.Cmd) and addr/len as the driver defines them.
	OpURingCmd uint8 = 46
)

// FsyncDatasync (IORING_FSYNC_DATASYNC) in SQE.OpFlags of an OpFsync makes
// it an fdatasync.
const FsyncDatasync uint32 = 1 << 0

// SQE flags (IOSQE_*), for SQE.Flags.
const (
	// SQEIODrain (IOSQE_IO_DRAIN) starts the request only after every
	// earlier request has completed.
	SQEIODrain uint8 = 1 << 1
	// SQEIOLink (IOSQE_IO_LINK) starts the next SQE only after this one
	// completes successfully.
	SQEIOLink uint8 = 1 << 2
	// SQEAsync (IOSQE_ASYNC) always punts the request to an io-wq worker.
	SQEAsync uint8 = 1 << 4
)

// Setup flags (IORING_SETUP_*), for Params.Flags.
const (
	// SetupIOPoll busy-polls for completions (polled block devices only).
	SetupIOPoll uint32 = 1 << 0
	// SetupSQPoll makes a kernel thread poll the SQ and issue the
	// requests: Params.SQThreadIdle is how many milliseconds it keeps
	// polling after the last SQE before it sleeps (SQNeedWakeup; wake it
	// with SQPollWakeup). Requests are issued by that thread, so work the
	// kernel queues for "the submitting task" runs there.
	SetupSQPoll uint32 = 1 << 1
	// SetupCQSize takes the CQ size from Params.CQEntries.
	SetupCQSize uint32 = 1 << 3
	// SetupClamp clamps too-large entry counts instead of failing.
	SetupClamp uint32 = 1 << 4
	// SetupAttachWQ shares the async backend, and with SetupSQPoll the SQ
	// polling thread, of the ring whose fd is Params.WQFd.
	SetupAttachWQ uint32 = 1 << 5
	// SetupSubmitAll keeps submitting the batch after an SQE fails.
	SetupSubmitAll uint32 = 1 << 7
	// SetupSQE128 makes every SQE 128 bytes: the 64-byte SQE followed by
	// 64 more bytes, so that the command area that starts at byte 48 is
	// 80 bytes long (Linux 5.19). Use GetSQE128 on such a ring.
	SetupSQE128 uint32 = 1 << 10
	// SetupCoopTaskrun runs completion task work only when the task enters
	// the kernel anyway, instead of interrupting it (Linux 5.19).
	SetupCoopTaskrun uint32 = 1 << 8
	// SetupTaskrunFlag sets SQTaskrun in the SQ flags when task work is
	// pending; used with SetupCoopTaskrun (Linux 5.19).
	SetupTaskrunFlag uint32 = 1 << 9
	// SetupSingleIssuer promises that one thread, the one that created the
	// ring, does every submission (Linux 6.0).
	SetupSingleIssuer uint32 = 1 << 12
	// SetupDeferTaskrun runs completion task work only inside
	// io_uring_enter with EnterGetEvents; requires SetupSingleIssuer
	// (Linux 6.1).
	SetupDeferTaskrun uint32 = 1 << 13
)

// Feature flags (IORING_FEAT_*), reported in Params.Features.
const (
	// FeatSingleMmap: the SQ and CQ rings share one mapping.
	FeatSingleMmap uint32 = 1 << 0
	// FeatNoDrop: the kernel never drops CQEs; it queues overflow
	// internally and io_uring_enter may fail with EBUSY until the CQ is
	// drained.
	FeatNoDrop uint32 = 1 << 1
	// FeatSubmitStable: data for a request is consumed at submission.
	FeatSubmitStable uint32 = 1 << 2
	// FeatNativeWorkers: io-wq workers are threads of the submitting
	// process.
	FeatNativeWorkers uint32 = 1 << 9
)

// io_uring_enter flags (IORING_ENTER_*).
const (
	// EnterGetEvents waits for minComplete completions (and, on a
	// SetupDeferTaskrun ring, runs pending completion work).
	EnterGetEvents uint32 = 1 << 0
	// EnterSQWakeup wakes a sleeping SQ polling thread.
	EnterSQWakeup uint32 = 1 << 1
)

// SQ ring flags (IORING_SQ_*), returned by SQFlags.
const (
	// SQNeedWakeup: the SQPOLL thread sleeps.
	SQNeedWakeup uint32 = 1 << 0
	// SQCQOverflow: completions overflowed the CQ and wait in the kernel.
	SQCQOverflow uint32 = 1 << 1
	// SQTaskrun: completion task work is pending (SetupTaskrunFlag).
	SQTaskrun uint32 = 1 << 2
)

// mmap offsets (IORING_OFF_*).
const (
	offSQRing uint64 = 0
	offCQRing uint64 = 0x8000000
	offSQEs   uint64 = 0x10000000
)

// SQE is a submission queue entry, struct io_uring_sqe (64 bytes). Only the
// members of the unions that this package uses are named.
type SQE struct {
	Opcode uint8
	Flags  uint8
	Ioprio uint16
	Fd     int32
	// Off is the file offset (union with addr2).
	Off uint64
	// Addr is the buffer address (union with splice_off_in).
	Addr uint64
	// Len is the buffer length in bytes.
	Len uint32
	// OpFlags is the per-opcode flags union: rw_flags, fsync_flags, ...
	OpFlags uint32
	// UserData is returned unchanged in the request's CQE.
	UserData uint64
	// BufIndex is the registered buffer index (union with buf_group).
	BufIndex    uint16
	Personality uint16
	// SpliceFdIn is a union with file_index and addr_len.
	SpliceFdIn int32
	Addr3      uint64
	_          uint64
}

// CQE is a completion queue entry, struct io_uring_cqe (16 bytes).
type CQE struct {
	// UserData is the SQE's UserData.
	UserData uint64
	// Res is the result: a byte count or 0 on success, -errno on failure.
	Res int32
	// Flags are IORING_CQE_F_* flags.
	Flags uint32
}

// Err returns nil for a non-negative Res and the unix.Errno -Res otherwise.
func (c *CQE) Err() error {
	if c.Res >= 0 {
		return nil
	}
	return syscall.Errno(-c.Res)
}

// SQRingOffsets is struct io_sqring_offsets: byte offsets of the SQ ring's
// members in its mapping.
type SQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Flags       uint32
	Dropped     uint32
	Array       uint32
	Resv1       uint32
	UserAddr    uint64
}

// CQRingOffsets is struct io_cqring_offsets: byte offsets of the CQ ring's
// members in its mapping.
type CQRingOffsets struct {
	Head        uint32
	Tail        uint32
	RingMask    uint32
	RingEntries uint32
	Overflow    uint32
	CQEs        uint32
	Flags       uint32
	Resv1       uint32
	UserAddr    uint64
}

// Params is struct io_uring_params (120 bytes): what io_uring_setup is asked
// for, and what the kernel reports back.
type Params struct {
	SQEntries    uint32
	CQEntries    uint32
	Flags        uint32
	SQThreadCPU  uint32
	SQThreadIdle uint32
	Features     uint32
	WQFd         uint32
	Resv         [3]uint32
	SQOff        SQRingOffsets
	CQOff        CQRingOffsets
}

// SQE128 is one entry of a SetupSQE128 ring: the ordinary SQE and 64 more
// bytes. Bytes 48 to 127 (addr3 onwards) are the command area of an
// OpURingCmd, returned by Cmd.
type SQE128 struct {
	SQE
	_ [SQE128Size - SQESize]byte
}

// Cmd returns the 80-byte command area (the cmd[] member of struct
// io_uring_sqe, at byte 48) of s. It aliases s: GetSQE128 zeroes it, the
// caller fills it before submitting.
func (s *SQE128) Cmd() []byte {
	b := (*[SQE128Size]byte)(unsafe.Pointer(s))
	return b[SQECmdOffset:SQE128Size:SQE128Size]
}

// Sizes the kernel ABI fixes; checked by the tests and at compile time.
const (
	SQESize    = 64
	SQE128Size = 128
	// SQECmdOffset is the offset of the command area in an SQE; it is
	// SQE128Size-SQECmdOffset = 80 bytes long in a SQE128.
	SQECmdOffset = 48
	CQESize      = 16
	ParamsSize   = 120
)

// Compile-time layout checks: each array has a negative length, and the
// package fails to build, if a struct has the wrong size.
var (
	_ [SQESize - unsafe.Sizeof(SQE{})]byte
	_ [unsafe.Sizeof(SQE{}) - SQESize]byte
	_ [SQE128Size - unsafe.Sizeof(SQE128{})]byte
	_ [unsafe.Sizeof(SQE128{}) - SQE128Size]byte
	_ [CQESize - unsafe.Sizeof(CQE{})]byte
	_ [unsafe.Sizeof(CQE{}) - CQESize]byte
	_ [ParamsSize - unsafe.Sizeof(Params{})]byte
	_ [unsafe.Sizeof(Params{}) - ParamsSize]byte
)

// ErrClosed is returned by a Ring method called after Close.
var ErrClosed = errors.New("uring: ring closed")

// PrepNop makes s a no-op request.
func (s *SQE) PrepNop() {
	s.Opcode = OpNop
	s.Fd = -1
}

// PrepRead makes s read len(buf) bytes at offset off of fd into buf, like
// pread(2). See the package documentation on keeping buf alive.
func (s *SQE) PrepRead(fd int, buf []byte, off uint64) {
	s.prepRW(OpRead, fd, buf, off)
}

// PrepWrite makes s write buf at offset off of fd, like pwrite(2). See the
// package documentation on keeping buf alive.
func (s *SQE) PrepWrite(fd int, buf []byte, off uint64) {
	s.prepRW(OpWrite, fd, buf, off)
}

func (s *SQE) prepRW(op uint8, fd int, buf []byte, off uint64) {
	s.Opcode = op
	s.Fd = int32(fd)
	s.Off = off
	s.Addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	s.Len = uint32(len(buf))
}

// PrepFsync makes s an fsync of fd, or an fdatasync if flags has
// FsyncDatasync.
func (s *SQE) PrepFsync(fd int, flags uint32) {
	s.Opcode = OpFsync
	s.Fd = int32(fd)
	s.OpFlags = flags
}

// PrepURingCmd makes s an OpURingCmd: command cmdOp for the driver behind
// fd, with addr and length as the driver defines them (nil and 0 when
// unused). The driver's arguments go in the command area, which needs a
// SetupSQE128 ring (see SQE128.Cmd). addr must point to memory that stays
// put until the driver has read it (the kernel reads it during submission
// for FUSE's REGISTER; mmap'd memory is simplest).
func (s *SQE) PrepURingCmd(fd int, cmdOp uint32, addr unsafe.Pointer, length uint32) {
	s.Opcode = OpURingCmd
	s.Fd = int32(fd)
	// cmd_op is the first 32-bit member of the off union.
	s.Off = 0
	*(*uint32)(unsafe.Pointer(&s.Off)) = cmdOp
	s.Addr = uint64(uintptr(addr))
	s.Len = length
}

// setup is io_uring_setup(2).
func setup(entries uint32, p *Params) (int, error) {
	fd, _, errno := syscall.Syscall(sysIOUringSetup, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// enter is io_uring_enter(2) without a signal mask.
func enter(fd int, toSubmit, minComplete, flags uint32) (int, error) {
	n, _, errno := syscall.Syscall6(sysIOUringEnter, uintptr(fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// errorf wraps a system call error with the call's name.
func errorf(call string, err error) error {
	return fmt.Errorf("uring: %s: %w", call, err)
}
