package ring

import (
	"errors"
	"syscall"

	"github.com/sluicefs/sluice"
)

// The issue model (io_uring's io_issue_sqe, io_write / __io_read, and
// io_queue_async for the punt): see the package documentation.

// issue runs q's inline, non-blocking attempt, on the submitting goroutine
// or (for a retried read) in the completion context, and routes the
// result: completed inline, queued on device I/O, armed for retry, or
// punted. onCompleter says it runs on the completion goroutine (where a
// callback may be delivered directly).
//
// Once the engine returned sluice.ErrQueued or sluice.ErrRetryArmed, q
// belongs to the engine's callback, which may already have run: issue
// must not touch q after the call in those cases.
func (r *Ring) issue(q *request, onCompleter bool) {
	s := &q.sqe
	if s.Async || r.opts.ForceAsync {
		r.stats.forcedPunts.Add(1)
		r.punt(q, onCompleter)
		return
	}
	nowait := s.Flags&sluice.RWFNoWait != 0
	var n int
	var err error
	switch s.Op {
	case OpRead:
		// Arm a retry on a locked page unless the caller asked for
		// NOWAIT (io_rw_should_retry); the engine uses it only for
		// buffered reads under Policy.AsyncBufferedReads.
		var retry func()
		if !nowait && q.arms < maxArms {
			retry = q.retry
			q.arms++
		}
		n, err = s.File.ReadAsync(s.Buf, s.Off, s.Flags, retry, q.done)
	case OpWrite:
		if !nowait && s.File.Flags()&sluice.O_DIRECT == 0 && isAppend(s) {
			// A buffered append may stop short under NOWAIT, and its
			// continuation would append again at an EOF another
			// append may have moved: it goes to the pool whole, where
			// the engine appends it under one exclusive hold.
			r.punt(q, onCompleter)
			return
		}
		n, err = s.File.WriteAsync(s.Buf, s.Off, s.Flags, q.done)
	default:
		// Fsync, Fdatasync, Fallocate, Truncate and Renameat have no
		// non-blocking form: they always go to the pool, as in io_uring
		// (io_fsync and io_fallocate return -EAGAIN under
		// IO_URING_F_NONBLOCK; renameat is forced async).
		r.punt(q, onCompleter)
		return
	}
	switch {
	case err == nil && s.Op == OpWrite && n < len(s.Buf) && !nowait:
		// A short write (a buffered write that met a page it could not
		// take without blocking): the rest continues in the pool, at
		// the offset where this part ended (io_write's partial write
		// with bytes_done).
		q.prior += n
		s.Buf = s.Buf[n:]
		s.Off += int64(n)
		r.punt(q, onCompleter)
	case err == nil:
		r.stats.inline.Add(1)
		q.flags |= CQEInline
		r.complete(q, n, nil, onCompleter)
	case err == sluice.ErrQueued:
		r.stats.queued.Add(1)
	case err == sluice.ErrRetryArmed:
		r.stats.retriesArmed.Add(1)
	case errors.Is(err, syscall.EAGAIN):
		if nowait {
			r.stats.noWaitEAGAIN.Add(1)
			r.complete(q, n, err, onCompleter)
			return
		}
		r.punt(q, onCompleter)
	default:
		r.stats.inline.Add(1)
		q.flags |= CQEInline
		r.complete(q, n, err, onCompleter)
	}
}

// onDone is the engine's completion callback for an operation it queued
// (sluice.ErrQueued): it runs once, on a device completion goroutine or an
// engine goroutine, and must not block.
func (q *request) onDone(n int, err error) {
	q.flags |= CQEQueued
	q.r.complete(q, n, err, false)
}

// onRetry is the callback an async buffered read armed on a page's unlock
// (sluice.ErrRetryArmed). It runs once, on the goroutine that unlocks the
// page (often the device's completion goroutine), and must not block: it
// only queues the re-issue in the completion context (io_async_buf_func
// queueing task work).
func (q *request) onRetry() {
	q.r.stats.retriesFired.Add(1)
	q.flags |= CQERetried
	q.r.pushTask(q, taskRetry)
}

// reissue re-runs a read whose retry fired, in the completion context (a
// goroutine in Wait, or the completion goroutine: the kernel's task work in
// the submitter's context), or cancels it during Abort.
func (r *Ring) reissue(q *request) {
	if r.aborting.Load() {
		r.cancel(q, true)
		return
	}
	r.issue(q, true)
}

// punt hands q to the pool (io_queue_async): hashed on its inode if it is
// a write, fallocate or truncate of a file that does not take parallel
// direct writes (io_prep_async_work with hash_reg_file), unless it is an
// append to a file whose appends run in parallel.
func (r *Ring) punt(q *request, onCompleter bool) {
	r.stats.punts.Add(1)
	q.flags |= CQEPunted
	s := &q.sqe
	hashed := false
	switch s.Op {
	case OpWrite:
		hashed = !s.File.ParallelDirectWrites() && !(isAppend(s) && s.File.ParallelAppends())
	case OpFallocate, OpTruncate:
		hashed = !s.File.ParallelDirectWrites()
	}
	if hashed {
		r.stats.hashedPunts.Add(1)
	}
	var ino sluice.Ino
	if s.File != nil {
		ino = s.File.Ino()
	}
	if !r.pool.enqueue(q, hashed, ino) {
		r.cancel(q, onCompleter)
	}
}

