package sluice

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/lockrank"
	"github.com/sluicefs/sluice/iolock"
)

// The request types, from the caller's down to the device's: kiocb (one
// read or write as the caller asked for it), dioOp (a direct read or write
// in flight) and ioBatch (device requests that complete as one). They call
// nothing above them: a batch reports its completion to its owner
// (batchOwner; a dioOp's is the direct path's completion, in dio.go) or to
// its finish function.

// errQueued is returned by a path that accepted an asynchronous request
// (kiocb.done set): done will be called later (the kernel's -EIOCBQUEUED).
var errQueued = errors.New("sluice: request queued")

// kiocb is one read or write request, the kernel's struct kiocb: what to
// transfer, where, with which flags, and how to complete it. A synchronous
// request's kiocb (File.pread, File.pwrite) is pooled: nothing may keep a
// reference to it once the call has returned.
type kiocb struct {
	in     *inode
	buf    []byte
	off    int64
	direct bool
	nowait bool // RWF_NOWAIT or the ring's inline attempt: EAGAIN, never block
	dsync  bool // O_DSYNC, O_SYNC, RWF_DSYNC, RWF_SYNC
	sync   bool // O_SYNC, RWF_SYNC: the attributes durable too (syncWritten)
	append bool // O_APPEND or RWF_APPEND
	// keepPrivs skips the set-user-ID/capability stripping (RWFKeepPrivs).
	keepPrivs bool
	// dontcache asks for uncached buffered I/O (RWFDontCache): the pages
	// the request brings in or dirties are dropped once clean.
	dontcache bool
	// atomic asks for an untorn write (RWFAtomic), checked by
	// atomicWriteCheck before any other write path runs.
	atomic bool
	// rmw, when set, is what a sub-block direct write on a checksummed
	// volume writes instead of buf: buf merged into the whole blocks
	// around it, read first (widenToBlocks), from file offset rmwOff. The size published and the count returned stay buf's.
	rmw    []byte
	rmwOff int64
	// done, when set, makes the request asynchronous: a path may return
	// errQueued and call done exactly once later, from any goroutine.
	done func(n int, err error)
	// asyncRetry, when set on an asynchronous buffered read (seed 003),
	// lets the read arm it as a callback on a page's unlock instead of
	// blocking: the read returns errQueued and asyncRetry re-issues it.
	// It runs on the unlocking goroutine and must not block.
	asyncRetry func()
}

// ioBatch is a set of device requests that complete as one: once the
// last of them completes, it calls its owner's batchDone (or, without an
// owner, finish) once, with the first error. It submits through fs.dev,
// which counts the requests.
type ioBatch struct {
	fs      *FS
	pending atomic.Int32
	errMu   lockrank.Mutex[lockrank.Leaf]
	err     error // the first error: set under errMu, read by the last done
	reqs    []device.Request
	inline  [2]device.Request
	// verify holds the reads to check against their data checksums once
	// every request has completed (addRead, on a checksummed volume).
	verify []sumCheck
	doneFn func(*device.Request, error) // b.done, bound once
	owner  batchOwner
	finish func(err error)
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
	if b.doneFn == nil { // a pooled batch keeps its own
		b.doneFn = b.done
	}
}

// reset makes a finished batch ready for reuse.
func (b *ioBatch) reset() {
	clear(b.inline[:])
	b.reqs = b.inline[:0]
	b.err = nil
	clear(b.verify)
	b.verify = b.verify[:0]
}

// add appends a request for later submission. A data write on a
// checksummed volume records the checksums of the blocks it writes.
func (b *ioBatch) add(op device.Op, buf []byte, off int64) {
	if op == device.OpWrite && b.fs.sums != nil {
		b.fs.setSums(buf, off)
	}
	b.reqs = append(b.reqs, device.Request{Op: op, Buf: buf, Off: off})
}

// addRead appends a read of file data into part from device offset devOff
// (file offset fileOff of in). On a checksummed volume it reads the whole
// blocks part lies in (through a bounce buffer unless part is exactly
// those blocks) and verifies them when the batch completes.
func (b *ioBatch) addRead(in *inode, fileOff int64, part []byte, devOff int64) {
	fs := b.fs
	if fs.sums == nil {
		b.add(device.OpRead, part, devOff)
		return
	}
	bs := fs.blockSize
	lo, hi := roundDown(devOff, bs), roundUp(devOff+int64(len(part)), bs)
	c := sumCheck{in: in, fileOff: fileOff - (devOff - lo), dev: uint64(lo / bs)}
	if lo == devOff && hi == devOff+int64(len(part)) {
		c.buf = part
	} else {
		c.buf, c.out, c.from = bounceBlocks(int(hi-lo)), part, devOff-lo
	}
	b.add(device.OpRead, c.buf, lo)
	b.verify = append(b.verify, c)
}

