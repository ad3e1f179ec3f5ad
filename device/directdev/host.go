package directdev

import (
	"sync"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/sys/uring"
)

// Reads and writes submitted on a thread that lends its ring
// (uring.ThreadHost: an io_uring FUSE queue's owner, which starts READs
// and WRITEs itself, and lends its ring while it does) travel on that ring: the
// owner's next io_uring_enter submits them with its replies, and its
// reaping completes them and calls Done on its thread, which commits the
// reply the next enter submits. The device's own ring would cost an
// io_uring_enter to submit, its owner's wake-up to reap, and a wake-up of
// the FUSE owner for the reply. Flushes, and requests the host has no
// room for, take the device's ring. The rules of resultOf hold: a short
// transfer continues on the host, or, if it has no room, synchronously.

// hostOp is a request borrowed on a host ring. Pooled.
type hostOp struct {
	d       *Device
	r       *device.Request
	done    int // bytes transferred by earlier (short) completions
	retries int
}

var hostOpPool = sync.Pool{New: func() any { return new(hostOp) }}

// submitOnHost puts r on the calling thread's host ring and reports true,
// or reports false with nothing done.
func (d *Device) submitOnHost(r *device.Request) bool {
	if r.Op == device.OpFlush {
		return false
	}
	h := uring.ThreadHost()
	if h == nil {
		return false
	}
	op := hostOpPool.Get().(*hostOp)
	*op = hostOp{d: d, r: r}
	d.hosted.Add(1)
	if !h.Borrow(op) {
		d.hosted.Done()
		*op = hostOp{}
		hostOpPool.Put(op)
		return false
	}
	d.nHosted.Add(1)
	return true
}

// Prep implements uring.HostOp.
func (op *hostOp) Prep(sqe *uring.SQE) {
	prepTransfer(sqe, op.d.fd, op.r, op.done)
}

// Complete implements uring.HostOp.
func (op *hostOp) Complete(h uring.Host, res int32) {
	d, r := op.d, op.r
	done, more, err := resultOf(r, op.done, res)
	op.done = done
	if again(more, err, &op.retries, &d.nHostShort) {
		if h.Borrow(op) {
			return
		}
		err = d.finishSync(r, done)
	}
	*op = hostOp{}
	hostOpPool.Put(op)
	r.Done(r, err)
	d.hosted.Done()
}

// finishSync transfers the rest of r from byte done on with pread(2) or
// pwrite(2), under resultOf's rules.
func (d *Device) finishSync(r *device.Request, done int) error {
	rest := device.Request{Op: r.Op, Off: r.Off + int64(done), Buf: r.Buf[done:]}
	return (&preadBackend{d: d}).do(&rest)
}
