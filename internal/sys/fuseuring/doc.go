// Package fuseuring drives the kernel's FUSE-over-io_uring queues
// (CONFIG_FUSE_IO_URING, Linux 6.14 and later): a FUSE server receives
// requests as io_uring completions in buffers it registered, and answers
// each by writing the reply into the same buffers and submitting
// FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which also re-arms the buffers for
// the next request. The package knows the transport only: it never decodes
// a request (the fuse_in_header, the per-opcode structs and the reply are
// the server's business).
//
// # Use
//
//	Enable()                                   // before mounting: enable_uring=Y
//	mount /dev/fuse; read FUSE_INIT from it; reply with FUSE_INIT_EXT and
//	FlagOverIOURing (flags2 bit 9), max_write, max_pages
//	qs, err := Start(Config{Fd: fd, PayloadSize: MaxPayload(maxWrite, maxPages, pageSize)})
//	per queue, one goroutine:  err := q.Serve(func(es []*Entry) { answer or hand off each })
//	                           (IssueSQPoll, IssueThread: es, err := q.Wait(es[:0]) in a loop)
//	per request, any goroutine: decode e.InHeader()/e.OpIn()/e.Payload()[:e.PayloadLen()],
//	                            write fuse_out_header to e.InHeader() and out-args to e.Payload(),
//	                            q.Commit(e, n)
//	keep reading /dev/fuse: FORGET, BATCH_FORGET and INTERRUPT still come there
//	unmount or abort; Wait returns ErrStopped; q.Close(); close(fd)
//
// A server that opens files on its own mount (its tests do) must first
// make the kernel learn that it answers FUSE_POLL with ENOSYS, by one open
// made alone, as go-fuse does at mount: Go's netpoller registers every
// opened file with epoll_ctl, which on FUSE sends FUSE_POLL and waits in a
// raw system call that keeps its P, and opens on every P at once leave no
// P to run the goroutines that would answer. This is not specific to the
// rings.
//
// # The kernel's rules
//
// Read from fs/fuse/dev_uring.c, fs/fuse/dev_uring_i.h and
// include/uapi/linux/fuse.h in torvalds/linux (stored dev_uring.c
// 03a3617f92c2, dev_uring_i.h 09098e62e4be; function names given so they
// can be found in any version) and checked against Linux 6.18 by this
// package's tests where marked (tested).
//
//   - Layout (fuse.h, protocol 7.42): struct fuse_uring_req_header is
//     in_out[128], op_in[128] and struct fuse_uring_ent_in_out {u64 flags;
//     u64 commit_id; u32 payload_sz; u32 padding; u64 reserved}, 288 bytes.
//     struct fuse_uring_cmd_req {u64 flags; u64 commit_id; u16 qid;
//     u8 padding[6]} sits at the start of the SQE's 80-byte command area,
//     so the ring must have 128-byte SQEs (fuse_uring_cmd returns EINVAL
//     without IO_URING_F_SQE128). The command goes in sqe->cmd_op
//     (IORING_OP_URING_CMD): REGISTER = 1, COMMIT_AND_FETCH = 2.
//   - Enabling (fuse_uring_cmd, fuse_send_init, process_init_reply): the
//     kernel offers FUSE_OVER_IO_URING in INIT only while enable_uring is
//     on, and marks the connection as io_uring only if the reply has it
//     while enable_uring is on. A command on a connection not so marked,
//     with enable_uring off, fails with EOPNOTSUPP. Before the INIT reply
//     (fc->initialized) it fails with EAGAIN, because the ring's payload
//     size comes from the reply; io_uring then retries it in a worker, so
//     that failure can come after Start returned (not tested). So: Enable,
//     then mount, then answer INIT, then Start (tested).
//   - REGISTER (fuse_uring_register, fuse_uring_create_ring_ent): sqe->addr
//     points to 2 iovecs {header, payload}, sqe->len = 2 (else EINVAL); the
//     header iovec must cover 288 bytes and the payload iovec at least
//     max(FUSE_MIN_READ_BUFFER = 8192, max_write, max_pages * PAGE_SIZE)
//     (fuse_uring_create), else EINVAL; qid must be below the number of
//     queues, else EINVAL. The kernel keeps the buffer addresses; it
//     completes the command only when a request arrives in the entry.
//   - Queues (fuse_uring_create, fuse_uring_task_to_queue): one per
//     possible CPU (num_possible_cpus); a request goes to the queue of the
//     CPU the requesting task runs on. The ring becomes ready, and requests
//     start to flow through it instead of /dev/fuse, only when every
//     queue has an available entry (is_ring_ready, fuse_uring_do_register)
//     (tested). Meanwhile, once the INIT reply has said FUSE_OVER_IO_URING,
//     every new request waits (fuse_block_alloc in fs/fuse/dev.c) until the
//     ring is ready; a REGISTER that fails clears the connection's
//     io_uring mark and releases them to /dev/fuse (tested: Start with too
//     small payload buffers fails with EINVAL, and stat is then served on
//     /dev/fuse). So a server that answered INIT with the flag must Start
//     promptly, or keep serving /dev/fuse until Start fails.
//   - Arrival (fuse_uring_args_to_ring, fuse_uring_copy_to_ring): the
//     fuse_in_header goes to in_out; the first in-argument, when not
//     empty, to op_in (that is the per-opcode struct: fuse_read_in,
//     fuse_write_in, ...; for LOOKUP the first argument is empty and the
//     name goes to the payload (tested)); the other in-arguments to the
//     payload, back to back, with ring_ent_in_out.payload_sz their length
//     and ring_ent_in_out.commit_id the request's unique.
//   - Commit (fuse_uring_commit_fetch, fuse_uring_commit,
//     fuse_uring_out_header_has_err, fuse_uring_copy_from_ring): the
//     command area carries commit_id (the one from ring_ent_in_out) and
//     qid. The kernel reads the fuse_out_header from in_out and every
//     out-argument from the payload, payload_sz (written by the server into
//     ring_ent_in_out) bytes of them (tested with READ data). An
//     out-header with unique 0 (a notification: not supported through the
//     ring, send it on /dev/fuse), a positive error, or an unique that is
//     not the request's fails the request, not the command. The command
//     itself fails inline with ENOTCONN (connection or queue stopped),
//     EINVAL (qid), ENOENT (commit_id unknown) or EIO (entry not in user
//     space); then the entry has no command in the kernel and is lost.
//   - What stays on /dev/fuse (fuse_io_uring_ops): FORGET and BATCH_FORGET
//     (send_forget = fuse_dev_queue_forget) and INTERRUPT
//     (send_interrupt = fuse_dev_queue_interrupt), plus requests queued
//     before the ring was ready. Notifications are written to /dev/fuse.
//     A server must keep reading /dev/fuse (tested: nothing else came).
//   - End (fuse_uring_abort, fuse_uring_stop_queues,
//     fuse_uring_entry_teardown, fuse_uring_cancel, fuse_uring_cmd,
//     fuse_uring_send_in_task): on abort or unmount the kernel ends queued
//     requests and completes each available entry's command with ENOTCONN
//     (tested: Wait returns ErrStopped within milliseconds); entries held
//     by the server have no command and are just released. A command
//     issued after the abort fails with ECONNABORTED or ENOTCONN. When
//     the task that issued a command dies before a request is delivered,
//     it completes with ECANCELED. Closing the ring cancels available
//     entries (IO_URING_F_CANCEL) with ENOTCONN. Unmount waits until no
//     entry is available or in user space (fuse_uring_wait_stopped_queues).
//
// # Task work: who issues the commands
//
// The kernel delivers a request into an entry from task work of the task
// that issued the entry's command (fuse_uring_dispatch_ent calls
// io_uring_cmd_complete_in_task; fuse_uring_send_in_task copies into the
// buffers "in ring task context"). In a Go program that task is whatever
// OS thread ran the io_uring_enter, and the runtime may later run on that
// thread a goroutine that makes a FUSE request on the same mount (stat,
// read): the thread then sleeps uninterruptibly in request_wait_answer,
// waiting for a request that only its own task work can deliver. This
// happened in development: the entries stayed in FRRS_FUSE_REQ, the kernel
// logs "ent-req-queue ... state=3" every 50 ms, and neither abort nor
// SIGKILL frees the threads. Likewise, a thread that issued commands and
// then exits (a goroutine that ends locked to its thread) leaves them to
// io_uring's dead-task fallback, which fails the next delivery with
// ECANCELED (fuse_uring_send_in_task, IO_URING_F_TASK_DEAD).
//
// So no goroutine of the caller ever issues a command. Config.Issuer
// chooses who does:
//
//   - IssueOwner (default): each queue has an owner goroutine locked to
//     its own OS thread for the queue's life, which registers the
//     entries and runs Serve's loop, libfuse's model: one io_uring_enter
//     submits every reply committed since the last pass and waits; the
//     owner reaps every request that arrived and calls Serve's function
//     with them on its own thread, where the server answers what is quick
//     (a Commit there is a few stores) and hands off the rest. A Commit
//     from another goroutine publishes its SQE under the SQ mutex and, if
//     it finds the owner asleep (sleeping, set by the owner under the same
//     mutex before it enters), writes an eventfd whose read the owner
//     keeps armed on its ring; so either the owner's enter submits the
//     SQE or the eventfd wakes it, and no commit is left behind. The
//     owner is also the thread whose task work delivers requests, and no
//     other goroutine ever runs on it. Nothing spins. The owner can lend
//     its ring (uring.Host): inside a window the server opens with Lend
//     around code that never waits for I/O, Borrow puts another
//     package's operation (a device read or write) on the ring, the next
//     enter submits it with the commits, and the owner completes it on
//     its thread when it reaps the CQE, before it hands on the batch.
//   - IssueSQPoll: every queue's ring is created with
//     IORING_SETUP_SQPOLL, all of a connection's rings attached to one SQ
//     polling kernel thread (IORING_SETUP_ATTACH_WQ), which issues every
//     command and runs the task work. While it polls, Commit is a few
//     stores and no system call, and commits are issued in batches; it
//     polls (a busy CPU) for Config.SQPollIdle after each burst, and a
//     Commit that finds it asleep wakes it with one io_uring_enter.
//   - IssueThread: each queue has an internal goroutine locked to its own
//     OS thread for the queue's life; Commit publishes the SQE and kicks it
//     through a channel of one (commits that arrive while it is in the
//     kernel are issued together by its next io_uring_enter). Task work
//     wakes that thread from its futex sleep. Nothing spins, but every
//     burst costs a goroutine wake-up and a system call.
//
// Measured before IssueOwner on a 2-core VM shared with other work (load
// 7-15), with BenchmarkGetattr: stat(2) of the root, one GETATTR each,
// one request in flight, per request:
//
//	/dev/fuse, answered by its reader                 7-9 us
//	SQPOLL, answered on the Wait goroutine           18-27 us
//	SQPOLL, handed to worker goroutines              58-110 us
//	thread, answered on the Wait goroutine           36-43 us
//	thread, handed to worker goroutines              37-87 us
//
// One request at a time is the rings' worst case (a thread hop each way,
// and on 2 CPUs the polling thread takes one); their case is many requests
// on many CPUs, which these numbers do not cover.
//
// # Memory
//
// Headers (288 bytes plus the REGISTER's two iovecs, 384 bytes per entry)
// and payloads (Config.PayloadSize per entry) are anonymous mappings, never
// Go heap: the kernel keeps their addresses for the life of the
// connection and the garbage collector must not scan or move them. Close
// unmaps them once no command is outstanding; see Close for the case
// where the connection is still alive.
//
// # Concurrency
//
//   - Serve (IssueOwner): one per queue, once; its function runs on the
//     owner's thread. Wait (the other issuers): one goroutine per queue
//     at a time. Either owns the queue's completion side.
//   - Commit: any number of goroutines, concurrently with each other and
//     with Wait. Commits are serialised only while they fill an SQE
//     (a mutex, no system call inside it).
//   - Entries: an entry returned by Wait belongs to the caller until it
//     passes it to Commit; the kernel does not touch its buffers meanwhile.
//     Commit checks that an entry is committed once per arrival.
//   - Lend, Borrow: the owner goroutine only (Serve's function, or a
//     borrowed operation's Complete); Borrows: any goroutine.
//   - Stats: any goroutine.
//   - Close: any goroutine, once. It wakes a blocked Wait or the owner
//     (Serve returns ErrClosed), waits for it to return (the owner
//     submits the last commits, waits for its borrowed operations to
//     complete, and ends), makes later Commits return ErrClosed, and
//     closes the ring.
//
// Lock order, where nested:
//
//	Queue.closeMu (read by Commit, write by Close)
//	  Queue.sqMu (filling an SQE, a Commit's or a Borrow's; the owner's
//	  sleeping flag)
//	Queue.waitMu (Wait, the owner's reaping, Close, Start) is never held
//	with the others.
package fuseuring
