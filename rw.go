package sluice

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/iolock"
)

// errQueued is returned by a path that accepted an asynchronous request
// (kiocb.done set): done will be called later (the kernel's -EIOCBQUEUED).
var errQueued = errors.New("sluice: request queued")

// kiocb is one read or write request, the kernel's struct kiocb: what to
// transfer, where, with which flags, and how to complete it.
type kiocb struct {
	in     *inode
	buf    []byte
	off    int64
	direct bool
	nowait bool // RWF_NOWAIT or the ring's inline attempt: EAGAIN, never block
	dsync  bool // O_DSYNC, O_SYNC, RWF_DSYNC, RWF_SYNC
	append bool // O_APPEND or RWF_APPEND
	// done, when set, makes the request asynchronous: a path may return
	// errQueued and call done exactly once later, from any goroutine.
	done func(n int, err error)
	// asyncRetry, when set on an asynchronous buffered read (seed 003),
	// lets the read arm it as a callback on a page's unlock instead of
	// blocking: the read returns errQueued and asyncRetry re-issues it.
	// It runs on the unlocking goroutine and must not block.
	asyncRetry func()
}

func (f *File) newKiocb(p []byte, off int64, flags RWFlags) *kiocb {
	return &kiocb{
		in:     f.in,
		buf:    p,
		off:    off,
		direct: f.flags&O_DIRECT != 0,
		nowait: flags&RWFNoWait != 0,
		dsync:  f.flags&(O_DSYNC|O_SYNC) != 0 || flags&(RWFDsync|RWFSync) != 0,
		append: f.flags&O_APPEND != 0 || flags&RWFAppend != 0,
	}
}

func (f *File) pread(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.readable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	return f.in.read(f.newKiocb(p, off, flags))
}

func (f *File) pwrite(p []byte, off int64, flags RWFlags) (int, error) {
	if !f.writable() {
		return 0, syscall.EBADF
	}
	if err := verifyArea(off, len(p)); err != nil {
		return 0, err
	}
	return f.in.write(f.newKiocb(p, off, flags))
}

// read dispatches a read to the direct or buffered path.
func (in *inode) read(k *kiocb) (int, error) {
	in.mu.Lock()
	mode := in.attr.Mode
	in.mu.Unlock()
	if isDir(mode) {
		return 0, syscall.EISDIR
	}
	if k.direct {
		return in.directRead(k)
	}
	return in.bufferedRead(k)
}

// write dispatches a write to the direct or buffered path.
func (in *inode) write(k *kiocb) (int, error) {
	if err := in.fs.writable(); err != nil {
		return 0, err
	}
	if !k.append {
		if err := clampToMaxSize(k); err != nil {
			return 0, err
		}
	}
	if k.direct {
		return in.directWrite(k)
	}
	return in.bufferedWrite(k)
}

// clampToMaxSize gives EFBIG for a write at or past the maximum file size
// and shortens one that would cross it (generic_write_check_limits).
func clampToMaxSize(k *kiocb) error {
	if k.off >= maxFileSize {
		return syscall.EFBIG
	}
	if int64(len(k.buf)) > maxFileSize-k.off {
		k.buf = k.buf[:maxFileSize-k.off]
	}
	return nil
}

// lockIO takes the I/O lock in mode m, or with nowait only if it is free
// now; it reports whether it got the lock.
func (in *inode) lockIO(m iolock.Mode, nowait bool) bool {
	if nowait {
		if in.io.TryLock(m) {
			return true
		}
		in.fs.counters.NoWaitEAGAIN.Add(1)
		return false
	}
	in.io.Lock(m)
	return true
}

// drain waits for every direct I/O in flight (inode_dio_wait).
//
// Preconditions: in.io is held exclusive, so no new direct I/O starts.
func (in *inode) drain() {
	if in.dio.InFlight() > 0 {
		in.fs.counters.Drains.Add(1)
	}
	in.dio.Wait()
}

// size returns the published size.
func (in *inode) size() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return int64(in.attr.Size)
}

// ioBatch is a set of device requests that complete as one: it calls
// finish once, after the last of them completes, with the first error.
type ioBatch struct {
	pending atomic.Int32
	errMu   sync.Mutex
	err     error
	reqs    []device.Request
	finish  func(err error)
}

// add appends a request for later submission.
func (b *ioBatch) add(op device.Op, buf []byte, off int64) {
	b.reqs = append(b.reqs, device.Request{Op: op, Buf: buf, Off: off})
}

// submit starts every request; finish runs when all have completed. It
// must be called at most once, with at least one request.
func (b *ioBatch) submit(dev device.Device) {
	b.pending.Store(int32(len(b.reqs)))
	for i := range b.reqs {
		r := &b.reqs[i]
		r.Done = b.done
		if err := dev.Submit(r); err != nil {
			b.done(r, err)
		}
	}
}

func (b *ioBatch) done(_ *device.Request, err error) {
	if err != nil {
		b.errMu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.errMu.Unlock()
	}
	if b.pending.Add(-1) == 0 {
		b.errMu.Lock()
		err := b.err
		b.errMu.Unlock()
		b.finish(eio(err))
	}
}

// run submits the batch and waits for it.
func (b *ioBatch) run(dev device.Device) error {
	if len(b.reqs) == 0 {
		return nil
	}
	ch := make(chan error, 1)
	b.finish = func(err error) { ch <- err }
	b.submit(dev)
	return <-ch
}

// completion turns the end of an I/O into the end of a request: for a
// synchronous kiocb the caller waits for it; for an asynchronous one done
// is called.
type completion struct {
	k   *kiocb
	ch  chan struct{}
	n   int
	err error
}

func newCompletion(k *kiocb) *completion {
	c := &completion{k: k}
	if k.done == nil {
		c.ch = make(chan struct{})
	}
	return c
}

func (c *completion) complete(n int, err error) {
	if c.k.done != nil {
		c.k.done(n, err)
		return
	}
	c.n, c.err = n, err
	close(c.ch)
}

// wait returns the result for a synchronous request, or errQueued.
func (c *completion) wait() (int, error) {
	if c.k.done != nil {
		return 0, errQueued
	}
	<-c.ch
	return c.n, c.err
}

func roundUp(x, to int64) int64   { return (x + to - 1) / to * to }
func roundDown(x, to int64) int64 { return x / to * to }
