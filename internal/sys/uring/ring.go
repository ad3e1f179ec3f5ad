package uring

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	sysIOUringSetup = unix.SYS_IO_URING_SETUP
	sysIOUringEnter = unix.SYS_IO_URING_ENTER
)

// Ring is one io_uring instance with its three shared mappings. See the
// package documentation for the concurrency rules.
type Ring struct {
	fd     int
	params Params

	// Mappings. cqMem aliases sqMem under FeatSingleMmap.
	sqMem, cqMem, sqeMem []byte

	// Submission side. sqHead is written by the kernel, sqTail by us.
	sqHead    *uint32
	sqTail    *uint32
	sqFlags   *uint32
	sqDropped *uint32
	sqMask    uint32
	sqEntries uint32
	// sqeSize is SQESize, or SQE128Size on a SetupSQE128 ring.
	sqeSize uint32
	// sqeTail counts SQEs handed out by GetSQE. SQEs in
	// [*sqTail, sqeTail) are filled but not yet published.
	sqeTail uint32

	// Completion side. cqTail is written by the kernel, cqHead by us.
	cqHead     *uint32
	cqTail     *uint32
	cqOverflow *uint32
	cqMask     uint32
	cqEntries  uint32
	cqes       []CQE

	closed bool
}

// New creates a ring with at least entries SQ entries (rounded up to a power
// of two by the kernel) and maps it. p, which may be nil, supplies
// Params.Flags (Setup*), and Params.CQEntries with SetupCQSize; the kernel's
// answer is available from Params. On a SetupSingleIssuer ring the calling
// OS thread becomes the only one allowed to submit.
//
// New fails with an error wrapping ENOSYS when the kernel lacks io_uring,
// EPERM when it is disabled (sysctl kernel.io_uring_disabled) and EINVAL for
// flags the kernel does not know.
func New(entries uint32, p *Params) (*Ring, error) {
	var params Params
	if p != nil {
		params = *p
	}
	fd, err := setup(entries, &params)
	if err != nil {
		return nil, errorf("io_uring_setup", err)
	}
	r := &Ring{fd: fd, params: params}
	if err := r.mmap(); err != nil {
		r.unmap()
		unix.Close(fd)
		return nil, err
	}
	return r, nil
}