// checkSums verifies the batch's checked reads and copies the bounced
// ones out, once every request has completed without error.
func (b *ioBatch) checkSums() error {
	for _, c := range b.verify {
		if err := b.fs.verifySums(c.in, c.fileOff, c.dev, c.buf); err != nil {
			return err
		}
		if c.out != nil {
			copy(c.out, c.buf[c.from:])
			putBounce(c.buf)
		}
	}
	return nil
}

// bouncePool recycles the one-block bounce buffers of checked reads of
// part of a block (a 512 B O_DIRECT read reads its whole 4 KiB block).
var bouncePool = sync.Pool{New: func() any { b := device.AlignedBuf(4096); return &b }}

// bounceBlocks returns an aligned buffer of n bytes, pooled if n is 4096.
func bounceBlocks(n int) []byte {
	if n == 4096 {
		return *bouncePool.Get().(*[]byte)
	}
	return device.AlignedBuf(n)
}

// putBounce gives a bounceBlocks buffer back.
func putBounce(b []byte) {
	if len(b) == 4096 {
		bouncePool.Put(&b)
	}
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
		// Every other request's done has stored its error (under errMu)
		// before its decrement, which this one observed.
		err := eio(b.err)
		if err == nil && len(b.verify) > 0 {
			err = b.checkSums()
		}
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
	cow      []cowRange  // shared runs written out of place, to remap (writes)
	mode     iolock.Mode // lock mode held (writes)
	holdLock bool        // unlock only at completion (writes)
	extends  bool        // the write ends past the size at submission (writes)
	// rng is the block range the write holds until its conversion is
	// done (writes under block-range exclusion), or nil.
	rng *iolock.Range
	// app, for a parallel append, is told of the completion instead of
	// converting and publishing the size: the append's publication does
	// both, in reservation order (appends.go).
	app appendCompleter
	// cr is the write's conversion at completion (convGroup).
	cr      convReq
	segs    [4]extmap.Segment
	convBuf [2]fileRange
	// Completion of a synchronous request. Its waiter also runs the
	// completion work that may block (result.next), as iomap completes a
	// synchronous direct I/O in the submitting task: no goroutine is
	// started per request for it (finishInWaiter).
	ch     chan struct{}
	result struct {
		n    int
		err  error
		next waiterStep    // work for the waiter before the result, or stepNone
		rng  *iolock.Range // finishAppended's range (stepFinishAppended)
	}
}

// waiterStep is completion work a synchronous request's waiter runs.
type waiterStep uint8

const (
	stepNone           waiterStep = iota
	stepFinishWrite               // op.finishWrite(result.err)
	stepFinishAppended            // op.finishAppended(result.rng, result.err)
)

var dioPool = sync.Pool{New: func() any {
	op := &dioOp{ch: make(chan struct{}, 1)}
	op.cr.done = make(chan struct{}, 1)
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
	op.in, op.k, op.conv, op.cow, op.rng, op.app = nil, nil, nil, nil, nil, nil
	op.cr.conv, op.cr.cow, op.cr.err = nil, nil, nil
	op.write, op.holdLock, op.extends = false, false, false
	op.result.n, op.result.err, op.result.rng, op.result.next = 0, nil, nil, stepNone
	dioPool.Put(op)
}

// finishInWaiter hands completion work that may block (a metadata commit,
// a sync, page invalidation) to a synchronous request's waiter, which runs
// it in op.wait, and reports whether it did: for an asynchronous request
// the caller runs it on a goroutine of its own instead (the kernel's
// s_dio_done_wq). At most one hand-off is outstanding: the next comes
// only from work the waiter has taken (an append's publication follows
// its own completion's appendEnded).
func (op *dioOp) finishInWaiter(step waiterStep, rng *iolock.Range, err error) bool {
	if op.k.done != nil {
		return false
	}
	op.result.next, op.result.rng, op.result.err = step, rng, err
	op.ch <- struct{}{}
	return true
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
	// The completion invalidates pages, converts extents under the
	// inode's mutex and may run a sync point.
	lockrank.Wait(lockrank.RankPage, 0, nil)
	if op.k.done != nil {
		return 0, errQueued
	}
	for {
		<-op.ch
		step, rng, err := op.result.next, op.result.rng, op.result.err
		if step == stepNone {
			break
		}
		op.result.next, op.result.rng, op.result.err = stepNone, nil, nil
		switch step {
		case stepFinishWrite:
			op.finishWrite(err)
		case stepFinishAppended:
			op.finishAppended(rng, err)
		}
	}
	n, err := op.result.n, op.result.err
	op.free()
	return n, err
}

// syncWritten makes a completed O_DSYNC or O_SYNC write durable: O_SYNC
// (and RWF_SYNC) as fsync, with a sync point; O_DSYNC as fdatasync
// (syncData).
func (k *kiocb) syncWritten() error {
	if k.sync {
		return k.in.fs.group.sync()
	}
	return k.in.syncData()
}