// runBlocking runs a punted operation in blocking mode on a pool worker
// (io_wq_submit_work: the operation re-issued without NOWAIT) and
// completes it. A caller's own RWFNoWait is kept, so it gets EAGAIN.
func (r *Ring) runBlocking(q *request) {
	s := &q.sqe
	var n int
	var err error
	gaugeAdd(&r.stats.workersBlocked, &r.stats.workersBlockedPeak, 1)
	switch s.Op {
	case OpRead:
		n, err = s.File.Pread(s.Buf, s.Off, s.Flags)
	case OpWrite:
		n, err = s.File.Pwrite(s.Buf, s.Off, s.Flags)
	case OpFsync:
		err = s.File.Fsync()
	case OpFdatasync:
		err = s.File.Fdatasync()
	case OpFallocate:
		err = s.File.Fallocate(s.Mode, s.Off, s.Len)
	case OpTruncate:
		err = s.File.Truncate(s.Off)
	case OpRenameat:
		err = s.FS.Rename(s.Path, s.Path2, s.Mode)
	}
	r.stats.workersBlocked.Add(-1)
	if err != nil && s.Flags&sluice.RWFNoWait != 0 && errors.Is(err, syscall.EAGAIN) {
		r.stats.noWaitEAGAIN.Add(1)
	}
	r.complete(q, n, err, false)
}

// taskKind says what the completion context does with a request.
type taskKind uint8

const (
	// taskRetry re-issues an async buffered read whose retry fired.
	taskRetry taskKind = iota + 1
	// taskDeliver hands a completion to Options.Callback.
	taskDeliver
)

// pushTask queues q for task k in the completion context and wakes one
// goroutine to run it, if one is needed now. A retry, without a callback,
// goes to a goroutine waiting in Wait, or else waits for the next Wait or
// Peek (io_uring's IORING_SETUP_DEFER_TASKRUN: task work runs when the task
// waits for completions; a retried read's completion could not be seen
// before then anyway); once Close or Abort began, the completion goroutine
// runs it. Deliveries (and retries, with a callback) go to the completion
// goroutine. pushTask never blocks, so it may run in a page-unlock callback
// or a device completion.
func (r *Ring) pushTask(q *request, k taskKind) {
	q.task = k
	q.next = nil
	r.mu.Lock()
	if r.mu.taskTail == nil {
		r.mu.tasks = q
	} else {
		r.mu.taskTail.next = q
	}
	r.mu.taskTail = q
	switch {
	case k == taskRetry && len(r.mu.waiters) > 0:
		wake(r.mu.waiters[0].ch)
	case k == taskRetry && r.opts.Callback == nil && !r.mu.closing:
		// Deferred to the next Wait or Peek.
	case r.mu.completerSleeping:
		r.mu.completerSleeping = false
		wake(r.completerWake)
	}
	r.mu.Unlock()
}

// takeTasksLocked removes and returns the queued tasks.
//
// Preconditions: r.mu is held.
func (r *Ring) takeTasksLocked() *request {
	list := r.mu.tasks
	r.mu.tasks, r.mu.taskTail = nil, nil
	return list
}

// runTasks runs a list of tasks, in order.
func (r *Ring) runTasks(list *request) {
	for q := list; q != nil; {
		next := q.next
		q.next = nil
		switch q.task {
		case taskRetry:
			r.reissue(q)
		case taskDeliver:
			r.deliver(q)
		}
		q = next
	}
}

// completer is the ring's completion goroutine: it delivers completions
// to the callback and runs the tasks no reaping goroutine will take,
// taking the whole queue at once, so a burst of unlocks costs one wake-up.
func (r *Ring) completer() {
	defer close(r.completerExited)
	r.mu.Lock()
	for {
		if list := r.takeTasksLocked(); list != nil {
			r.mu.Unlock()
			r.runTasks(list)
			r.mu.Lock()
			continue
		}
		if r.mu.completerStopped {
			r.mu.Unlock()
			return
		}
		r.mu.completerSleeping = true
		r.mu.Unlock()
		<-r.completerWake
		r.mu.Lock()
	}
}

// stopCompleter makes the completion goroutine exit once no task is
// queued, and waits for it.
func (r *Ring) stopCompleter() {
	r.mu.Lock()
	r.mu.completerStopped = true
	if r.mu.completerSleeping {
		r.mu.completerSleeping = false
		wake(r.completerWake)
	}
	r.mu.Unlock()
	<-r.completerExited
}

// wake sends a token on a channel of capacity 1 unless one is there.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// isAppend reports whether s is a write at the end of the file.
func isAppend(s *SQE) bool {
	return s.Op == OpWrite && (s.Flags&sluice.RWFAppend != 0 || s.File.Flags()&sluice.O_APPEND != 0)
}
