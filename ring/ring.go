package ring

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice"
)

// Op is the operation of an SQE.
type Op uint8

// Operations, as the io_uring opcodes of the same names.
const (
	// OpRead reads len(Buf) bytes at Off into Buf (IORING_OP_READ).
	OpRead Op = iota + 1
	// OpWrite writes Buf at Off (IORING_OP_WRITE); with RWFAppend, or on a
	// file open O_APPEND, at the end of the file.
	OpWrite
	// OpFsync is File.Fsync (IORING_OP_FSYNC).
	OpFsync
	// OpFdatasync is File.Fdatasync (IORING_OP_FSYNC with
	// IORING_FSYNC_DATASYNC).
	OpFdatasync
	// OpFallocate is File.Fallocate(Mode, Off, Len) (IORING_OP_FALLOCATE).
	OpFallocate
	// OpTruncate is File.Truncate(Off) (IORING_OP_FTRUNCATE).
	OpTruncate
	// OpRenameat is FS.Rename(Path, Path2, Mode) (IORING_OP_RENAMEAT with
	// AT_FDCWD the volume's root: paths from the root, Mode the renameat2
	// flags sluice.RenameNoReplace, RenameExchange, RenameWhiteout). It
	// takes FS, not File.
	OpRenameat
)

var opNames = [...]string{"invalid", "read", "write", "fsync", "fdatasync", "fallocate", "truncate", "renameat"}

// String returns the operation's name.
func (op Op) String() string {
	if int(op) < len(opNames) {
		return opNames[op]
	}
	return "invalid"
}

// SQE describes one operation to submit (a submission queue entry).
type SQE struct {
	// Op is the operation.
	Op Op
	// File is the open file to operate on (every op but OpRenameat).
	File *sluice.File
	// FS is the file system of a namespace op (OpRenameat), and Path and
	// Path2 its paths (from the root).
	FS          *sluice.FS
	Path, Path2 string
	// Buf is the buffer of a read or write. It stays the caller's, but
	// the ring and the engine use it until the operation's completion is
	// delivered: the caller must neither change (write) nor read (read)
	// it before then. For an O_DIRECT file it must be aligned
	// (device.AlignedBuf).
	Buf []byte
	// Off is the file offset of a read, write or fallocate, and the new
	// size of a truncate.
	Off int64
	// Len is the length of a fallocate.
	Len int64
	// Mode is the mode of a fallocate (sluice.FallocKeepSize, ...), or
	// the flags of a rename.
	Mode uint32
	// Flags modify a read or write: sluice.RWFNoWait (complete with EAGAIN
	// rather than punt to a worker), RWFAppend, RWFDsync, RWFSync,
	// RWFDontCache (uncached buffered I/O, passed through inline and
	// punted alike).
	Flags sluice.RWFlags
	// Async sends this operation to the worker pool without the inline
	// attempt (IOSQE_ASYNC); see Options.ForceAsync.
	Async bool
	// Tag is returned in the operation's CQE (io_uring's user_data).
	Tag uint64
}

// CQE is the completion of one operation (a completion queue entry).
type CQE struct {
	// Tag is the SQE's Tag.
	Tag uint64
	// Res is the number of bytes read or written; 0 for the other
	// operations. A read returns fewer bytes than asked for at end of
	// file, and a buffered read that copied some bytes and then met a page
	// under I/O returns that partial count (see the package
	// documentation). A write is whole, except that one with RWFNoWait may
	// stop short (as pwritev2 does), and that a write whose punted rest
	// failed after its inline part was written reports that part with a
	// nil Err (as io_uring does).
	Res int
	// Err is the operation's error (the engine's *os.PathError), or
	// ErrCanceled, or nil. Res is zero when Err is set.
	Err error
	// Flags say how the operation ran.
	Flags CQEFlags
}

// CQEFlags say how an operation ran: which paths it took before it
// completed. Several may be set (an async read that was armed, retried and
// then punted has CQERetried|CQEPunted).
type CQEFlags uint32

const (
	// CQEInline: completed by an inline, non-blocking attempt, on the
	// submitter's goroutine or, for a retried read, in the ring's
	// completion context.
	CQEInline CQEFlags = 1 << iota
	// CQEQueued: the inline attempt submitted device I/O and the
	// operation completed from the device's completion (no worker).
	CQEQueued
	// CQERetried: an async buffered read waited for a page's unlock with a
	// callback armed, and was re-issued in the completion context (never
	// on a worker).
	CQERetried
	// CQEPunted: ran on a pool worker, in blocking mode.
	CQEPunted
	// CQEHashWaited: as a hashed punt, queued behind an earlier operation
	// of the same inode.
	CQEHashWaited
	// CQECanceled: canceled by Abort before it started (Err is
	// ErrCanceled).
	CQECanceled
)

