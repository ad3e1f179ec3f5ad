// Package sluice is a user-space file-system engine for highly concurrent
// direct and asynchronous I/O: the library face of sluice. A Go program
// opens a volume and gets a file system with POSIX semantics:
//
//	fs, err := sluice.Open("/var/lib/vol", nil)
//	f, err := fs.OpenFile("/db/data", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
//	n, err := f.WriteAt(buf, off) // buf from device.AlignedBuf for O_DIRECT
//	err = f.Fsync()
//
// The path API (OpenFile, Mkdir, Rename, ...) resolves paths from the root;
// the inode API (Lookup, Getattr, CreateIno, OpenIno, RenameIno, ...) is
// what the FUSE adapter serves. The ring package adds queued asynchronous
// submission on top of File.ReadAsync and File.WriteAsync.
//
// # The I/O path and its policy
//
// Each of the five seed optimisations is a field of Policy (Options.Policy):
// Concurrent() has all on (the default), Classic() all off. Which operation
// takes the I/O lock in which mode is tabled in the iolock package doc;
// the direct paths are in dio.go (directRead, directWriteAligned,
// directWriteUnaligned), buffered I/O in buffered.go and writeback.go, and
// space operations in space.go. Counters record each decision.
//
// Completion order for a direct write: convert the unwritten extents it
// wrote, then publish the new size (never shrinking), then drop cached
// pages of the range, then release its block range (if it holds one), then
// end its in-flight count, then sync for O_DSYNC. A parallel append
// (appends.go) converts and publishes in reservation order instead, at its
// publication, then goes on in the same order.
//
// # Beyond the kernel's locks
//
// Policy.ParallelAppends and Policy.BlockRangeExclusion go past what the
// kernel's file systems do: appends reserve their range and run under the
// shared I/O lock, and sub-block direct writes that must allocate, convert
// or zero lock only their blocks (iolock.RangeLock) instead of the whole
// file. Both are rows of the iolock package doc's table.
//
// # Durability
//
// The in-core state (inodes, extent maps) is authoritative; the metadata
// (Pebble) lags behind it in exactly two ways, both repaired by the next
// sync point (Fsync, Fdatasync, O_SYNC and O_DSYNC writes, SyncAll, Close,
// and the background syncer every Options.SyncInterval):
//
//   - attributes changed by data writes (size, times) and by Setattr
//     without a size (chmod, chown, utimes) are persisted later, by the
//     inode's next transaction or the sync point;
//   - blocks written into unwritten extents are persisted as unwritten until
//     a device flush made their data durable (extmap epochs), so a crash can
//     only show zeros there, never the blocks' previous (another file's)
//     contents.
//
// A sync point flushes the device first, then commits the conversions and
// attributes, then syncs the metadata: data before the metadata that
// exposes it. Every other change (namespace, allocation, truncate, punch)
// is committed at once, unsynced; commits become durable in order. Blocks
// freed by a transaction stay busy (not reallocated) until that transaction
// is durable, so a crash never shows one file's blocks inside another.
// Concurrent Fsyncs share sync points (group commit). Fdatasync and an
// O_DSYNC write need no sync point when the metadata that reads their data
// back is durable already (inode.metaSeq): a device flush makes the data
// durable.
//
// # Lock order
//
// Every engine lock has a rank (package internal/lockrank), and a goroutine
// takes locks in increasing rank only. The order is checked on every lock
// taken in builds with the race detector or the invariants tag (so on every
// CI test run): a violation panics with the stacks that took each lock
// held. The ranks, lowest first (TestLockOrderDoc keeps this list equal to
// lockrank's):
//
//	FilePos     File.posMu: the file position (Read, Write, Seek only)
//	Namespace   FS.ns: shared for lookups, exclusive for namespace changes
//	IOLock      inode.io, the I/O lock (iolock.Lock); two at once (a clone,
//	            an exchange) in inode-number order (lockIO2);
//	            held across device I/O submission; the sub-block and
//	            extending direct-write routes hand it to the request, whose
//	            completion releases it
//	BlockRange  inode.ranges, the block-range lock (iolock.RangeLock): the
//	            blocks a sub-block direct write or an append works on,
//	            taken under the shared I/O lock; a direct write hands it to
//	            its request, an append holds it until its size is published
//	Appends     inode.appends.mu: the queue of appends in flight and the
//	            publication of their sizes, in reservation order; it takes
//	            inode.mu (and commits) under it, and queues block ranges
//	            (without waiting for them)
//	SyncSerial  the serial sync point's mutex (NoGroupCommit)
//	Page        page locks (pagecache), several in increasing index order
//	            (readahead, unit fills, writeback of a block); pages locked
//	            for a device read are handed to the read, whose completion
//	            unlocks them
//	Readahead   an inode's readahead state
//	InodeMu     inode.mu: attributes, size, extent map; several in
//	            inode-number order (lockInodes). Never held across data
//	            device I/O; metadata commits run under it, and an
//	            allocation that finds only busy blocks syncs the metadata
//	            under it (allocate.go, allocNear)
//	Commit      FS.commitMu: metadata transactions, the allocator journal
//	Alloc       the allocator's mutex
//	Refcount    the shared-block table's mutex (refcount.Table)
//	ICache      FS.icache.mu: the in-core inode table (taken after
//	            inode.mu: maybeEvict, persist)
//	Mapping     a page-cache mapping's mutex
//	PageState   a page's state mutex
//	Cache       the page cache's mutex
//	Leaf        short sections that take nothing: FS.dirty.mu, FS.files.mu,
//	            in-flight counters, group-sync state, error slots, the I/O
//	            lock's and DIO counter's internals, the copy-on-write pool,
//	            the data checksum table (checksum.Table)
//
// Waits are checked too (lockrank.Wait): waiting for a page to be unlocked
// counts as taking that page's lock; waiting for direct I/O to drain, for
// counted writebacks or for a direct write's completion counts as taking a
// page lock (their completions lock pages); waiting for a page's writeback
// or for a sync point counts as taking an inode mutex. The sync point takes
// each dirty inode's mu in inode-number order, one at a time, after the
// device flush. A new lock gets a rank in lockrank and a
// line here in the same change.
//
// # Errors
//
// Errors are *os.PathError or *os.LinkError around a syscall.Errno that
// matches Linux for the same call; device and metadata failures stay in the
// chain and also match syscall.EIO. A metadata commit failure shuts the
// file system down (ErrShutdown): nothing more is written, so the volume
// stays consistent.
//
// # Files
//
// The package is flat but reads in layers, and the I/O path goes down the
// list below: from the path files (appends.go, dio.go, buffered.go,
// space.go) to
// geometry.go, a file calls only files listed after it and the base files
// (callbacks from the device aside), so a direct write followed from
// directWrite to the device never comes back up to a path file. Each path
// file reads top-down: entry, lock route, submission, planning and
// allocation, completion.
//
//	file.go async.go    API: File (ReadAt, WriteAt, Fsync, ...), ReadAsync, WriteAsync
//	paths.go            API: the path-based calls (OpenFile, Mkdir, Rename, ...)
//	namespace.go        inode-number namespace calls (Lookup, CreateIno, RenameIno, ...)
//	attr.go xattr.go    attributes (Getattr, Setattr) and extended attributes
//	orphan.go check.go  freeing unlinked inodes, orphan recovery; the consistency check
//	scrub.go            Scrub: every written block read and verified against its data checksum
//	rw.go               entry: pread/pwrite build a kiocb; inode.read/write dispatch it
//	appends.go          path: parallel appends (reserve, write direct or buffered, publish in order)
//	dio.go              path: direct read and write (directRead, directWrite, finishDirectWrite)
//	buffered.go         path: buffered read with readahead, buffered write
//	space.go            path: truncate, fallocate, SEEK_DATA/SEEK_HOLE (lockSpace)
//	fiemap.go           path: FS_IOC_FIEMAP (File.Fiemap), under inode.mu
//	copyrange.go        path: File.Extend and File.Modified, for copy_file_range
//	reflink.go          path: clone and dedupe (File.CloneRange, CloneBlocks, DedupeRange; remapRange)
//	writechecks.go      the write checks both write paths run (writeChecks, stripPrivs)
//	zero.go             in-place zeroing on the device (zeroEOFTail, zeroBlockRange)
//	invalidate.go       page-cache coherence for direct I/O and space ops (invalidateRange)
//	writeback.go        writeback of dirty pages (writebackPages, writebackRun, fsync, flusher)
//	request.go          mechanism: kiocb, dioOp, ioBatch: the requests, down to the device
//	allocate.go         mechanism: block allocation, delayed-allocation reservations
//	convert.go          mechanism: unwritten to written (convertWritten; convGroup shares one commit among completions)
//	cow.go              mechanism: copy-on-write of shared blocks (staging, planCow's pool, unshareLocked)
//	atomic.go           mechanism: untorn writes (RWFAtomic: every written block out of place)
//	sums.go             mechanism: data checksums (set on write, verified on read: setSums, verifySums, readVerified)
//	readbeforewrite.go  mechanism: the read-before-write rule (readBeforeWrite)
//	unitpages.go        mechanism: the neighbour pages a whole-unit read fills
//	lockio.go           mechanism: lockIO, drain, nowaitEAGAIN
//	geometry.go         mechanism: byte, block, page and device-offset arithmetic
//	commit.go           base: metadata transactions, sync points, group commit
//	inode.go            base: the in-core inode, its cache, persist
//	counters.go         base: Counters and the counted device handle (FS.dev)
//	fs.go options.go    base: FS, Open, Close; Options and Policy
//	errors.go           base: errors and their wrapping
//	inflight.go         base: a waitable count of operations in progress
package sluice
