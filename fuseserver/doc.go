// Package fuseserver is sluice's FUSE server: it mounts a file system
// (mount(2) as root, fusermount3 otherwise), answers the kernel's INIT,
// carries requests between the kernel and the daemon over /dev/fuse or
// FUSE-over-io_uring, decodes each one and calls the FileSystem. It
// replaces go-fuse's fuse.Server; from go-fuse it keeps the wire types
// (fuse.InHeader, fuse.WriteIn, ...) and the operations interface
// (fuse.RawFileSystem, which FileSystem is), not the serving.
//
//	srv, err := fuseserver.Mount(fs, "/mnt/vol", fuseserver.Config{Name: "sluice"}) // io_uring where offered
//	tr, why := srv.Transport() // "uring", "io_uring (the kernel offers it)"
//	<-srv.Done()               // after an unmount or an abort, every request answered
//
// Files: dispatch.go (the opcode table and one handler per opcode),
// request.go (a request's decoding, its reply, interrupt slots),
// server.go (Config, Mount, Server, Stats, the choice of transport),
// init.go (INIT negotiation), devfuse.go (the /dev/fuse transport),
// uring.go (the io_uring transport over internal/sys/fuseuring),
// notify.go (notifications to the kernel, Attacher, Dev),
// mount.go (mount(2), fusermount3), pollhack.go (the poll probe).
//
// # A request's life
//
// On /dev/fuse, a reader goroutine read(2)s one request into its own
// buffer, decodes it, runs the handler on the same goroutine and writes
// the reply with one writev(2): the out header and fixed reply struct from
// one buffer, the data from where the handler built it. INIT is the first
// request, read and answered by Mount itself before any other reader runs.
//
// On io_uring (Linux 6.14 and later, enable_uring on), after INIT granted
// FUSE_OVER_IO_URING, Mount registers Config.URingDepth ring entries on
// each of the kernel's queues (one per possible CPU); the kernel holds
// requests back until every queue has its entries, then puts each request
// into an entry of the queue of the CPU the caller runs on. Each queue has
// an owner thread (fuseuring.IssueOwner, the default Config.URingIssuer)
// that issues the queue's ring commands and receives its requests
// (fuseuring.Queue.Serve); for each request it either
//
//   - serves it on the spot, if it is quick (handler.quick: LOOKUP,
//     GETATTR, SETATTR without a size, READLINK, OPEN without O_TRUNC,
//     STATFS, GETXATTR, LISTXATTR, FLUSH, OPENDIR, READDIR(PLUS),
//     RELEASEDIR, ACCESS, LSEEK, STATX: in-core or metadata work that
//     never waits for the device or the kernel);
//   - starts it, if it is a READ or WRITE the FileSystem can start
//     without blocking (AsyncIO: fusefs's aligned I/O on engine-direct
//     handles): answered at once, or answered and committed by the
//     device completion;
//   - or hands it to the goroutine that owns its ring entry.
//
// Whoever serves the request writes the reply into the entry's buffers
// and commits it (FUSE_IO_URING_CMD_COMMIT_AND_FETCH), which answers the
// request and re-arms the entry in one command; the owner's next
// io_uring_enter submits every commit made since its last one and waits
// for the next requests. Stats.URingInline counts the requests served or
// started on the owner. Everything else (data I/O that may block,
// truncation, syncs, namespace changes, IOCTL, whose exchange waits for
// the kernel to drop pages) runs on the entry goroutines, so the owner
// never waits for what a request queued behind it must answer. With the
// other issuers (sqpoll, thread) a goroutine per queue waits for the
// requests and hands every one off. No goroutine of this process but the
// owners issues ring commands (fuseuring's package doc says why). INTERRUPT, FORGET and BATCH_FORGET still travel on /dev/fuse under
// io_uring (fs/fuse/dev_uring.c queues only ordinary requests), so the
// /dev/fuse readers keep running on both transports.
//
// No goroutine is started per request. /dev/fuse readers are started as
// the load needs them (when the last idle reader takes a request, one more
// starts) up to Config.MaxReaders, and they live as long as the
// connection; they end only at ENODEV (the connection is gone), retrying
// every other read error, so that the mount is never left without a
// reader. On io_uring there is one owner thread per queue and one
// serving goroutine per ring entry, started at the entry's first request.
// Each serving goroutine owns one request value and reuses it: serving a
// request allocates nothing of its own.
//
// Zero copy. A reader's buffer is laid out so that a WRITE's data starts
// on a page boundary (the request is read at page minus
// sizeof(fuse_write_in)), and a ring entry's payload buffer is a
// page-aligned mapping that holds the WRITE data: either way the handler
// gets the data in place, aligned for O_DIRECT. READ replies (and
// READDIR, xattrs) are built in place: the handler reads into the reader's
// reply area or the entry's payload buffer, which is what writev(2) sends
// or the kernel copies from. The only copies are the kernel's, between its
// pages and these buffers. Nothing is spliced (see SPLICE_* below).
//
// Interrupts. Each serving goroutine has an interrupt slot that holds the
// unique of the request it serves; a handler's cancel channel is its
// slot's. INTERRUPT scans the slots (interrupts are rare, so no table is
// updated per request) and closes the channel of the request it names; a
// request not found in flight is answered EAGAIN, which makes the kernel
// send the INTERRUPT again (on io_uring the request and its INTERRUPT
// travel on different channels, and the INTERRUPT may come first).
// Stats counts Interrupts and InterruptsMatched.
//
// Panics. A handler that panics is recovered; the request is answered
// with Config.PanicHandler's status (nil: EIO, and the stack is logged),
// and the mount keeps serving.
//
// Stats counts the requests by the way they arrived (DevFuseRequests,
// INIT included, and URingRequests): on an io_uring mount ordinary
// requests all arrive on the rings (fusefs TestRequestsTravelOverURing
// sends 1000 and sees 0 on /dev/fuse).
//
// # The poll probe
//
// Go's runtime adds every file a program opens to its epoll set. On FUSE,
// epoll_ctl(2) sends FUSE_POLL and waits for the answer inside a raw
// system call, which keeps its scheduler slot (P); a process that serves
// its own mount and opens files on it (tests, embedded users) can then
// have every P waiting for POLL answers that only its own goroutines could
// give, and a garbage collection that stops the world waits for those
// slots forever. Once a server answers POLL with ENOSYS, the kernel never
// sends it again (fc->no_poll). So Mount does that first, alone: it looks
// up a name only the server knows (.sluice-poll-probe, answered by the
// server, never by the FileSystem), opens it and adds it to an epoll set,
// and answers the POLL ENOSYS. The probe's own epoll_ctl is made as an
// ordinary system call, not a raw one: with unix.EpollCtl (raw) the probe
// itself deadlocked against a collection.
//
// # Transports
//
// Config.Transport: TransportDevFuse uses /dev/fuse only. TransportURing
// offers FUSE_OVER_IO_URING in INIT and fails the mount if the kernel
// cannot (no support, enable_uring off for a non-root daemon, not granted
// in INIT, rings not registered). TransportAuto does the same but falls
// back to /dev/fuse, saying why; it is the default (see its doc for the
// measurement). When
// /sys/module/fuse/parameters/enable_uring is off and the daemon runs as
// root, Mount turns it on (the kernel's switch is global) and says so;
// another user needs an administrator to turn it on. Server.Transport
// returns the transport in use and why it was chosen, in words meant for
// an operator (sluice mount prints them).
//
// # SYNCFS
//
// A FileSystem that also implements SyncFSer answers FUSE_SYNCFS with a
// sync point of everything written before it. But Linux (6.18
// here) sends SYNCFS only to servers it marks sync_fs (fc->sync_fs, set
// by virtiofs), so on a /dev/fuse or io_uring mount syncfs(2) and
// sync(1) never reach the daemon (fusefs TestSyncfsReachesDaemon skips,
// saying so). fsync(2) of a file (FSYNC) and of a directory (FSYNCDIR) are
// the durable paths on these kernels; the SYNCFS handler is there for a
// kernel that sends it.
//
// # IOCTL and notifications
//
// IOCTL is handed to FileSystem.Ioctl (go-fuse's signature) with the
// in-data that follows fuse_ioctl_in and a cleared out-data buffer of
// OutSize bytes, which goes back whole after fuse_ioctl_out. The kernel
// sends only restricted ioctls (fuse_do_ioctl; UNRESTRICTED and RETRY are
// CUSE's): it moves _IOC_SIZE(cmd) bytes in for an _IOW command and out
// for an _IOR one, and turns ENOSYS into ENOTTY. Ioctls that do_vfs_ioctl
// answers itself never arrive (FIEMAP, FICLONE, FIONREAD, ...); the
// fileattr ones (FS_IOC_GETFLAGS, FS_IOC_FSGETXATTR and their setters)
// arrive on a private OPEN of the kernel's (fuse_priv_ioctl).
//
// Server.InvalidateInode sends FUSE_NOTIFY_INVAL_INODE: a write(2) to
// /dev/fuse on either transport (io_uring carries only replies), which
// returns once the kernel has dropped the node's attributes and pages. A
// FileSystem that implements Attacher gets its Server before the first
// request to call it; Server.Dev is the mount's st_dev, read from
// /proc/self/mountinfo before the first request (a stat of the mount point
// then would wait for a GETATTR nobody serves).
//
// # Protocol versions
//
// sluice speaks FUSE 7.x for x up to 45 (ourMinor) and needs the kernel to
// speak at least 7.31 (minMinor: Linux 5.4, which has MAX_PAGES,
// CACHE_SYMLINKS and HANDLE_KILLPRIV); an older kernel fails the mount
// with both versions named. The reply's minor is the smaller of the two.
//
// # INIT flags
//
// Every mount asks for the base set (baseCapabilities in init.go), plus
// FUSE_OVER_IO_URING when it offers io_uring, plus Config.Capabilities
// (what fusefs asks for: capabilities in fusefs/mount.go). Each flag is
// granted only if the kernel offers it. Names are go-fuse's; the kernel's
// are the same with FUSE_ for CAP_ (CAP_READDIRPLUS is FUSE_DO_READDIRPLUS).
// "asked" is base (always), io_uring (when io_uring is offered), fusefs
// (by fusefs, on every mount), writeback (by fusefs with
// Options.WritebackCache) or no (deliberately not asked for; the kernel
// only announces the SPLICE_* flags, and no means that sluice does not
// use them). TestInitFlagsDocumented checks this table against
// baseCapabilities and FUSE_OVER_IO_URING.
//
//	flag                      asked      why
//	CAP_ASYNC_READ            base       several READs of one file in flight at once (readahead,
//	                                     concurrent readers) instead of one at a time
//	CAP_BIG_WRITES            base       WRITEs of more than one page, up to max_write (1 MiB)
//	CAP_FILE_OPS              base       asked for as libfuse and go-fuse do; the kernel does nothing
//	                                     with it (fuse.h: "not yet supported")
//	CAP_ATOMIC_O_TRUNC        base       open(O_TRUNC) is one OPEN with O_TRUNC, truncated by the
//	                                     engine's open, not an OPEN then a SETATTR of size 0
//	CAP_AUTO_INVAL_DATA       base       the kernel drops a file's cached pages when GETATTR shows its
//	                                     mtime or size changed; the daemon invalidates a file itself
//	                                     only when the kernel cannot know (an exchange, InvalidateInode)
//	CAP_READDIRPLUS           base       READDIRPLUS returns each entry with its attributes, saving a
//	                                     LOOKUP per name for ls -l, find and du
//	CAP_PARALLEL_DIROPS       base       LOOKUPs and READDIRs of one directory run in parallel instead
//	                                     of under the kernel's per-directory mutex
//	CAP_MAX_PAGES             base       max_pages in the reply lifts the 32-page (128 KiB) request
//	                                     limit to max_write (256 pages, 1 MiB)
//	CAP_INIT_EXT              base       flags2 carries bits 32-63: needed for DIRECT_IO_ALLOW_MMAP and
//	                                     OVER_IO_URING
//	CAP_OVER_IO_URING         io_uring   requests travel on io_uring rings (TransportAuto, TransportURing)
//	CAP_ASYNC_DIO             fusefs     libaio and io_uring O_DIRECT I/O stays asynchronous: QD32
//	                                     reaches the daemon as 32 requests in flight, not 1
//	CAP_HANDLE_KILLPRIV_V2    fusefs     the engine clears set-user-ID and capabilities on write, so the
//	                                     kernel stops asking for security.capability before each write
//	CAP_DIRECT_IO_ALLOW_MMAP  fusefs     files answered FOPEN_DIRECT_IO can still be mmapped (shared
//	                                     writable mappings too)
//	CAP_CACHE_SYMLINKS        fusefs     the kernel caches symlink targets, which never change
//	CAP_WRITEBACK_CACHE       writeback  the kernel's writeback cache (sluice mount --writeback-cache);
//	                                     off by default: the kernel then owns size and mtime
//	CAP_POSIX_LOCKS           no         the kernel keeps POSIX and OFD locks itself (fs/locks.c); one
//	                                     mount serves a volume (the volume lock), so no other node
//	                                     can hold a conflicting lock
//	CAP_FLOCK_LOCKS           no         likewise for flock(2) locks
//	CAP_SPLICE_WRITE          no         replies are built in memory; splicing cost three more system
//	                                     calls per READ (go-fuse's splice path: 4 KiB O_DIRECT randread
//	                                     QD32 went from 23.5k to 34.9k IOPS without it)
//	CAP_SPLICE_MOVE           no         as SPLICE_WRITE
//	CAP_SPLICE_READ           no         requests are read into the reader's buffer, aligned in place
//	CAP_PASSTHROUGH           no         sluice's files are extents on a device, not host files the
//	                                     kernel could read itself; it would also limit stacking other
//	                                     file systems on the mount
//	CAP_EXPLICIT_INVAL_DATA   no         the kernel would keep cached pages until the server
//	                                     invalidates them, and sluice notifies only after an
//	                                     exchange (AUTO_INVAL_DATA wins when both are asked)
//	CAP_IOCTL_DIR             no         the kernel announces FUSE_HAS_IOCTL_DIR and sends directory
//	                                     ioctls (FUSE_IOCTL_DIR) to any server of protocol 7.18 or
//	                                     later, whatever the reply says; file ioctls need no flag
//	CAP_SETXATTR_EXT          no         its one flag (ACL_KILL_SGID) matters only with POSIX_ACL,
//	                                     which sluice does not ask for; the 8-byte fuse_setxattr_in
//	                                     suffices
//	CAP_READDIRPLUS_AUTO      no         every listing is READDIRPLUS; the kernel's heuristic would
//	                                     switch to READDIR after the first reply unless the entries
//	                                     were stat'ed, trading the engine's Getattr per entry for a
//	                                     LOOKUP round trip per name when they are
//
// No other flag is asked for: none is needed by what sluice serves (most
// are for NFS export, DAX, submounts, idmapped mounts, security contexts,
// POSIX ACLs or request timeouts).
//
// # Concurrency
//
// FileSystem methods are called from many goroutines at once: up to
// Config.MaxReaders /dev/fuse readers, plus one per io_uring entry. Those
// goroutines are bounded, so a method that waits for another request of
// the same mount to be served can find none left to serve it.
// InvalidateInode from a method is such a wait (the kernel may need a
// READ or a WRITE answered to drop a page); it is safe while few methods
// do it at once, far fewer than MaxReaders and the entries of a queue.
package fuseserver
