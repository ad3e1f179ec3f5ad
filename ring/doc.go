// Package ring is sluice's asynchronous submission ring, the engine's
// io_uring: a program submits reads, writes, fsyncs, fallocates (every
// mode) and truncates of open files, and renames with renameat2's flags
// (exchange, whiteout, no-replace), without blocking, and collects their
// completions later, while a bounded pool of workers runs what cannot
// be done without blocking. It is built on File.ReadAsync and
// File.WriteAsync of the root package and reproduces two seed experiments:
// per-inode hashing of punted writes (seed 002) and async buffered reads
// (seed 003).
//
//	r, err := ring.New(64, nil)
//	defer r.Close()
//	r.Write(f, buf, off, 0, 1)           // tag 1
//	r.Read(f, buf2, off2, 0, 2)          // tag 2
//	cqes := make([]ring.CQE, 8)
//	n, err := r.Wait(ctx, 2, cqes)       // at least 2 completions
//	for _, c := range cqes[:n] { ... c.Tag, c.Res, c.Err, c.Flags ... }
//
// # Entries, completions, buffers
//
// A ring has a fixed number of entries: an operation holds one from Submit
// until its completion is reaped (Wait, Peek) or handed to the callback.
// A Submit that finds every entry in use fails with ErrRingFull, or waits
// with Options.WaitWhenFull. The completion queue holds as many CQEs as
// there are entries, so it never overflows, and completions are never
// lost: reap them at any pace. A CQE carries the SQE's Tag, the result
// (Res bytes, or Err) and Flags saying how the operation ran (CQEInline,
// CQEQueued, CQERetried, CQEPunted, CQEHashWaited, CQECanceled).
//
// Completions are reaped with Wait (at least min of them, or until a
// context ends), WaitTimeout or Peek, or, with Options.Callback, delivered
// one at a time to a callback on the ring's completion goroutine.
//
// An operation's buffer (SQE.Buf) stays the caller's memory: the ring
// neither copies nor keeps it after the completion, but the engine reads
// (write) or fills (read) it until the completion is delivered, so the
// caller must not touch it until then. Buffers of O_DIRECT files must be
// aligned (device.AlignedBuf).
//
// # Issue model
//
// Like io_uring's io_issue_sqe, each operation is first tried inline, on
// the submitting goroutine, in non-blocking mode: File.ReadAsync and
// File.WriteAsync take locks with trylock, never wait for a page, an
// allocation or a drain, and submit device I/O asynchronously. The engine
// answers one of:
//
//	done (n, err)       completed inline: the CQE is posted at once
//	                    (CQEInline), e.g. a read from cached pages or a
//	                    buffered write
//	sluice.ErrQueued    device I/O is in flight; the engine's callback
//	                    posts the CQE from the device's completion, no
//	                    worker involved (CQEQueued), e.g. most direct I/O
//	sluice.ErrRetryArmed an async buffered read waits for a page (below)
//	EAGAIN              it would block: the operation is punted to the
//	                    worker pool and re-issued there in blocking mode
//	                    (File.Pread, File.Pwrite, ...; CQEPunted)
//
// A caller that asked for sluice.RWFNoWait gets EAGAIN in its CQE instead
// of a punt (and a NOWAIT write may stop short, as pwritev2's does). Fsync,
// Fdatasync, Fallocate and Truncate have no non-blocking form and always go
// to the pool, as in io_uring. A write whose inline attempt stopped short
// (a buffered write that met a page it could not take) continues in the
// pool at the offset where it stopped, and its CQE counts both parts. A
// buffered append (RWFAppend or O_APPEND) goes to the pool whole: its
// continuation would append again at an EOF another append may have moved.
// Options.ForceAsync (fio's force_async) and SQE.Async skip the inline
// attempt, so that the pool and its hashing can be measured.
//
// The pool has at most Options.Workers workers (by default as many as the
// ring has entries, at most DefaultMaxWorkers), started on demand and kept
// until Close. Punted work beyond them queues.
//
// # Per-inode hashing (seed 002)
//
// Punted writes, fallocates and truncates of one inode run one at a time,
// in submission order: they form a chain, one worker claims the chain and
// runs it to its end, and other workers never see it (io-wq's hashed work,
// io_wq_hash_work). The exception is a file that takes parallel direct
// writes ((*sluice.File).ParallelDirectWrites: open O_DIRECT on an engine
// whose Policy.ParallelDirectWrites is set; FMODE_DIO_PARALLEL_WRITE): its
// punts are not hashed and run in parallel, and the engine's I/O lock
// decides what may overlap. Appends (RWFAppend, or a file open O_APPEND)
// are not hashed either on an engine whose Policy.ParallelAppends is set
// ((*sluice.File).ParallelAppends): they reserve their ranges themselves
// and the engine publishes the size in reservation order. Reads and fsyncs
// are never hashed.
//
// Hashing is an efficiency measure, not a correctness one: it keeps N
// workers from piling up on one inode's exclusive lock. The engine must be
// (and is tested to be) correct either way; the ring's model test runs the
// same operations hashed and unhashed. Chains are keyed by the exact inode
// number, so different inodes never share one, except that files of two
// different file systems submitted to one ring share a chain when their
// inode numbers are equal (a File does not expose its FS): they are then
// serialised against each other, which costs speed only.
//
// # Async buffered reads (seed 003)
//
// Under Policy.AsyncBufferedReads, a buffered read whose inline attempt
// meets a page under I/O (typically the readahead it just started) arms a
// callback on the page's unlock and returns sluice.ErrRetryArmed. The
// callback runs on the goroutine that unlocks the page and only queues the
// read's re-issue in the ring's completion context; it never blocks. The
// re-issue is a new inline attempt (CQERetried): it usually copies the now
// uptodate page and completes. A read that copied some bytes and then met a
// page under I/O completes at once with the partial count, as the kernel's
// filemap_read does. A page whose read failed is dropped by the engine and
// re-read by the retry; after three armed attempts the read is punted (a
// livelock guard: a device that fails every read must end the read with
// EIO, not re-read for ever). Under the classic policy the same read is
// punted and a worker blocks on the page.
//
// The completion context is where retries run, and never a pool worker.
// Without a callback it is the reaping goroutine: a goroutine waiting in
// Wait is woken to run them, or else the next call of Wait or Peek runs
// them before it looks at the completion queue, as io_uring with
// IORING_SETUP_DEFER_TASKRUN runs task work only when the task waits for
// completions (a retried read's completion could not be seen earlier
// anyway, and its entry stays in use until reaped either way). With a
// callback, and once Close or Abort begins, the ring's completion goroutine
// runs them; it also delivers every callback, one at a time.
//
// # Close and Abort
//
// Close drains: Submit fails with ErrClosed, every submitted operation runs
// to completion and is posted, then the workers and the completion
// goroutine exit. Abort cancels what has not started (punted operations
// still queued, reads still waiting for a page) with ErrCanceled and waits
// for the rest, since an engine call or a device I/O in flight cannot be
// interrupted. Either way no buffer is in use when they return, and
// completions not yet reaped stay available to Wait and Peek.
//
// # Counters
//
// Stats counts inline completions, queued device I/O, punts (forced and
// hashed), hashed waits (punts queued behind their inode's chain), NOWAIT
// EAGAINs, retries armed and fired, cancellations, refused submissions, and
// the workers started, busy (running punted work) and blocked (inside a
// blocking engine call), current and peak.
//
// # Concurrency
//
// Every method may be called from any goroutine. Submit runs the inline
// attempt on the caller's goroutine; completions are posted from the
// submitter, a device completion goroutine, a worker or the completion
// goroutine. Locks, all leaves (none is held while another is taken, while
// the engine is called, or while a callback runs):
//
//	Ring.mu   entries, the completion queue, waiters, the task queue
//	pool.mu   the run queue and the hashed chains
package ring
