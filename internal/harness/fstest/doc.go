// Package fstest tests the sluice engine's POSIX behaviour against the host
// kernel and against a model.
//
// # Targets
//
// A Target is a file system reached through a path API that mirrors the
// Linux system calls (open, stat, mkdir, renameat2, link, symlink,
// fallocate, lseek with SEEK_DATA/SEEK_HOLE, the xattr calls, ...), and a
// Handle is an open file of one. Every error carries the syscall.Errno of
// the call, which Errno extracts, so results compare across targets.
// There are three:
//
//   - Engine: a sluice.FS on a memdev data device and an in-memory Pebble,
//     through the engine's path API (NewEngine). It can be remounted.
//   - Host: a directory of the host kernel, through golang.org/x/sys/unix
//     *at calls and ioctls on a descriptor of the root: the oracle
//     (NewHost). A FUSE test can aim it at a sluice mount point, leaving
//     out untorn writes: FUSE passes no RWF_ATOMIC (the kernel answers
//     EOPNOTSUPP).
//   - Model: maps and byte slices that do what Linux does, in Linux's
//     order of error checks, for the calls the random sequences make (no
//     symlinks, xattrs or SEEK_DATA/SEEK_HOLE). The reflink calls are byte
//     copies and swaps with XFS's argument rules; exchange-range's
//     FILE1_WRITTEN, which depends on where blocks are written, is not
//     modelled. An untorn write is sluice's argument checks for its block
//     size (Model.AtomicUnitMin, AtomicUnitMax), then a plain write.
//
// Ops (Op, OpKind) are calls with their arguments; a Runner applies them
// to one Target, keeping open handles in numbered slots, and returns a
// Result whose String is the canonical form tests compare (errno, byte
// counts, data as a hash and zero/non-zero runs, stat fields that are
// deterministic). Tree describes everything reachable from a root the
// same way.
//
// The reflink calls are handle operations on two slots: FICLONE and
// FICLONERANGE (OpClone, OpCloneRange: the engine's File.Clone and
// CloneRange), FIDEDUPERANGE with one destination (OpDedupeRange:
// File.DedupeRange; N is bytes_deduped, and FILE_DEDUPE_RANGE_DIFFERS
// shows as EBADE, the errno the kernel turns into it) and
// XFS_IOC_EXCHANGE_RANGE (OpExchangeRange: File.ExchangeRange). Slot is
// the descriptor the ioctl is issued on (the clone's destination, the
// dedupe's source, the exchange's file2) and Off its offset; Slot2 and
// Off2 are the other file's. OpFallocate also takes COLLAPSE_RANGE,
// INSERT_RANGE and UNSHARE_RANGE.
//
// OpPwriteAtomic is an untorn write, pwritev2(2) with RWF_ATOMIC and one
// buffer (Handle.PwriteAtomic: the engine's File.Pwrite with
// sluice.RWFAtomic, the host's unix.Pwritev2 with unix.RWF_ATOMIC). Its
// rules are Linux 6.18's, in their order: EBADF; nothing for a zero
// length (TestAtomicZeroLength); EINVAL for a length outside [unit min, unit max] (a block to
// 1 MiB on sluice and on the XFS oracle), then for one that is not a
// power of two, then for an offset not aligned to the length; EOPNOTSUPP
// without O_DIRECT. Without a crash it does what a write does. sluice
// refuses appends (EINVAL, after the length checks); XFS checks the
// alignment of the offset passed rather than EOF's and appends.
//
// # Tests
//
// TestPOSIX is a table of cases (posixCases): setup ops, the call under
// test with the errno Linux returns, and ops that observe the state after.
// Each case runs on a fresh engine and on a fresh t.TempDir() of the host;
// the transcripts, including the final tree, must be equal. The cases of
// the reflink calls (reflinkCases: the rows of the 6.18 XFS probe tables,
// then copy-on-write through each write path) and of untorn writes
// (atomicCases: each argument check, then atomic writes over data, holes,
// unwritten extents, cached pages and shared blocks, past EOF, with
// writes, punches, truncates and clones after) run their host side on
// XFS instead (see "The XFS oracle"); the atomic appends XFS takes (and
// the buffered one it refuses with EOPNOTSUPP) check the engine's errno
// only. TestAtomicCasesOnModel runs the atomic cases
// on the model too.
//
// TestMetamorphic generates seeded random sequences (Generate) with the
// model in lockstep, so that operations mostly hit existing names and open
// handles, and runs each on the engine under sluice.Concurrent(),
// sluice.Seeds() and sluice.Classic() (so with ParallelAppends and
// BlockRangeExclusion on and off, the five seeds fixed), every fourth
// sequence also under a mix of the policy fields the seed draws, and, for
// 512 B-aligned geometries, on the host: every result must equal the
// model's, and so must the trees at the end and after a clean remount; the
// engine's consistency check must be clean.
// The seed picks a configuration: 4 KiB blocks; 64 KiB blocks on a
// 512 B I/O-unit device; a 1 MiB page cache with files larger than it and
// a flusher running every few milliseconds; 64 KiB blocks on a 64 KiB
// I/O-unit device (pages smaller than blocks, O_DIRECT in 64 KiB units),
// with and without the tiny cache. Flags: -fstest.seed=N replays one
// sequence, -fstest.n=N runs N of them from seed -fstest.first,
// -fstest.ops=N sets their length, -fstest.host=false leaves the host
// out, -fstest.cache=BYTES resizes the tiny cache, -fstest.v logs every
// operation.
//
// Three sequences in four also make reflink calls (about 6% of their
// operations: GenConfig.ReflinkPerMille), between files and within one,
// and untorn writes (a quarter of the positioned writes where an O_DIRECT
// handle without O_APPEND takes them, a few a sequence:
// GenConfig.AtomicPct; mostly valid, an eighth breaking a rule), with the
// model in lockstep, so that copy-on-write and atomic writes meet every
// write path, truncate, punch and reflink call the sequences make; their
// host is the XFS of the engine's block size where there is one (64 KiB
// blocks have none: their atomic writes, of 64 KiB and more, are compared
// with the model only). The fourth keep the older mix and run on ext4,
// which has no RWF_ATOMIC without hardware support.
// TestMetamorphicClones runs a dozen more, shorter, with a third of their
// operations reflink calls.
//
// # The XFS oracle
//
// ext4, the file system of the host's temporary directory, has no
// reflink. When the tests run as root and mkfs.xfs is installed (CI
// installs xfsprogs), the package makes, once per run and on first use,
// an XFS with reflink and 4 KiB blocks: a 512 MiB sparse image (mkfs.xfs
// 6.1 refuses under 300 MB), mkfs.xfs -m reflink=1, a loop device, a
// mount under a temporary directory, torn down by TestMain (xfs_test.go).
// Each test gets a directory of its own. Without root or mkfs.xfs, the
// cases and sequences that need XFS log a line and leave the host out,
// as do the reflink sequences of 64 KiB-block geometries: XFS blocks
// larger than pages are experimental (Linux 6.12) and can fail with
// ENOMEM.
//
// Untorn writes need no feature bit: XFS (Linux 6.16 and later) does
// them in software, by copy-on-write, on any file system with reflink,
// and reports a block to 1 MiB (statx STATX_WRITE_ATOMIC) on these
// images, sluice's limits. A probe checks the limits and one write
// (probeAtomic); otherwise atomic writes are compared with the model
// only.
//
// XFS_IOC_EXCHANGE_RANGE needs the superblock's EXCHRANGE incompat bit,
// which xfsprogs 6.1 cannot set (mkfs.xfs -i exchange=1 came with 6.10):
// then the bit is set with xfs_db on the unmounted image. That is sound
// for an oracle: the kernel implements the feature whole, the bit only
// lets it run, and no on-disk structure depends on mkfs having set it. A
// probe exchange on the mount must succeed first; otherwise the file
// system is made without the bit and exchanges are compared with the
// model only.
//
// XFS departs from the model in these places, which the tests avoid:
// after an exchange to EOF at different offsets, XFS keeps the written
// blocks left past a file's new EOF and a later clone past EOF shows their
// bytes (sluice drops them; POSIX wants zeros), so such sequences are
// compared with the model only (metaHost); XFS does a block-misaligned
// O_DIRECT write to a file that ever shared blocks as a buffered write,
// which ignores O_DIRECT's alignment at a misaligned O_APPEND EOF, so
// reflink sequences open no file O_DIRECT|O_APPEND; mixing buffered and
// such O_DIRECT I/O, XFS sometimes loses page-cache coherence (EIO,
// "Direct I/O collision with buffered writes") or refuses an exchange
// over a delayed allocation its flush left (EINVAL), after which a
// sequence's host is no longer compared (xfsArtifact); and XFS refuses to
// rename over a non-empty directory with EEXIST, which Host reports as
// ENOTEMPTY (rename(2) allows both); XFS appends with RWF_ATOMIC (see
// above) where sluice refuses, so the sequences make no atomic write on
// an O_APPEND handle.
//
// # Known bugs
//
// Engine bugs the tests found are described in the issue tracker
// as B1, B2, .... A POSIX case marked with bug: "Bn" logs its difference
// instead of failing, and fails once the difference is gone so that the
// mark goes with the fix; the metamorphic generator steers around the
// entries of metamorphicKnownBugs (none now: TestAtomicZeroLength and
// TestExchangeToEOFWithinOneFile pin the two the atomic-write sequences
// found, both fixed).
//
// # Scope
//
// The engine checks no permissions and the tests run as root, so EACCES
// and EPERM for missing privileges are out of scope, as is whatever
// depends on the caller's privileges: root keeps set-user-ID and
// set-group-ID bits on write (CAP_FSETID) where the engine clears them,
// so the random sequences never set them. Access times are not compared
// (the host mounts with relatime), nor directory sizes and st_blocks,
// which are each file system's business. Linux filesystems report holes
// at their block granularity and may count unwritten extents as holes:
// SEEK_DATA/SEEK_HOLE cases use 4 KiB-aligned layouts of written data
// only. The host's O_DIRECT accepts buffers misaligned within a page
// (the engine needs device.MemAlign) and, on ext4, may write part of a
// request whose length is misaligned before failing with EINVAL, so
// neither is compared.
package fstest
