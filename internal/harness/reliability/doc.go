// Package reliability holds sluice's reliability tests (issue 9, parts
// 2-6): device faults, a full device, fuzzing, hostile input at the API
// and a concurrency soak; and etcd faults under a volume whose metadata
// is in etcd (issue 18). It has no non-test code but this manual; the
// crash campaign lives in internal/harness/crashtest.
//
// # The stack
//
// Every test runs the engine (sluice.OpenVolume) over the same parts
// (env_test.go; the memdev and the MemFS come from testvol.Format):
//
//	sluice.FS
//	  volume.Volume
//	    faultdev.Device      injectors, gates, counters
//	      [lossyDev]         optional: a drive whose failed flush loses its cache
//	        memdev.Device    crashable memory device
//	    faultKV              fails metadata commits, syncs or reads on demand
//	      Pebble on a crashable vfs.MemFS
//
// env.crash(seed) builds what a power failure now could leave
// (testvol.Disks.Crash: memdev's crash image, Pebble's crash clone) and
// mounts it; env.reopen closes cleanly and mounts copies
// (testvol.Disks.Copy). snapshot() walks a whole tree (types, modes,
// links, sizes, blocks, times, symlink targets, xattrs, contents) so a test
// can say "this call changed nothing".
//
// # What the tests prove
//
// Device faults (devfault_test.go, randfault_test.go, metafault_test.go,
// writeback_test.go):
//
//   - a failed device read reaches the direct or buffered reader as EIO, in
//     bounded time, and is not returned again once the device heals
//     (TestDeviceFaultDirectRead, ...BufferedReadEIO, ...ReadErrorNotSticky);
//     File.ReadAt never reports io.EOF inside a file (...ReadAtShortIsNotEOF);
//   - a failed direct write returns EIO and publishes nothing (size,
//     contents, no stale block); a buffered write's failure reaches fsync,
//     every fsync while the device fails, also when the flusher met it; once
//     healed, fsync succeeds and a crash image shows the data
//     (...DirectWrite, ...BufferedWriteSurfacesAtFsync, ...DsyncWrite);
//   - fsyncgate: after a failed flush a later fsync either fails or the
//     data really is on the device, even on a drive that loses its cache
//     on the failed flush, and no crash exposes another file's old blocks
//     (...Flush, ...FlushIsNotForgotten);
//   - other files keep working while one file's blocks fail
//     (...OtherFilesKeepWorking); a failed truncate changes nothing
//     (...TruncateChangesNothing);
//   - a seeded random workload under random read/write/flush faults: every
//     call succeeds or fails with EIO, every successful read matches a model
//     that tracks what failed writes may have left, the files read back as
//     modelled once healed, and after crashes the volume is clean and
//     fsynced files are intact (TestDeviceFaultRandom);
//   - the metadata failure path: the kth commit (every k the workload
//     reaches) or a sync fails; that call returns EIO, every later change
//     fails with ErrShutdown and EIO, nothing panics or hangs, and every
//     crash image of the result passes CheckVolume (before mount) and Check
//     (after) with fsynced data intact
//     (TestMetadataCommitFailureShutsDown, ...SyncFailureShutsDown); a read
//     error during orphan recovery at mount loses nothing
//     (TestMountKeepsOrphanOnReadError);
//   - a page written again during its writeback is not written back
//     twice at once (TestWritebackOfRedirtiedPage, exact with a gate).
//
// Full device (enospc_test.go): TestFullDevice fills an 8 MiB volume from
// 8 goroutines with direct writes, fallocate, buffered writes + fsync and a
// shared file; every failure is ENOSPC, nothing hangs, Check is clean and
// statfs free + used = total; a fallocated range and written blocks can
// still be written; a failed allocation changes nothing; deleting the files
// brings all the space back and a second fill gets as far; crash images
// after fsync are clean. TestFullDeviceBufferedWrites: buffered writes
// alone get ENOSPC at write time.
//
// Fuzzing (fuzz_test.go, corrupt_test.go, seeds_test.go): FuzzDecodeHeader,
// FuzzHeaderCorruption (any burst of up to 32 bits in a valid header is
// refused), FuzzMetaRecord (every meta decoder with an arbitrary key and
// value: no panic, ErrCorrupt, canonical re-encoding), FuzzMetaValueCorruption
// (any burst of up to 32 bits in any valid record is refused), FuzzPaths
// (fuzzed paths through the path API: errors are errnos in path errors, the
// tree stays walkable, Check clean) and FuzzCorruptVolume (bytes XORed into
// the header block or the data image, or garbage written for an existing
// metadata record through meta.OpenPebble: no panic, ErrBadHeader for the
// header, never wrong data where a checksum could see it). The
// deterministic sweeps TestCorruptHeader and TestCorruptRecords cover every
// header byte and every record of a small volume. The engine checksums the
// header and every metadata value (CRC-32C); it does not checksum file data:
// TestCorruptDataIsNotChecksummed documents that a flipped data bit is read
// back as is, with the metadata clean.
//
// Hostile input (hostile_test.go): 139 calls with negative, huge or
// overflowing offsets and lengths, misaligned O_DIRECT buffers, names with
// '/' or NUL, long names and paths, symlink loops and 40/41-link chains,
// closed handles, wrong access modes, renames into a subtree, non-empty
// directories, the 2^63-1 size limit and xattr limits. Each returns the
// errno Linux returns (checked against the kernel on tmpfs, whose maximum
// file size is the same) and changes nothing.
//
// etcd faults (etcdfault_test.go, issue 18): a volume whose metadata is
// in a real three-member etcd cluster started in the test process
// (etcdtest, started by the first test that needs it and closed by
// TestMain), its data in an image file, opened as `sluice mount` opens it
// (volume.Open takes the ownership lease: keep-alives and the data fence
// run), under a workload of three goroutines creating, writing (buffered
// and O_DIRECT), fsyncing, renaming and unlinking files and one appending
// and fsyncing a log. Every call is bounded (a hang fails the test with
// every goroutine's stack); every fsynced file and log prefix is read
// back, through the running engine where it still serves and after a
// reopen, and fsck (sluice.CheckVolume) is clean:
//
//   - one member down (TestEtcdOneMemberDown: a follower killed, then the
//     leader stopped): no call fails outside the window from the fault
//     until a leader has been seen for 2 s, and none has in practice; the
//     file system never shuts down, the owner keeps its lease and the
//     fence fails nothing;
//   - leader changes (TestEtcdLeaderChanges: the leader killed and
//     restarted three times during the workload): the commits in flight
//     at each kill wait for the next leader and apply once (etcdkv sends
//     an owned commit that got no answer again, guarded so that it
//     applies at most once); no call fails, the file system never shuts
//     down; the slowest call takes about one RequestTimeout. Kills less
//     than RequestTimeout apart can still leave a commit without an
//     answer (outcome unknown: the engine shuts down), so the test spaces
//     them;
//   - no quorum (TestEtcdQuorumLost: two members stopped for three lease
//     TTLs, RequestTimeout 2 s): every call succeeds (it needed no etcd
//     round trip) or fails with EIO within callBound; a commit in flight
//     fails after 2 x RequestTimeout (its first attempt, then the resends
//     that find no leader: "outcome unknown"), a read after one; the first
//     failed commit shuts the file system down (ErrShutdown), and later
//     changes fail at once. The lease is not lost, however long the
//     outage: etcd expires leases only with a leader, and a new leader
//     extends every lease by its TTL, so the owner's keep-alives renew it
//     within a few hundred milliseconds of the restart. Once a quorum is
//     back, the shut-down engine closes without writing anything back,
//     the volume is released cleanly and reopens at once (well under a
//     second from the restart), with everything fsynced before the outage.
//     A lost lease (revoked, or expired while this host was frozen) is
//     volume's TestEtcdTakeoverFence: commits fail with ErrNotOwner, data
//     requests with ErrFenced, both EIO; a mount then shuts its engine
//     down (cmd/sluice).
//
// Soak (soak_test.go): TestSoak, described there: owned ranges with exact
// models checked by every read, tagged sectors in shared chaos files, a
// racing namespace; Check and a crash image at the end.
//
// # Running
//
//	go test -race ./internal/harness/reliability/         # CI: seeds, ~20s soak
//	go test ./internal/harness/reliability/ -run TestSoak -soak 10m
//	go test ./internal/harness/reliability/ -run TestSoak -soak 1m -soak-workers 1 -soak-kinds 0,2,4 -soak-modes zero
//	go test ./internal/harness/reliability/ -args -known-failures  # run what is marked as a known engine bug
//	internal/harness/reliability/fuzz.sh 5m                        # every fuzz target, 5 minutes each
//	go test ./internal/harness/reliability/ -run TestSeedCorpora -args -write-seed-corpus
//
// Tests of engine bugs not yet fixed call knownFailure with the bug's
// number in the issue tracker: they skip unless
// -known-failures is given.
package reliability