// mmap maps the rings and the SQE array and resolves the shared pointers.
func (r *Ring) mmap() error {
	p := &r.params
	sqSize := int(p.SQOff.Array) + int(p.SQEntries)*4
	cqSize := int(p.CQOff.CQEs) + int(p.CQEntries)*CQESize
	single := p.Features&FeatSingleMmap != 0
	if single && cqSize > sqSize {
		sqSize = cqSize
	}
	var err error
	r.sqMem, err = unix.Mmap(r.fd, int64(offSQRing), sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return errorf("mmap SQ ring", err)
	}
	if single {
		r.cqMem = r.sqMem
	} else {
		r.cqMem, err = unix.Mmap(r.fd, int64(offCQRing), cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return errorf("mmap CQ ring", err)
		}
	}
	r.sqeSize = SQESize
	if p.Flags&SetupSQE128 != 0 {
		r.sqeSize = SQE128Size
	}
	r.sqeMem, err = unix.Mmap(r.fd, int64(offSQEs), int(p.SQEntries)*int(r.sqeSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return errorf("mmap SQEs", err)
	}

	r.sqHead = u32At(r.sqMem, p.SQOff.Head)
	r.sqTail = u32At(r.sqMem, p.SQOff.Tail)
	r.sqFlags = u32At(r.sqMem, p.SQOff.Flags)
	r.sqDropped = u32At(r.sqMem, p.SQOff.Dropped)
	r.sqMask = *u32At(r.sqMem, p.SQOff.RingMask)
	r.sqEntries = *u32At(r.sqMem, p.SQOff.RingEntries)
	// The SQ array maps ring positions to SQE indices. Make it the
	// identity once, so publishing an SQE is just a tail store.
	array := unsafe.Slice(u32At(r.sqMem, p.SQOff.Array), r.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.sqeTail = atomic.LoadUint32(r.sqTail)

	r.cqHead = u32At(r.cqMem, p.CQOff.Head)
	r.cqTail = u32At(r.cqMem, p.CQOff.Tail)
	r.cqOverflow = u32At(r.cqMem, p.CQOff.Overflow)
	r.cqMask = *u32At(r.cqMem, p.CQOff.RingMask)
	r.cqEntries = *u32At(r.cqMem, p.CQOff.RingEntries)
	r.cqes = unsafe.Slice((*CQE)(unsafe.Pointer(&r.cqMem[p.CQOff.CQEs])), r.cqEntries)
	return nil
}

func u32At(mem []byte, off uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

func (r *Ring) unmap() {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
	}
	if len(r.cqMem) > 0 && &r.cqMem[0] != &r.sqMem[0] {
		unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		unix.Munmap(r.sqMem)
	}
	r.sqMem, r.cqMem, r.sqeMem, r.cqes = nil, nil, nil, nil
}

// Close unmaps the ring and closes its file descriptor. The kernel cancels
// requests still in flight; their buffers may still be written until the
// kernel has torn the ring down, so callers should reap every request before
// Close. A second Close returns ErrClosed.
func (r *Ring) Close() error {
	if r.closed {
		return ErrClosed
	}
	r.closed = true
	r.unmap()
	if err := unix.Close(r.fd); err != nil {
		return errorf("close", err)
	}
	return nil
}

// Fd returns the ring's file descriptor.
func (r *Ring) Fd() int { return r.fd }

// Params returns the parameters the kernel reported at setup: actual entry
// counts, Features and the ring offsets.
func (r *Ring) Params() Params { return r.params }

// SQEntries returns the number of SQ entries.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries returns the number of CQ entries. A caller that never has more
// than CQEntries requests in flight can never overflow the CQ.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// SQFlags returns the kernel's SQ ring flags (SQCQOverflow, SQTaskrun, ...).
func (r *Ring) SQFlags() uint32 { return atomic.LoadUint32(r.sqFlags) }

// CQOverflow returns the kernel's count of CQEs that did not fit in the CQ.
func (r *Ring) CQOverflow() uint32 { return atomic.LoadUint32(r.cqOverflow) }

// GetSQE returns the next free, zeroed SQE, or nil if the SQ is full (every
// entry is filled and not yet consumed by the kernel: Submit, then retry).
// The SQE is published to the kernel by the next Submit or SubmitAndWait.
// On a SetupSQE128 ring it returns the first 64 bytes of a zeroed 128-byte
// entry; GetSQE128 gives the whole entry.
func (r *Ring) GetSQE() *SQE {
	p := r.nextSQE()
	if p == nil {
		return nil
	}
	if r.sqeSize == SQE128Size {
		sqe := (*SQE128)(p)
		*sqe = SQE128{}
		return &sqe.SQE
	}
	sqe := (*SQE)(p)
	*sqe = SQE{}
	return sqe
}

// GetSQE128 is GetSQE for a SetupSQE128 ring: it returns the next free,
// zeroed 128-byte SQE, or nil if the SQ is full. It also returns nil on a
// ring without SetupSQE128, whose entries have no room for a command area.
func (r *Ring) GetSQE128() *SQE128 {
	if r.sqeSize != SQE128Size {
		return nil
	}
	p := r.nextSQE()
	if p == nil {
		return nil
	}
	sqe := (*SQE128)(p)
	*sqe = SQE128{}
	return sqe
}

// nextSQE hands out the next free SQE slot, or nil if the SQ is full.
func (r *Ring) nextSQE() unsafe.Pointer {
	head := atomic.LoadUint32(r.sqHead)
	if r.sqeTail-head >= r.sqEntries {
		return nil
	}
	off := uintptr(r.sqeTail&r.sqMask) * uintptr(r.sqeSize)
	r.sqeTail++
	return unsafe.Pointer(&r.sqeMem[off])
}

// SQESize returns the size of the ring's SQEs: SQESize, or SQE128Size on a
// SetupSQE128 ring.
func (r *Ring) SQESize() int { return int(r.sqeSize) }

// SQSpace returns how many more SQEs GetSQE can return before a Submit.
func (r *Ring) SQSpace() uint32 {
	return r.sqEntries - (r.sqeTail - atomic.LoadUint32(r.sqHead))
}

// SQPending returns the number of SQEs handed out by GetSQE and not yet
// consumed by the kernel.
func (r *Ring) SQPending() uint32 {
	return r.sqeTail - atomic.LoadUint32(r.sqHead)
}

// SQTail returns the number of SQEs handed out by GetSQE since the ring
// was created (free-running, as the ring's counters are): SQPending of them
// are not consumed yet. Like GetSQE, it reads the submission side.
func (r *Ring) SQTail() uint32 { return r.sqeTail }

// flushSQ publishes every SQE handed out by GetSQE and returns how many SQEs
// the kernel has not consumed yet.
func (r *Ring) flushSQ() uint32 {
	if atomic.LoadUint32(r.sqTail) != r.sqeTail {
		atomic.StoreUint32(r.sqTail, r.sqeTail)
	}
	return r.sqeTail - atomic.LoadUint32(r.sqHead)
}

// Submit publishes the filled SQEs and hands them to the kernel with one
// io_uring_enter, without waiting for completions. It returns the number of
// SQEs the kernel consumed; with nothing to submit it makes no system call.
// On a SetupDeferTaskrun ring completions are only posted inside
// SubmitAndWait or WaitCQE.
func (r *Ring) Submit() (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	n := r.flushSQ()
	if n == 0 {
		return 0, nil
	}
	return enterRetry(r.fd, n, 0, 0)
}

// SubmitAndWait publishes the filled SQEs, hands them to the kernel and waits
// until at least waitNr CQEs are ready, all in one io_uring_enter with
// EnterGetEvents (which also runs deferred completion work, so
// SubmitAndWait(0) is how a SetupDeferTaskrun ring collects completions
// without blocking). It returns the number of SQEs the kernel consumed.
// Interrupted waits (EINTR, common in Go programs, whose runtime signals
// threads to preempt them) are retried.
func (r *Ring) SubmitAndWait(waitNr uint32) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	return r.Enter(r.Publish(), waitNr)
}

// Publish makes every SQE handed out by GetSQE visible to the kernel,
// without a system call, and returns how many published SQEs the kernel
// has not consumed yet. Goroutines that share a ring's submission side
// serialise GetSQE and Publish (and the SQE writes between them); Enter and
// SubmitPublished may then run on any goroutine at any time.
func (r *Ring) Publish() uint32 { return r.flushSQ() }

// Enter hands up to toSubmit published SQEs to the kernel and waits until
// at least waitNr CQEs are ready, in one io_uring_enter with
// EnterGetEvents, retrying on EINTR. It reads none of the ring's user-side
// submission state, so it may run while another goroutine fills SQEs. When
// the kernel finds fewer than toSubmit published SQEs (another goroutine
// submitted some), it submits those and returns without waiting.
func (r *Ring) Enter(toSubmit, waitNr uint32) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	return enterRetry(r.fd, toSubmit, waitNr, EnterGetEvents)
}

