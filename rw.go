package sluice

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
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
	// keepPrivs skips the set-user-ID/capability stripping (RWFKeepPrivs).
	keepPrivs bool
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
		in:        f.in,
		buf:       p,
		off:       off,
		direct:    f.flags&O_DIRECT != 0,
		nowait:    flags&RWFNoWait != 0,
		dsync:     f.flags&(O_DSYNC|O_SYNC) != 0 || flags&(RWFDsync|RWFSync) != 0,
		append:    f.flags&O_APPEND != 0 || flags&RWFAppend != 0,
		keepPrivs: flags&RWFKeepPrivs != 0,
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
// now (xfs_ilock_iocb); otherwise it returns the NOWAIT EAGAIN.
func (in *inode) lockIO(m iolock.Mode, nowait bool) error {
	if nowait {
		if in.io.TryLock(m) {
			return nil
		}
		return in.fs.nowaitEAGAIN(nwLockBusy)
	}
	in.io.Lock(m)
	return nil
}

// nowaitReason says why a NOWAIT request gave up: the step that would have
// blocked.
type nowaitReason uint8

const (
	nwLockBusy      nowaitReason = iota // the I/O lock is not free now
	nwNeedExclusive                     // the write needs the lock exclusive (gap past EOF, privileges to strip)
	nwSubBlockExcl                      // a sub-block direct write needs the exclusive route
	nwDrain                             // direct I/O in flight would have to be drained
	nwCachedPages                       // cached or dirty pages in the range would have to be written back or dropped
	nwAllocate                          // blocks would have to be allocated
	nwSync                              // the write would have to be written through and synced (O_DSYNC)
	nwPageBusy                          // a page is locked or under I/O
	nwPageRead                          // a page would have to be read from the device first
	nwCacheFull                         // the page cache has no room without waiting
)