// maxArms bounds the inline attempts of one read that may arm a retry
// callback. A read that keeps meeting locked pages (a page whose device
// read fails is dropped and re-read by the next attempt) is punted after
// that many, so that the ring never livelocks re-arming.
const maxArms = 3

// Ring is an asynchronous submission ring over sluice files: see the
// package documentation. All methods are safe for concurrent use.
type Ring struct {
	entries int     // Immutable.
	opts    Options // Immutable (a copy with defaults applied).

	stats counters

	// aborting is set by Abort: fired retries and new punts are canceled.
	aborting atomic.Bool

	mu struct {
		sync.Mutex
		// closing: Close or Abort began; Submit refuses.
		closing bool
		// inUse counts entries in use: submitted and not yet reaped (or
		// delivered to the callback). At most entries.
		inUse int
		// pending counts operations submitted and not yet completed
		// (posted to the queue, or handed to the callback delivery).
		pending int
		// free lists the request structs not in use (entries of them
		// are made by New; an operation holds one from Submit until its
		// completion is posted).
		free *request
		// cq is the completion queue: a circular buffer of entries
		// CQEs, cqLen of them from cqHead. It cannot overflow, since
		// inUse <= entries.
		cq            []CQE
		cqHead, cqLen int
		// waiters are the goroutines in Wait, and spare ones.
		waiters, spare []*waiter
		// slotWaiters counts Submit calls waiting on slotFree.
		slotWaiters int
		// idle, when set, is closed as pending reaches zero (Close
		// waits on it).
		idle chan struct{}
		// tasks and taskTail link the completion context's queue
		// (retries to re-issue, completions to deliver) through next.
		tasks, taskTail *request
		// completerSleeping: the completion goroutine waits on
		// completerWake. completerStopped: it exits once the queue is
		// empty.
		completerSleeping, completerStopped bool
	}
	// slotFree is signalled when an entry is freed. L is &mu.
	slotFree sync.Cond

	completerWake   chan struct{} // capacity 1
	completerExited chan struct{}
	pool            pool

	// done is closed when Close or Abort has finished.
	done chan struct{}
}

// request is one operation in flight: the SQE and how far it got. The
// ring owns entries of them; an operation holds one from Submit until its
// completion is posted.
type request struct {
	r   *Ring
	sqe SQE
	// flags accumulates the CQE flags. Written only by the goroutine that
	// currently drives the operation (submitter, device completion,
	// unlocking goroutine, completion goroutine, worker), each handing
	// over to the next through a lock or the engine.
	flags CQEFlags
	// arms counts the inline attempts that passed a retry callback.
	arms int
	// prior counts the bytes a short inline write wrote before the rest
	// was punted; the CQE reports them too.
	prior int
	// next links the request in the free list, the task queue or a
	// hashed chain.
	next *request
	// task says what the completion goroutine does with the request.
	task taskKind
	// res, err hold the result for delivery to the callback.
	res int
	err error

	// done and retry are the callbacks given to the engine: method
	// values made once, so that an operation allocates none.
	done  func(int, error)
	retry func()
}

// waiter is a goroutine in Wait.
type waiter struct {
	min int
	ch  chan struct{} // capacity 1
}

// New creates a ring of entries entries: at most that many operations may
// be submitted and not yet reaped at once. A nil opts means every default.
func New(entries int, opts *Options) (*Ring, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.EnsureDefaults(entries)
	if err := o.Validate(entries); err != nil {
		return nil, err
	}
	r := &Ring{entries: entries, opts: o, done: make(chan struct{})}
	r.slotFree.L = &r.mu
	if o.Callback == nil {
		r.mu.cq = make([]CQE, entries)
	}
	reqs := make([]request, entries)
	for i := range reqs {
		q := &reqs[i]
		q.r = r
		q.done = q.onDone
		q.retry = q.onRetry
		q.next = r.mu.free
		r.mu.free = q
	}
	r.completerWake = make(chan struct{}, 1)
	r.completerExited = make(chan struct{})
	go r.completer()
	r.pool.init(r, o.Workers)
	return r, nil
}

// Entries returns the number of entries.
func (r *Ring) Entries() int { return r.entries }

// Options returns the options the ring runs with (defaults applied).
func (r *Ring) Options() Options { return r.opts }

