// Package iolock is the per-inode I/O lock, the in-flight direct-I/O counter
// and the block-range lock: sluice's equivalents of the XFS IOLOCK (the VFS
// i_rwsem, taken by xfs_ilock(ip, XFS_IOLOCK_SHARED|XFS_IOLOCK_EXCL)) and of
// i_dio_count with inode_dio_begin, inode_dio_end and inode_dio_wait; and a
// RangeLock of file blocks, which the kernel's file systems do not have.
//
// Every in-core inode embeds one Lock, one DIO and one RangeLock. Their zero
// values are ready to use (unlocked, nothing in flight); none may be copied
// after first use. None starts goroutines. The package imports nothing from
// sluice.
//
// # Modes
//
// A Lock is held in one of two modes:
//
//   - Shared: any number of holders at once. Taken by operations that may run
//     side by side on one file: reads, aligned direct writes that start at or
//     before EOF (allocation is serialised by the extent-map lock, not by
//     this one), sub-block direct overwrites of written blocks.
//   - Exclusive: one holder and nobody else. Taken by operations that change
//     the file's size or layout in a way a concurrent I/O could observe half
//     done: truncate, fallocate, EOF zeroing, buffered writes, and (unless
//     block ranges order them, see Block ranges) sub-block writes that need
//     zeroing or unwritten-extent conversion and O_APPEND writes.
//
// Compatibility (may a request be granted while the lock is held so?):
//
//	requested \ held   | unlocked | Shared | Exclusive
//	-------------------+----------+--------+----------
//	Shared             | yes      | yes*   | no
//	Exclusive          | yes      | no     | no
//
//	* only if no waiter is queued; see Fairness.
//
// The lock is not reentrant and has no owner: a goroutine that holds it and
// asks for it again may deadlock (Shared then Shared deadlocks as soon as an
// Exclusive waiter queues in between, as with the kernel's rwsem). Unlock must
// name the mode that is held. Unlock of a mode that is not held is a bug in the
// caller and panics, as sync.Mutex does; the lock's state cannot be trusted
// after it.
//
// # Demote
//
// Demote turns an Exclusive hold into a Shared hold without releasing the lock
// (xfs_ilock_demote, downgrade_write). There is no instant at which the lock is
// free, so no other Exclusive holder, and no writer of any kind, can get in
// between: whatever the caller established under Exclusive (an EOF zeroed, a
// drained DIO count, pages flushed) still holds when the Shared part starts.
// Shared waiters at the head of the queue are admitted together with the
// demoted holder, as if the lock had been released to them; an Exclusive
// waiter at the head stays queued (and so do all waiters behind it).
// The aligned direct write past EOF uses this: Exclusive to drain and zero the
// gap, then Demote, then the I/O under Shared.
//
// # No upgrade
//
// There is no Shared -> Exclusive upgrade, as in the kernel. Two Shared
// holders that both want to upgrade would wait for each other forever; an
// upgrade that jumped the queue would break Fairness. An operation that finds,
// under Shared, that it needs Exclusive must:
//
//	l.Unlock(iolock.Shared)
//	l.Lock(iolock.Exclusive)
//	// ... and redo every check made under Shared: the file size, the extent
//	// mapping, the privilege bits, the page-cache state. Any of them may have
//	// changed while the lock was free. (xfs_file_write_checks: "goto restart")
//
// NOWAIT callers use TryLock(Exclusive) in place of Lock and fail with EAGAIN
// when it returns false.
//
// # Fairness
//
// Grants are strictly first come, first served, with one refinement for
// readers. Exactly:
//
//  1. A request (Lock, LockContext, TryLock) is granted at once if and only if
//     no waiter is queued and the request is compatible with the current
//     holders. Otherwise Lock and LockContext join the tail of one FIFO queue
//     of waiters, and TryLock returns false without queueing.
//  2. Whenever the holders change (the last Shared holder leaves, the
//     Exclusive holder leaves or demotes) or a queued LockContext gives up,
//     the head of the queue is examined. An Exclusive head is granted if
//     nobody holds the lock. A Shared head is granted if nobody holds the lock
//     Exclusive, together with every consecutive Shared waiter behind it, up
//     to (not past) the next Exclusive waiter.
//  3. A grant is a hand-off: the lock is marked as held by the woken waiters
//     before they run, so no newcomer can take the lock between a release and
//     the waiters it wakes.
//
// Consequences. Once an Exclusive waiter is queued, new Shared requests,
// including TryLock(Shared), wait behind it (or fail), so a stream of
// overlapping readers cannot starve a writer: the writer is granted as soon as
// the holders present when it queued, and the waiters ahead of it, are done.
// A waiter never waits for anyone who arrived after it.
//
// This is stricter than Linux's rwsem, which lets a running task steal the
// lock from queued waiters until the head has waited RWSEM_WAIT_TIMEOUT (about
// 4 ms) and then sets a hand-off bit, and whose rwsem_mark_wake wakes up to
// MAX_READERS_WAKEUP (256) readers from anywhere in the queue, skipping queued
// writers. sluice keeps writers' FIFO position instead: the sub-block and
// extending writes that queue for Exclusive are exactly the ones whose latency
// the seed experiments measure.
//
// # Which operation takes which mode
//
// The engine decides; this table is its contract and the only copy of it
// (the engine's docs point here), following the XFS functions named under
// each operation. "classic", "seeds" and "concurrent" are the engine's
// Policy presets: every optimisation off; the five seeds' on (XFS today);
// all on, including the two that go beyond the kernel (ParallelAppends,
// BlockRangeExclusion). "same" means as the column to its left. Each cell
// starts with the modes the operation is granted, in order, up to the
// first ";": "Shared, Exclusive" is a Shared hold dropped and retaken
// Exclusive (there is no upgrade), "Demote" an Exclusive hold demoted to
// Shared, "Range" a RangeLock grant of the blocks the operation touches
// (taken under the Shared hold). The engine's TestLockModes
// (lockmodes_test.go, script testdata/lockmodes) runs every row under the
// three presets and checks those modes against this table. "drain" is
// DIO.Wait under Exclusive.
//
//	operation                     | classic               | seeds                 | concurrent (default)
//	------------------------------+-----------------------+-----------------------+----------------------
//
//	direct read                   | Exclusive, Demote;    | Shared; write back    | same
//	(xfs_file_dio_read, 2011 /    | drain, write back and | only the range's      |
//	now)                          | drop the file's       | dirty cached pages    |
//	                              | cached pages, then    |                       |
//	                              | Demote and read       |                       |
//
//	aligned direct write within   | Shared                | same                  | same
//	EOF                           |                       |                       |
//	(xfs_file_dio_write_aligned)  |                       |                       |
//
//	aligned direct write at EOF   | Shared; the new size  | same                  | same
//	(xfs_file_dio_write_aligned,  | is published at       |                       |
//	xfs_dio_write_end_io)         | completion            |                       |
//
//	aligned direct write past EOF | Shared, Exclusive,    | same                  | same
//	(xfs_file_write_checks,       | Demote; the checks    |                       |
//	EOF-gap branch)               | find the gap: Unlock, |                       |
//	                              | Lock Exclusive, redo  |                       |
//	                              | them, drain, zero     |                       |
//	                              | [size, pos), Demote,  |                       |
//	                              | write                 |                       |
//
//	direct write that must strip  | Shared, Exclusive,    | same                  | same
//	suid, sgid or capabilities    | Demote; as past EOF,  |                       |
//	(xfs_file_write_checks,       | to strip them         |                       |
//	!IS_NOSEC relock)             |                       |                       |
//
//	sub-block direct write within | Exclusive; drain,     | Shared; overwrite-    | same
//	EOF, over one written extent  | synchronous           | only                  |
//	(xfs_file_dio_write_unaligned,| completion            |                       |
//	IOMAP_DIO_OVERWRITE_ONLY)     |                       |                       |
//
//	sub-block direct write within | Exclusive; drain,     | Shared, Exclusive;    | Shared, Range; the
//	EOF, not one written extent   | synchronous           | the overwrite-only    | blocks it touches,
//	(xfs_file_dio_write_unaligned,| completion            | attempt fails:        | held until its
//	then IOMAP_DIO_FORCE_WAIT;    |                       | Unlock, Lock          | conversion is done;
//	concurrent: none)             |                       | Exclusive, redo every | no drain
//	                              |                       | check, drain,         |
//	                              |                       | synchronous           |
//	                              |                       | completion            |
//
//	sub-block direct overwrite in | Exclusive; drain,     | Shared; overwrite-    | Shared, Range; held
//	the EOF block, within EOF     | synchronous           | only                  | against a buffered
//	(xfs_file_dio_write_unaligned;| completion            |                       | append's page of the
//	concurrent: none)             |                       |                       | same block
//
//	sub-block direct write ending | Exclusive; drain,     | same                  | Shared; as within
//	at EOF                        | synchronous           |                       | EOF
//	(xfs_file_dio_write_unaligned:| completion            |                       |
//	pos+count >= isize)           |                       |                       |
//
//	sub-block direct write past   | Exclusive; at once,   | same                  | same
//	EOF                           | drain, synchronous    |                       |
//	(xfs_file_dio_write_unaligned)| completion            |                       |
//
//	O_APPEND direct write         | Exclusive; held until | same                  | Shared, Range; its
//	(ext4, FUSE; XFS: Shared;     | the size is           |                       | range reserved at
//	concurrent: none)             | published: pos = size |                       | the end of the last
//	                              | is sampled under it   |                       | reservation, its
//	                              |                       |                       | blocks held until
//	                              |                       |                       | the size is
//	                              |                       |                       | published, in
//	                              |                       |                       | reservation order
//
//	buffered write                | Exclusive; drain      | same                  | same
//	(xfs_file_buffered_write)     |                       |                       |
//
//	O_APPEND buffered write       | Exclusive; drain      | same                  | Shared, Range; as
//	(xfs_file_buffered_write;     |                       |                       | the O_APPEND direct
//	concurrent: none)             |                       |                       | write (NOWAIT:
//	                              |                       |                       | Exclusive, as
//	                              |                       |                       | classic)
//
//	buffered read                 | Shared                | same                  | same
//	(xfs_file_buffered_read)      |                       |                       |
//
//	truncate                      | Exclusive; drain      | same                  | same
//	(xfs_setattr_size)            |                       |                       |
//
//	fallocate, punch hole, zero   | Exclusive; drain      | same                  | same
//	range, collapse, insert and   |                       |                       |
//	unshare range                 |                       |                       |
//	(__xfs_file_fallocate)        |                       |                       |
//
//	aligned direct write into     | Shared, Range; the    | same                  | same
//	shared blocks                 | shared blocks, held   |                       |
//	(xfs_direct_write_iomap_begin | until the remap: the  |                       |
//	with a CoW fork; Range:       | data goes to staging  |                       |
//	none)                         | blocks                |                       |
//
//	sub-block direct write into   | Exclusive; drain,     | Shared, Exclusive;    | same
//	shared blocks                 | copy the blocks,      | the overwrite-only    |
//	(xfs_file_dio_write_unaligned,| synchronous           | attempt fails on a    |
//	xfs_reflink_allocate_cow)     | completion            | shared block: as not  |
//	                              |                       | one written extent    |
//
//	clone, dedupe (each file)     | Exclusive; both files | same                  | same
//	(xfs_reflink_remap_prep:      | in inode-number       |                       |
//	xfs_ilock2_io_mmap)           | order, drain both     |                       |
//
// Rows are separated by blank lines; a row's cells continue over its
// lines, and the operation's lines in parentheses name its kernel
// analogue.
//
// NOWAIT callers (RWF_NOWAIT, or the ring's inline first attempt) take the
// same modes with TryLock (xfs_ilock_iocb, xfs_ilock_iocb_for_write), and
// every step that would block (lock, upgrade, drain, EOF zeroing,
// allocation, writeback, a page read) returns EAGAIN instead, with no side
// effects. Classic has no NOWAIT path of its own: the same rule applies.
//
// Two rules hold across the table. Exclusive is never needed during the data
// I/O of an aligned direct write (other than a classic append), so that path
// demotes before submitting. And every Exclusive taken to change size or
// layout drains in-flight direct I/O first, because holding Exclusive stops
// only new submissions, not asynchronous I/O already submitted under an
// earlier Shared hold (and, under ParallelAppends, not the appends in
// flight, which count as in flight until their size is published).
//
// # Block ranges
//
// RangeLock is the second lock of an inode, taken only under a Shared hold
// of its Lock: it orders the Shared holders that must not interleave on a
// block, where the seeds' engine takes Exclusive and drains. Under
// Policy.BlockRangeExclusion a sub-block direct write within EOF that must
// allocate, convert an unwritten extent or zero part of a block (the seed
// 000 fallback) locks the blocks it touches, and holds them until its
// conversion is done: two such writes into one block are ordered, and the
// second finds the block written and writes its bytes in place; writes to
// other blocks, reads and aligned writes go on. Under
// Policy.ParallelAppends every append locks the blocks it touches, queued in
// reservation order, until its size is published; and a sub-block direct
// overwrite of the EOF block locks it too, because a buffered append may
// hold that block in a page it will write back whole. An aligned direct
// write into shared (reflinked) blocks locks them until its copy-on-write
// remap, under every policy: two writes of one shared block take turns,
// and the second finds it remapped and writes in place. Truncate and the
// other Exclusive operations take no range: Exclusive and the drain already
// exclude every range holder. A RangeLock grant is FIFO among overlapping
// requests (RangeLock's doc), so an operation waits only for earlier ones
// that share a block with it.
//
// # In-flight direct I/O
//
// An asynchronous direct I/O (the ring) is submitted under the Lock and may
// complete after the Lock is released. DIO counts such I/Os: Begin before the
// first device I/O is submitted, End in completion after unwritten-extent
// conversion and the size update (the kernel's iomap_dio_complete: ->end_io,
// then inode_dio_end). Wait blocks until the count is zero. The count can stay at zero only
// while nobody calls Begin, so Wait's caller must hold the Lock Exclusive,
// which stops new submissions; this is the "drain" of the table.
//
// # Observability
//
// Lock.Stats counts grants, contended requests, TryLock failures, demotes and
// abandoned LockContext calls per mode; DIO has InFlight, a high-water mark
// (Max, ResetMax) and Underflows. Tests assert on them (the engine's
// TestLockModes checks each operation's grants and demotes against the table
// above); the engine counts its own lock decisions separately, in its
// Counters. Reading them never waits for a holder of the lock.
// Lock.Waiters lets a test know that a goroutine is blocked in Lock, instead
// of sleeping and hoping; Lock.Holders serves "Preconditions:" assertions.
//
// # Cost
//
// An uncontended Lock is one compare-and-swap on the lock word, which also
// counts the grant in Stats; Unlock is one atomic add (Shared) or
// compare-and-swap (Exclusive). That is the cost of sync.RWMutex: two atomic
// read-modify-writes per Lock/Unlock pair, no mutex, no allocation. Shared
// holders touch only the lock word's cache line, so readers contend with each
// other on that line and never on a mutex. The internal mutex is taken only
// when a request must queue, when a release or Demote hands the lock to
// queued waiters, once every 2^20 Shared or 2^18 Exclusive grants (to carry
// the lock word's counter), and by Stats. A queued request costs no
// allocation either (waiters are pooled).
//
// # Build tag invariants
//
// With -tags invariants, DIO.End on a zero count panics. Without it, End on a
// zero count is ignored, counted (DIO.Underflows) and logged through log/slog,
// so that a server survives the bug and exports it.
package iolock