// nowaitEAGAIN is the one way a NOWAIT request gives up (RWF_NOWAIT, or the
// ring's inline attempt): it counts the decision and its reason and
// returns syscall.EAGAIN, which callers return unwrapped, before any side
// effect (a buffered read or write that already copied bytes returns the
// short count instead). Every EAGAIN the engine returns comes from here;
// the overwrite-only attempt's own fallback is errNeedExclusive, which
// never leaves the engine.
func (fs *FS) nowaitEAGAIN(why nowaitReason) error {
	c := &fs.counters
	c.NoWaitEAGAIN.Add(1)
	switch why {
	case nwLockBusy:
		c.NoWaitLockBusy.Add(1)
	case nwNeedExclusive, nwSubBlockExcl:
		c.NoWaitNeedExclusive.Add(1)
	case nwDrain:
		c.NoWaitDrain.Add(1)
	case nwCachedPages:
		c.NoWaitCachedPages.Add(1)
	case nwAllocate:
		c.NoWaitAllocate.Add(1)
	case nwSync:
		c.NoWaitSync.Add(1)
	case nwPageBusy, nwPageRead, nwCacheFull:
		c.NoWaitPageCache.Add(1)
	}
	return syscall.EAGAIN
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

// ioBatch is a set of device requests that complete as one: once the
// last of them completes, it calls its owner's batchDone (or, without an
// owner, finish) once, with the first error. It submits through fs.dev,
// which counts the requests.
type ioBatch struct {
	fs      *FS
	pending atomic.Int32
	errMu   lockrank.Mutex[lockrank.Leaf]
	err     error
	reqs    []device.Request
	inline  [2]device.Request
	doneFn  func(*device.Request, error) // b.done, bound once
	owner   batchOwner
	finish  func(err error)
}

// batchOwner is told when a batch completes.
type batchOwner interface{ batchDone(err error) }

func newBatch(fs *FS) *ioBatch {
	b := &ioBatch{}
	b.init(fs)
	return b
}

func (b *ioBatch) init(fs *FS) {
	b.fs = fs
	b.reqs = b.inline[:0]
	b.doneFn = b.done
}

// reset makes a finished batch ready for reuse.
func (b *ioBatch) reset() {
	clear(b.inline[:])
	b.reqs = b.inline[:0]
	b.err = nil
}

// add appends a request for later submission.
func (b *ioBatch) add(op device.Op, buf []byte, off int64) {
	b.reqs = append(b.reqs, device.Request{Op: op, Buf: buf, Off: off})
}

// submit starts every request; completion is reported once all have
// completed. It must be called at most once, with at least one request.
func (b *ioBatch) submit() {
	dev := b.fs.dev
	b.pending.Store(int32(len(b.reqs)))
	for i := range b.reqs {
		r := &b.reqs[i]
		r.Done = b.doneFn
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
		err := eio(b.err)
		b.errMu.Unlock()
		if b.owner != nil {
			b.owner.batchDone(err)
		} else {
			b.finish(err)
		}
	}
}

// run submits the batch and waits for it.
func (b *ioBatch) run() error {
	if len(b.reqs) == 0 {
		return nil
	}
	ch := make(chan error, 1)
	b.finish = func(err error) { ch <- err }
	b.submit()
	return <-ch
}

// dioOp is one direct read or write in flight: its device requests and
// what to do when they complete. dioOps are pooled, so the I/O path
// allocates almost nothing per request.
type dioOp struct {
	b  ioBatch
	in *inode
	k  *kiocb
	// Set by the path before submission.
	write    bool
	n        int         // bytes to report on success (reads)
	off, end int64       // the byte range written (writes)
	conv     []fileRange // unwritten ranges to convert (writes)
	mode     iolock.Mode // lock mode held (writes)
	holdLock bool        // unlock only at completion (writes)
	extends  bool        // the write ends past the size at submission (writes)
	segs     [4]extmap.Segment
	convBuf  [2]fileRange
	// Completion of a synchronous request.
	ch     chan struct{}
	result struct {
		n   int
		err error
	}
}

var dioPool = sync.Pool{New: func() any {
	op := &dioOp{ch: make(chan struct{}, 1)}
	op.b.owner = op
	return op
}}

func newDioOp(in *inode, k *kiocb) *dioOp {
	op := dioPool.Get().(*dioOp)
	op.b.init(in.fs)
	op.in, op.k = in, k
	return op
}

func (op *dioOp) free() {
	op.b.reset()
	op.in, op.k, op.conv = nil, nil, nil
	op.write, op.holdLock, op.extends = false, false, false
	op.result.n, op.result.err = 0, nil
	dioPool.Put(op)
}

// batchDone runs when the op's device requests have completed.
func (op *dioOp) batchDone(err error) {
	if !op.write {
		op.in.dio.End()
		if err != nil {
			op.complete(0, err)
		} else {
			op.complete(op.n, nil)
		}
		return
	}
	in := op.in
	if len(op.conv) > 0 || op.k.dsync || op.extends || in.pages.Len() > 0 {
		// Work that may block (a metadata commit, a sync, page
		// invalidation) runs off the device's completion goroutine,
		// like the kernel's s_dio_done_wq.
		go op.finishWrite(err)
	} else {
		op.finishWrite(err)
	}
}

func (op *dioOp) finishWrite(err error) {
	in := op.in
	in.finishDirectWrite(op.off, op.end, op.conv, op.extends, err)
	if err == nil && op.k.dsync {
		err = in.fs.group.sync()
	}
	if op.holdLock {
		in.io.Unlock(op.mode)
	}
	if err != nil {
		op.complete(0, err)
	} else {
		op.complete(int(op.end-op.off), nil)
	}
}

// complete ends the request: an asynchronous one's done is called; a
// synchronous one's waiter is woken.
func (op *dioOp) complete(n int, err error) {
	if done := op.k.done; done != nil {
		op.free()
		done(n, err)
		return
	}
	op.result.n, op.result.err = n, err
	op.ch <- struct{}{}
}

// wait returns the result of a synchronous request (and frees the op), or
// errQueued for an asynchronous one.
func (op *dioOp) wait() (int, error) {
	if op.k.done != nil {
		return 0, errQueued
	}
	<-op.ch
	n, err := op.result.n, op.result.err
	op.free()
	return n, err
}

func roundUp(x, to int64) int64   { return (x + to - 1) / to * to }
func roundDown(x, to int64) int64 { return x / to * to }