// Stats returns a snapshot of the ring's counters.
func (r *Ring) Stats() Stats { return r.stats.snapshot() }

// ResetStats zeroes the counts and sets each peak to its current value.
func (r *Ring) ResetStats() { r.stats.reset() }

// Submit submits one operation without blocking (unless
// Options.WaitWhenFull and the ring is full): it takes an entry, runs the
// inline attempt on the calling goroutine, and returns. The result comes
// as a CQE. Submit fails, using no entry, with ErrRingFull, ErrClosed, or
// an EINVAL error for an SQE without a file or with an unknown Op.
func (r *Ring) Submit(sqe SQE) error {
	switch {
	case sqe.Op < OpRead || sqe.Op > OpRenameat:
		return invalidSQE("unknown op %d", sqe.Op)
	case sqe.Op == OpRenameat && sqe.FS == nil:
		return invalidSQE("no file system")
	case sqe.Op != OpRenameat && sqe.File == nil:
		return invalidSQE("no file")
	}
	q, err := r.acquire()
	if err != nil {
		return err
	}
	q.sqe = sqe
	r.stats.submitted.Add(1)
	r.issue(q, false)
	return nil
}

// Read submits a read of len(p) bytes at off into p.
func (r *Ring) Read(f *sluice.File, p []byte, off int64, flags sluice.RWFlags, tag uint64) error {
	return r.Submit(SQE{Op: OpRead, File: f, Buf: p, Off: off, Flags: flags, Tag: tag})
}

// Write submits a write of p at off.
func (r *Ring) Write(f *sluice.File, p []byte, off int64, flags sluice.RWFlags, tag uint64) error {
	return r.Submit(SQE{Op: OpWrite, File: f, Buf: p, Off: off, Flags: flags, Tag: tag})
}

// Fsync submits an Fsync of f.
func (r *Ring) Fsync(f *sluice.File, tag uint64) error {
	return r.Submit(SQE{Op: OpFsync, File: f, Tag: tag})
}

// Fdatasync submits an Fdatasync of f.
func (r *Ring) Fdatasync(f *sluice.File, tag uint64) error {
	return r.Submit(SQE{Op: OpFdatasync, File: f, Tag: tag})
}

// Renameat submits a Rename(oldpath, newpath, flags) of fs: renameat2(2)
// with its RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT flags (as
// sluice.RenameNoReplace, ...). It always runs on a worker, as io_uring's
// renameat does.
func (r *Ring) Renameat(fs *sluice.FS, oldpath, newpath string, flags uint32, tag uint64) error {
	return r.Submit(SQE{Op: OpRenameat, FS: fs, Path: oldpath, Path2: newpath, Mode: flags, Tag: tag})
}

// Fallocate submits a Fallocate(mode, off, n) of f.
func (r *Ring) Fallocate(f *sluice.File, mode uint32, off, n int64, tag uint64) error {
	return r.Submit(SQE{Op: OpFallocate, File: f, Mode: mode, Off: off, Len: n, Tag: tag})
}

// Truncate submits a Truncate(size) of f.
func (r *Ring) Truncate(f *sluice.File, size int64, tag uint64) error {
	return r.Submit(SQE{Op: OpTruncate, File: f, Off: size, Tag: tag})
}

