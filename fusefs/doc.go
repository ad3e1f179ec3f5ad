// Package fusefs serves a sluice file system to any program through FUSE:
// the operations that turn FUSE requests into engine calls and the mount
// around them, and nothing else (package fuseserver carries the requests).
// `sluice mount` (cmd/sluice) is its command-line face.
//
//	eng, _ := sluice.Open("/var/lib/vol", nil)
//	srv, err := fusefs.Mount(eng, "/mnt/vol", &fusefs.Options{Metrics: fusefs.NewMetrics()})
//	...
//	srv.Unmount() // EBUSY while files are open; see UnmountOptions
//	eng.Close()
//
// # Design
//
// FS implements the raw operations that fuseserver dispatches (go-fuse's
// fuse.RawFileSystem, whose wire types fuseserver keeps, plus SyncFS), not
// an inode tree: the kernel's node IDs are the engine's inode numbers
// (FUSE_ROOT_ID is sluice.RootIno), so there is no second tree of inodes
// in memory and no table from one to the other, and every request
// is one engine call by inode number (Lookup, Getattr, Setattr, CreateIno,
// OpenIno, RenameIno, ...). FORGET is a no-op: the engine keeps an inode
// while it is linked or open, and the kernel's lookup counts matter to
// nothing in sluice. File handles are a table of engine *sluice.File.
// Errors become errnos in exactly one function (toStatus); a handler that
// panics answers EIO and logs its stack (fuseserver recovers and calls
// FS's panic handler, which logs and counts), and the mount keeps serving.
//
// Mount options: mount(2) as root, fusermount3 otherwise; max_write 1 MiB;
// MaxBackground 128 (background requests carry readahead, writeback and,
// with CAP_ASYNC_DIO, every libaio/io_uring O_DIRECT request, so the
// kernel's default of 12 caps a QD32 benchmark at 12); parallel dirops;
// default_permissions always (the kernel checks permissions against the
// mode and owner sluice reports).
//
// # Transport
//
// Options.Transport chooses how requests travel: io_uring when the
// kernel offers it, /dev/fuse otherwise (TransportAuto, the default, by
// measurement), /dev/fuse only (TransportDevFuse) or io_uring only
// (TransportURing, the mount fails without it); Options.URingDepth sets the ring
// entries per kernel queue. As root the daemon turns the kernel's
// enable_uring switch on itself. Server.Transport says which transport is
// in use and why (`sluice mount --transport` prints it on stderr);
// Server.Stats counts requests per transport. fuseserver's package doc
// has the design and the table of INIT flags.
//
// # Who may use a mount
//
// A mount made by root is open to every user (allow_other), as a kernel
// file system mounted by an administrator is; with default_permissions the
// kernel then answers every user by the modes, owners, sticky and
// set-group-ID bits as it does on XFS (EPERM for a chmod by a non-owner,
// EACCES for a mode that refuses). Without allow_other FUSE refuses every
// other user at the mount point itself (EACCES, even for root), which is
// FUSE's default for a mount made by a user through fusermount3 and
// sluice's for such a mount too. Options.Access chooses otherwise:
// AccessMounter keeps a root mount to root; AccessEveryone (or -o
// allow_other) opens a user's mount, which fusermount3 allows only with
// user_allow_other in /etc/fuse.conf, and Mount says so rather than leave
// fusermount3 to fail. To keep users out of part of a mount, use modes, as
// on any file system.
//
// Flag options (-o ro, noexec, noatime, ...) are mount(2) flags as root
// and fusermount3 options otherwise; every mount is nosuid,nodev unless
// root asks for suid or dev. Options.MountOptions lists what is taken; an
// option the kernel or fusermount3 would refuse or ignore is refused by
// Mount with the reason.
// Capabilities asked for on top of fuseserver's base set (its package doc
// tables every flag and why): ASYNC_DIO, HANDLE_KILLPRIV_V2 (the engine
// strips set-user-ID and capabilities on write, so the kernel stops asking
// for security.capability before each write), DIRECT_IO_ALLOW_MMAP,
// CACHE_SYMLINKS, and WRITEBACK_CACHE with Options.WritebackCache.
// Passthrough is not asked for: sluice's files are extents on a device,
// not host files. Nothing is spliced: READ replies are built in memory
// (splicing, measured on go-fuse's splice path, cost three system calls
// more per READ than a writev: 4 KiB O_DIRECT randread QD32 went from
// 23.5k to 34.9k IOPS without it, 23 to 15 us of daemon CPU per I/O).
//
// POSIX, OFD and flock locks are left to the kernel (the lock capabilities
// are not negotiated): fs/locks.c implements them exactly, and a volume is
// served by one mount only (the volume lock), so no other node can hold a
// conflicting lock.
//
// # Direct I/O
//
// An O_DIRECT open is answered FOPEN_DIRECT_IO, plus
// FOPEN_PARALLEL_DIRECT_WRITES when the file takes direct writes in
// parallel ((*sluice.File).ParallelDirectWrites: the policy's
// ParallelDirectWrites). The kernel then sends non-extending direct writes
// concurrently under a shared inode lock and sluice's own I/O lock decides;
// under --policy classic it takes the inode lock exclusive and sends them
// one at a time. The engine file is opened O_DIRECT, so the data never
// enters a cache. fuseserver places a WRITE's payload at a page boundary
// (in its /dev/fuse reader's buffer or the io_uring entry's payload), and
// READ replies go straight from the engine into the buffer the reply is
// sent from: aligned direct I/O is copied once, between the kernel and the
// daemon.
//
// The kernel lets O_DIRECT I/O at any offset and length through FUSE, and
// FUSE applications rely on it (go-fuse's posixtest writes 12 KiB from a
// plain slice). A read not aligned to the engine's I/O unit reads the
// covering aligned range into a bounce buffer and copies out (still no
// cache). A write not aligned goes to the engine's buffered path through a
// companion non-O_DIRECT engine file of the same handle: the engine keeps
// its direct and buffered paths coherent (a direct read writes back the
// dirty cached pages of its range first, a direct write drops them), and
// O_SYNC/O_DSYNC on the handle still make each write durable. XFS would
// return EINVAL instead; Options.StrictDirectIO (sluice mount --strict-dio)
// does that. Unaligned requests are counted in the metrics.
//
// # Buffered I/O: who caches
//
// Options.Cache chooses. KernelCache (the default) answers buffered opens
// FOPEN_KEEP_CACHE: the kernel's page cache holds the data, cached reads
// never reach the daemon, and mmap works as on any file system. The daemon
// opens the engine file O_DIRECT even for these opens: the kernel's reads
// are page-aligned (readahead, page faults), and its write-through writes
// are aligned whenever the application's are (unaligned ones take the
// companion path above), so the data is not cached twice. SluiceCache
// answers every open FOPEN_DIRECT_IO, so every read(2) and write(2) reaches
// the daemon and buffered opens use the engine's page cache (its readahead
// and write-back); mmap still works through CAP_DIRECT_IO_ALLOW_MMAP.
// Options.WritebackCache adds the kernel's writeback cache to KernelCache.
// The kernel then reads pages through write-only handles (an O_WRONLY open
// is O_RDWR in the engine), writes back the times of files the engine has
// freed (answered with success), and asks SEEK_DATA/SEEK_HOLE without
// writing its dirty pages back (answered ENOSYS: the kernel then calls the
// file all data up to its size). Pages dirtied through a shared mmap and
// not yet written back are unknown to SEEK_DATA in every mode: FUSE gives
// the daemon no way to ask the kernel to write them first.
//
// Measured with fusefs/bench/run.sh on this 2-core VM (the three mounts
// side by side, cases interleaved, median of the rounds; the machine was
// shared, so single numbers vary by up to 2x, the orderings did not):
//
//	buffered case (1 GiB file)              kernel   sluice   kernel+writeback
//	1 MiB sequential read, cold (MiB/s)        419      283      364
//	1 MiB sequential write + fsync (MiB/s)     596      172      530
//	4 KiB random write, psync (IOPS)          6866    25216    34408
//	4 KiB random read QD32, cold (IOPS)      12992    11270    13198
//	4 KiB random read, cached (IOPS)        327265    15962        -
//
// (XFS on a loop device did 510659 on the cached case.)
// The kernel cache wins sequential I/O (large, aligned requests on the
// engine's direct path; with SluiceCache each request goes through the
// engine's page cache, two to ten times the daemon's CPU per byte) and
// every cached read (20x: no round trip to the daemon); cold random reads
// are the same; SluiceCache and the writeback cache win small random
// buffered writes by absorbing them. Options.WritebackCache stays off by
// default here, and `sluice mount` turns it on (small files: an untar
// 1.65x, 4 KiB buffered writes 8x; docs/ARCHITECTURE.md has the run):
// with it the kernel owns size and mtime, reads a page before a sub-page
// write (the read-before-write that sluice's SkipFullPageRMW avoids), and
// an inode with cached opens loses parallel direct writes; O_DIRECT opens
// of files nobody opens buffered are served as without it.
//
// # Appends
//
// FUSE has no append: a WRITE carries the offset the kernel chose, and its
// answer (fuse_write_out) a byte count, never a position. Linux (6.18
// here, fs/fuse/file.c) chooses the offset from its own i_size
// (generic_write_checks_count: ki_pos = i_size for IOCB_APPEND) with the
// inode lock held exclusive: fuse_cache_write_iter takes it for every
// buffered write, and fuse_dio_wr_exclusive_lock asks for it for every
// append, even on an open answered FOPEN_PARALLEL_DIRECT_WRITES ("Append
// will need to know the eventual EOF - always needs an exclusive lock"),
// and for every other direct write past i_size (fuse_io_past_eof). An
// asynchronous direct write that extends the file is made synchronous
// (fuse_direct_IO sets io->blocking: "We cannot asynchronously extend the
// size of a file"), so libaio and io_uring appends too wait for their
// answer under the lock. io_uring adds no parallelism of its own: it
// issues O_DIRECT writes to a FUSE file inline on the submitting thread
// (the file is pollable and, with POLL answered ENOSYS, fuse_file_poll
// says writable, so io_file_supports_nowait holds; FUSE ignores
// IOCB_NOWAIT), and punts buffered ones to io-wq hashed on the inode
// (FUSE sets no FOP_DIO_PARALLEL_WRITE). With the writeback cache an
// append only fills the page cache at the kernel's i_size
// (iomap_file_buffered_write, under the same lock); the daemon sees
// writeback, WRITEs with FUSE_WRITE_CACHE and no open flags at page
// offsets, through whichever writable handle of the inode the kernel
// picks.
//
// The WRITE of an append has O_APPEND in fuse_write_in.flags
// (fuse_write_flags copies f_flags), but its offset is final: sluice
// writes at it, and O_APPEND never reaches the engine (planOpen), which
// would append a second time. No protocol feature lets a server take
// appends concurrently (the write flags are CACHE, LOCKOWNER and
// KILL_SUIDGID; passthrough, which sluice does not use, takes the same
// lock in fuse_passthrough_write_iter), so the engine's parallel appends
// (sluice.Policy.ParallelAppends) serve the library and the ring, not the
// mount: the daemon never has two appends of one file at once. What the
// mount does run in parallel are direct writes inside EOF on
// FOPEN_PARALLEL_DIRECT_WRITES opens. TestConcurrentAppends,
// TestDirectWriteConcurrencyAtDaemon and TestURingWritesThroughMount show
// both at the daemon.
//
// # Whole-volume sync, copies and statx
//
// SyncFS (SYNCFS) is a sync point of the whole volume: the engine's
// SyncAll. CopyFileRange (COPY_FILE_RANGE) clones first, as XFS does
// (whole blocks at block-aligned offsets are shared, not copied:
// cp --reflink=auto makes a reflink copy), and copies the rest inside the
// daemon, through a pooled aligned buffer in 1 MiB pieces, leaving the
// source's holes holes in the destination. Statx (STATX) answers
// GetAttr's attributes in statx form, without a birth time, which sluice
// does not keep.
//
// Linux (6.18 here) sends SYNCFS only to servers it marks sync_fs
// (virtiofs), so on a /dev/fuse or io_uring mount syncfs(2) and sync(1)
// never reach the daemon (TestSyncfsReachesDaemon skips, saying so):
// fsync(2) of a file and of a directory (FSYNCDIR) are the durable paths.
// SyncFS is there for a kernel that sends it.
//
// # Exchange-range (XFS_IOC_EXCHANGE_RANGE)
//
// XFS_IOC_EXCHANGE_RANGE (0x40285881, _IOW('X', 129, struct
// xfs_exchange_range)) is not a VFS ioctl, so Linux (6.18 here) forwards
// it from fuse_file_ioctl as FUSE_IOCTL on the handle of file2, the
// descriptor it was issued on, with the 40-byte struct copied in and no
// data out; no INIT flag is needed. FS.Ioctl decodes it as
// xfs_ioc_exchange_range does (EINVAL for a pad or a flag, before the
// descriptor is looked at) and calls (*sluice.File).ExchangeRange, which
// applies XFS's checks and exchanges in one transaction. Every other ioctl
// that reaches the daemon is answered ENOTTY, as before (the kernel turned
// the old ENOSYS into ENOTTY itself).
//
// file1_fd is a descriptor of the caller, and FUSE sends only the
// caller's thread ID. The daemon resolves it through /proc: statx of
// /proc/TID/fd/FD, with AT_STATX_DONT_SYNC so that the kernel answers a
// file of this mount from its own inode rather than with a GETATTR to the
// daemon (the ioctl never waits for another request), gives st_dev (this
// mount's, or EXDEV) and st_ino (the engine's inode number);
// /proc/TID/fdinfo/FD gives the open file description's access mode and
// O_APPEND. file1 is opened in the engine with those, file2 is the
// handle's engine file (or, if it was opened O_APPEND, one opened so), and
// the engine refuses what XFS refuses (EBADF unless both are O_RDWR and
// not O_APPEND). The limits: a descriptor the daemon cannot inspect is
// EBADF (a daemon not run by root sees only its own user's dumpable
// processes; a caller in a PID namespace the mount's cannot see has
// thread ID 0); file2's O_APPEND is the one it was opened with, since
// fcntl(F_SETFL) is not sent to the daemon (file1's comes from fdinfo and
// is current); EXDEV compares devices, not mounts as XFS does, so a bind
// mount of the mount counts as the mount; and FUSE takes no lock for an
// ioctl, so a write racing with the exchange through the kernel's cache
// may land on either side of it where XFS would make it wait.
//
// The kernel cannot know that an ioctl changed two files, so the daemon
// tells it (fuseserver's InvalidateInode, FUSE_NOTIFY_INVAL_INODE of the
// whole file, for each inode): before the exchange, which writes the
// kernel's dirty pages of both files back (writeback cache, shared
// mappings), and after it, before the reply, which drops the pages and the
// attributes, so reads and stat after the ioctl see the exchanged data,
// sizes and times. With Options.WritebackCache the kernel keeps its own
// sizes of open files over the daemon's (fuse_change_attributes_i), so an
// exchange with TO_EOF, which changes sizes, is refused with EOPNOTSUPP
// there; exchanges within EOF work. TestExchangeRangeMount and
// TestExchangeRangeMountWriteback show it on the running kernel.
//
// # What the kernel does not forward
//
// FS_IOC_FIEMAP never reaches the daemon: do_vfs_ioctl (fs/ioctl.c)
// handles it itself, in ioctl_fiemap, which calls inode->i_op->fiemap and
// answers EOPNOTSUPP when there is none, before any file's
// unlocked_ioctl; FUSE's inode operations have no fiemap, so on 6.18
// `filefrag` and `xfs_io -c fiemap` get EOPNOTSUPP on a mount and no
// FUSE_IOCTL is sent. The engine's File.Fiemap serves the library.
// fallocate(2)'s FALLOC_FL_COLLAPSE_RANGE and FALLOC_FL_INSERT_RANGE stop in
// fuse_file_fallocate (fs/fuse/file.c), which refuses any mode bit but
// KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE with EOPNOTSUPP before it builds a
// FUSE_FALLOCATE; the engine serves them on the library and the ring. The
// same check stops FALLOC_FL_UNSHARE_RANGE. FICLONE, FICLONERANGE and
// FIDEDUPERANGE end in vfs_clone_file_range and vfs_dedupe_file_range,
// which answer EOPNOTSUPP for a file without remap_file_range, and FUSE
// has none: cp --reflink=always fails on a FUSE mount, and --reflink=auto
// falls back to copy_file_range, which clones (above).
// TestLinuxAPIKernelRefusals records them on the running kernel. The file
// attribute ioctls (FS_IOC_GETFLAGS, FS_IOC_FSGETXATTR and their setters:
// lsattr, chattr) do reach the daemon, on a private OPEN of the kernel's
// (fuse_priv_ioctl), and are answered ENOTTY.
//
// # Shutdown and stale mounts
//
// Server.Unmount unmounts (EBUSY while files are open); UnmountOptions.Lazy
// detaches, Force aborts the FUSE connection. CheckMountpoint explains a
// stale mount left by a killed daemon (stat fails with ENOTCONN) and names
// the command that clears it (sluice umount DIR, which detaches it lazily,
// or fusermount3 -u DIR); the next mount recovers the volume (the engine
// frees orphans at open).
//
// # Concurrency
//
// Every FS method may run on many goroutines at once (fuseserver's
// /dev/fuse readers and io_uring entry goroutines). The handle table takes a read lock per
// request; a handle's companion file and directory listing are guarded by
// the handle's mutex. Locking of the data and the namespace is the
// engine's.
//
// A program must not fault on a mapping of a FUSE file that it serves
// itself: a page fault is not a system call to the Go runtime, so a
// stop-the-world that waits for the faulting thread never ends while the
// fault waits for the daemon's goroutines. The tests touch mappings from a
// child process.
package fusefs
