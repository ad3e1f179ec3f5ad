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
//     *at calls on a descriptor of the root: the oracle (NewHost). A FUSE
//     test can aim it at a sluice mount point.
//   - Model: maps and byte slices that do what Linux does, in Linux's
//     order of error checks, for the calls the random sequences make (no
//     symlinks, xattrs or SEEK_DATA/SEEK_HOLE).
//
// Ops (Op, OpKind) are calls with their arguments; a Runner applies them
// to one Target, keeping open handles in numbered slots, and returns a
// Result whose String is the canonical form tests compare (errno, byte
// counts, data as a hash and zero/non-zero runs, stat fields that are
// deterministic). Tree describes everything reachable from a root the
// same way.
//
// # Tests
//
// TestPOSIX is a table of cases (posixCases): setup ops, the call under
// test with the errno Linux returns, and ops that observe the state after.
// Each case runs on a fresh engine and on a fresh t.TempDir() of the host;
// the transcripts, including the final tree, must be equal.
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
// # Known bugs
//
// Engine bugs the tests found are described in the issue tracker
// as B1, B2, .... A POSIX case marked with bug: "Bn" logs its difference
// instead of failing, and fails once the difference is gone so that the
// mark goes with the fix; the metamorphic generator steers around the
// entries of metamorphicKnownBugs.
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