// acquire takes an entry and a request for a new operation.
func (r *Ring) acquire() (*request, error) {
	r.mu.Lock()
	for r.mu.inUse == r.entries && !r.mu.closing {
		if !r.opts.WaitWhenFull {
			r.mu.Unlock()
			r.stats.ringFull.Add(1)
			return nil, ErrRingFull
		}
		r.mu.slotWaiters++
		r.slotFree.Wait()
		r.mu.slotWaiters--
	}
	if r.mu.closing {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	r.mu.inUse++
	r.mu.pending++
	q := r.mu.free
	r.mu.free = q.next
	r.mu.Unlock()
	q.next = nil
	q.flags = 0
	q.arms = 0
	q.prior = 0
	return q, nil
}

// complete posts q's completion: to the completion queue, or, with a
// callback, to the completion goroutine for delivery (directly, when
// called on it). q is recycled: the caller must not touch it afterwards.
func (r *Ring) complete(q *request, n int, err error, onCompleter bool) {
	r.stats.completed.Add(1)
	if q.prior > 0 {
		// Bytes written before the punt count, and win over a later
		// error (io_fixup_rw_res).
		if err != nil {
			n, err = 0, nil
		}
		n += q.prior
	}
	if r.opts.Callback != nil {
		q.res, q.err = n, err
		if onCompleter {
			r.deliver(q)
		} else {
			r.pushTask(q, taskDeliver)
		}
		return
	}
	cqe := CQE{Tag: q.sqe.Tag, Res: n, Err: err, Flags: q.flags}
	q.sqe = SQE{}
	r.mu.Lock()
	i := r.mu.cqHead + r.mu.cqLen
	if i >= r.entries {
		i -= r.entries
	}
	r.mu.cq[i] = cqe
	r.mu.cqLen++
	q.next = r.mu.free
	r.mu.free = q
	r.mu.pending--
	if r.mu.pending == 0 && r.mu.closing {
		r.idleLocked()
	}
	r.wakeWaitersLocked()
	r.mu.Unlock()
}

// wakeWaitersLocked wakes as many waiters as the queued completions can
// satisfy, each for its minimum (not every waiter for each completion: a
// herd of reapers would wake for one CQE).
//
// Preconditions: r.mu is held.
func (r *Ring) wakeWaitersLocked() {
	avail := r.mu.cqLen
	for _, w := range r.mu.waiters {
		if avail <= 0 {
			return
		}
		if w.min <= avail {
			wake(w.ch)
			avail -= max(w.min, 1)
		}
	}
}

// deliver hands q's completion to the callback, on the completion
// goroutine. The entry is freed before the callback runs, so that a
// callback can submit the next operation.
func (r *Ring) deliver(q *request) {
	cqe := CQE{Tag: q.sqe.Tag, Res: q.res, Err: q.err, Flags: q.flags}
	q.sqe, q.err = SQE{}, nil
	r.mu.Lock()
	q.next = r.mu.free
	r.mu.free = q
	r.mu.inUse--
	r.mu.pending--
	if r.mu.slotWaiters > 0 {
		r.slotFree.Signal()
	}
	if r.mu.pending == 0 && r.mu.closing {
		r.idleLocked()
	}
	r.mu.Unlock()
	r.opts.Callback(cqe)
}

// idleLocked tells Close that nothing is pending, and wakes every waiter:
// no completion will come any more.
//
// Preconditions: r.mu is held, closing is set and pending is zero.
func (r *Ring) idleLocked() {
	if r.mu.idle != nil {
		close(r.mu.idle)
		r.mu.idle = nil
	}
	for _, w := range r.mu.waiters {
		wake(w.ch)
	}
}

// Wait waits until at least min completions are queued (min is capped at
// len(cqes)), then moves as many as fit into cqes, oldest first, frees
// their entries and returns how many it moved. If ctx ends first (a nil
// ctx never does), it returns the completions queued by then and
// ctx.Err(). Once the ring is closed and nothing is pending, it returns
// what is left and ErrClosed if that is fewer than min.
func (r *Ring) Wait(ctx context.Context, min int, cqes []CQE) (int, error) {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	n, err := r.wait(min, cqes, done, nil)
	if err == errInterrupted {
		err = ctx.Err()
	}
	return n, err
}

// WaitTimeout is Wait with a timeout instead of a context; it returns
// context.DeadlineExceeded when the timeout expires first.
func (r *Ring) WaitTimeout(min int, d time.Duration, cqes []CQE) (int, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	n, err := r.wait(min, cqes, nil, t.C)
	if err == errInterrupted {
		err = context.DeadlineExceeded
	}
	return n, err
}

// Peek moves the completions queued now (as many as fit into cqes) into
// cqes without waiting, and returns how many.
func (r *Ring) Peek(cqes []CQE) (int, error) {
	return r.wait(0, cqes, nil, nil)
}

var errInterrupted = &interrupted{}

type interrupted struct{}

func (*interrupted) Error() string { return "ring: wait interrupted" }

func (r *Ring) wait(want int, cqes []CQE, done <-chan struct{}, timer <-chan time.Time) (int, error) {
	if r.opts.Callback != nil {
		return 0, ErrCallbackMode
	}
	want = max(0, min(want, len(cqes)))
	var err error
	r.mu.Lock()
	var w *waiter
	ran := 0
	for {
		// Task work (retried reads), here in the completion context:
		// its completions may be what we wait for. One task at a time,
		// and only until enough completions are queued (but at least
		// one, so that queued work always advances): the caller gets
		// back to submitting sooner, which keeps the device busy. Peek
		// runs every task queued.
		if r.mu.tasks != nil && (r.mu.cqLen < want || ran == 0 || want == 0) && err == nil {
			q := r.mu.tasks
			r.mu.tasks = q.next
			if r.mu.tasks == nil {
				r.mu.taskTail = nil
			}
			q.next = nil
			r.mu.Unlock()
			r.runTasks(q)
			ran++
			r.mu.Lock()
			continue
		}
		if r.mu.cqLen >= want || err != nil {
			break
		}
		if r.mu.closing && r.mu.pending == 0 {
			err = ErrClosed
			break
		}
		if w == nil {
			w = r.addWaiterLocked(want)
		}
		r.mu.Unlock()
		select {
		case <-w.ch:
		case <-done:
			err = errInterrupted
		case <-timer:
			err = errInterrupted
		}
		r.mu.Lock()
	}
	if w != nil {
		r.removeWaiterLocked(w)
	}
	n := r.popLocked(cqes)
	r.mu.Unlock()
	return n, err
}

// addWaiterLocked registers a goroutine about to wait for min
// completions, with a spare waiter if there is one.
//
// Preconditions: r.mu is held.
func (r *Ring) addWaiterLocked(min int) *waiter {
	var w *waiter
	if k := len(r.mu.spare); k > 0 {
		w = r.mu.spare[k-1]
		r.mu.spare = r.mu.spare[:k-1]
	} else {
		w = &waiter{ch: make(chan struct{}, 1)}
	}
	w.min = min
	r.mu.waiters = append(r.mu.waiters, w)
	return w
}

// removeWaiterLocked unregisters w, drains a pending wake-up and keeps it
// as a spare.
//
// Preconditions: r.mu is held.
func (r *Ring) removeWaiterLocked(w *waiter) {
	for i, x := range r.mu.waiters {
		if x == w {
			last := len(r.mu.waiters) - 1
			r.mu.waiters[i] = r.mu.waiters[last]
			r.mu.waiters[last] = nil
			r.mu.waiters = r.mu.waiters[:last]
			break
		}
	}
	select {
	case <-w.ch:
	default:
	}
	r.mu.spare = append(r.mu.spare, w)
}

// popLocked moves queued completions into cqes and frees their entries.
//
// Preconditions: r.mu is held.
func (r *Ring) popLocked(cqes []CQE) int {
	n := min(len(cqes), r.mu.cqLen)
	for i := 0; i < n; i++ {
		cqes[i] = r.mu.cq[r.mu.cqHead]
		r.mu.cq[r.mu.cqHead] = CQE{}
		r.mu.cqHead++
		if r.mu.cqHead == r.entries {
			r.mu.cqHead = 0
		}
	}
	r.mu.cqLen -= n
	r.mu.inUse -= n
	if n > 0 && r.mu.slotWaiters > 0 {
		r.slotFree.Broadcast()
	}
	return n
}

// Close stops the ring after draining it: Submit fails with ErrClosed from
// now on; every operation already submitted runs to completion (punted
// ones still queued for a worker included) and its completion is posted;
// then the workers and the completion goroutine exit. Completions not yet
// reaped stay available to Wait and Peek. With a callback, every callback
// has returned when Close returns. A second Close or Abort waits for the
// first and returns ErrClosed.
func (r *Ring) Close() error { return r.shutdown(false) }

// Abort is Close that cancels what has not started: punted operations
// still queued for a worker (or behind their inode's chain), and async
// reads waiting for a page (when the page unlocks) complete with
// ErrCanceled. Operations inside the engine, and device I/O in flight,
// cannot be interrupted: Abort waits for them, as Close does, so no buffer
// is in use when it returns.
func (r *Ring) Abort() error { return r.shutdown(true) }

func (r *Ring) shutdown(abort bool) error {
	r.mu.Lock()
	if r.mu.closing {
		r.mu.Unlock()
		<-r.done
		return ErrClosed
	}
	r.mu.closing = true
	r.slotFree.Broadcast()
	if r.mu.tasks != nil && r.mu.completerSleeping {
		// Retries deferred to a Wait that may never come.
		r.mu.completerSleeping = false
		wake(r.completerWake)
	}
	var idle chan struct{}
	if r.mu.pending > 0 {
		idle = make(chan struct{})
		r.mu.idle = idle
	} else {
		r.idleLocked()
	}
	r.mu.Unlock()
	if abort {
		r.aborting.Store(true)
		for _, q := range r.pool.cancelQueued() {
			r.cancel(q, false)
		}
	}
	if idle != nil {
		<-idle
	}
	r.pool.stop()
	r.stopCompleter()
	close(r.done)
	return nil
}

// cancel completes q with ErrCanceled.
func (r *Ring) cancel(q *request, onCompleter bool) {
	r.stats.canceled.Add(1)
	q.flags |= CQECanceled
	r.complete(q, 0, ErrCanceled, onCompleter)
}