// SubmitPublished hands every published SQE to the kernel without waiting
// for completions (with nothing published the kernel returns at once). Like
// Enter, it may run while another goroutine fills SQEs.
func (r *Ring) SubmitPublished() (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	// The kernel submits min(toSubmit, published and unconsumed).
	return enterRetry(r.fd, r.sqEntries, 0, 0)
}

// SQPollWakeup wakes the SQ polling thread of a SetupSQPoll ring if it
// sleeps (SQNeedWakeup), so that it submits the published SQEs; otherwise
// it makes no system call. Like Enter, it may run on any goroutine.
func (r *Ring) SQPollWakeup() error {
	if r.closed {
		return ErrClosed
	}
	// The atomic load of the flags is ordered after the caller's atomic
	// store of the SQ tail (Publish), as liburing's smp_mb orders them.
	if atomic.LoadUint32(r.sqFlags)&SQNeedWakeup == 0 {
		return nil
	}
	_, err := enterRetry(r.fd, 0, 0, EnterSQWakeup)
	return err
}

// enterRetry calls io_uring_enter, retrying on EINTR: io_uring_enter
// reports an interrupted wait as EINTR only when it submitted nothing in
// that call, so the retry asks for the same.
func enterRetry(fd int, toSubmit, minComplete, flags uint32) (int, error) {
	for {
		n, err := enter(fd, toSubmit, minComplete, flags)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, unix.EINTR) {
			return 0, errorf("io_uring_enter", err)
		}
	}
}

// CQReady returns the number of CQEs ready to be reaped.
func (r *Ring) CQReady() uint32 {
	return atomic.LoadUint32(r.cqTail) - *r.cqHead
}

// PeekCQE returns the oldest unreaped CQE, or nil if there is none, without
// entering the kernel. The CQE stays valid until CQAdvance.
func (r *Ring) PeekCQE() *CQE {
	head := *r.cqHead // only we write it
	if head == atomic.LoadUint32(r.cqTail) {
		return nil
	}
	return &r.cqes[head&r.cqMask]
}

// CQAdvance returns n reaped CQEs to the kernel.
func (r *Ring) CQAdvance(n uint32) {
	atomic.StoreUint32(r.cqHead, *r.cqHead+n)
}

// PeekBatch copies up to len(dst) ready CQEs into dst, returns them to the
// kernel and returns how many it copied. It does not enter the kernel.
func (r *Ring) PeekBatch(dst []CQE) int {
	head := *r.cqHead
	ready := atomic.LoadUint32(r.cqTail) - head
	n := uint32(len(dst))
	if ready < n {
		n = ready
	}
	for i := uint32(0); i < n; i++ {
		dst[i] = r.cqes[(head+i)&r.cqMask]
	}
	if n > 0 {
		atomic.StoreUint32(r.cqHead, head+n)
	}
	return int(n)
}

// WaitCQE submits what is pending and waits until a CQE is ready, then
// returns it as PeekCQE does.
func (r *Ring) WaitCQE() (*CQE, error) {
	for {
		if cqe := r.PeekCQE(); cqe != nil {
			return cqe, nil
		}
		if _, err := r.SubmitAndWait(1); err != nil {
			return nil, err
		}
	}
}
