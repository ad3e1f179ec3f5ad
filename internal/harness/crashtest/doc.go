// Package crashtest is sluice's crash-consistency harness: seeded random
// workloads on a crashable stack (memdev under the data, Pebble on a
// crashable in-memory FS under the metadata), crashed at many points; each
// crash image is reopened (orphan recovery included) and checked against a
// model of what the engine's durability rules allow.
//
// # The stack
//
// Env is a file system on a volume that testvol.Format made:
//
//	sluice.FS -> faultdev -> flush fence -> memdev            (data)
//	          -> RecKV -> Pebble -> vfs.NewCrashableMem       (metadata)
//
// Env.Crash returns an Image: the device as memdev.CrashImage(seed) (or
// memdev.CrashImageWith, for chosen fates) leaves it, each unflushed write
// kept, dropped or torn at 512 B sectors; and the metadata as synced plus a
// prefix of the unsynced commits (RecKV records them), or, with
// MetaCrash.Random, as Pebble's MemFS.CrashClone leaves it (a random part of
// the unsynced WAL blocks; not reproducible: the clone walks a Go map). The
// flush fence keeps flushes from completing while the two copies are made,
// so that the pair is one a real power failure can produce. Image.Open
// checks the volume as found (sluice.CheckVolume), then opens a file system
// on it, which recovers orphans.
//
// # The workload and the model
//
// A worker generates ops from its model (OpKind lists them): creating files
// and directories, buffered and O_DIRECT writes (block-aligned, and 512 B
// sub-block writes into written and unwritten extents and holes), appends
// (O_APPEND handles and RWFAppend writes, buffered and O_DIRECT), O_DSYNC,
// O_SYNC and RWFDsync writes, fallocate (default, KEEP_SIZE, PUNCH_HOLE,
// ZERO_RANGE), truncate up and down, rename (over existing files too, and
// of directories), link, unlink of open and closed files (orphans), Fsync,
// Fdatasync, directory fsync, SyncAll, and reads compared with the model
// while the file system runs. Every offset, length and size is a multiple
// of 512 B, and every sector written carries a Tag (the file's identity in
// the model, the write's sequence number, the file offset) and a filler
// derived from it, so each sector read back is classified exactly: zeros,
// a write of this file at this offset, a write of another file (stale
// data), or garbage.
//
// The model (model.go) keeps, for each sector, size and the namespace, the
// history of values since their durable base, following the engine's
// package doc: Fsync/Fdatasync make a file's data and size durable; SyncAll
// everything; an O_DSYNC write its bytes; and each of those is a sync point,
// which also makes durable every committed metadata change (namespace,
// sizes, truncate, punch, zero range, fallocate) and every completed direct
// write of every file. Buffered data is never assumed written back unless
// its own file was synced. A crash may show, for each sector, any value
// from its base on, and nothing else; a file synced after its last change
// therefore has exactly one allowed content and size.
//
// # Crash points and checks
//
// A single-worker case (Workers == 1) crashes between ops; it is
// deterministic, so its seed replays it exactly. A concurrent case runs
// several workers, each in its own directory, and crashes while their ops
// run: the expectation then spans a model snapshot taken before the crash
// and one taken once the ops in flight at the crash have finished. At each
// crash point:
//
//  1. CheckVolume before recovery and FS.Check after it report no problem,
//     and no orphan is left;
//  2. the namespace is one the kept metadata allows (exactly the one after
//     the kept op prefix, for prefix crashes of single-worker cases) and
//     every file's size and every sector is one the model allows (exact for
//     synced files); the metadata synced covers every op that promised
//     durability;
//  3. no sector shows data of another file, or of another offset;
//  4. the files' allocated blocks add up to Check's used blocks, and
//     Statfs's free blocks to Check's free ones;
//  5. a probe (write buffered and direct, fsync, read back, truncate,
//     unlink) works and leaves Check clean and the free space as it was.
//
// A single-worker case then goes on, for Generations, on the file system
// recovered from its last crash point, its model rebuilt from what was
// read back.
//
// The case's policy (randomPolicy) is Concurrent(), Seeds() or Classic(),
// or each field drawn on its own, ParallelAppends and BlockRangeExclusion
// included.
//
// # Concurrent appends to one file
//
// Campaign workers never share a file; TestTargetedConcurrentAppends has
// 4 to 8 goroutines append tagged 512 B or 4 KiB records to one file, each
// through its own handle (O_DIRECT, buffered or both; O_APPEND or
// RWFAppend; some RWFDsync; some goroutines fsyncing), and crashes it at a
// few points while appends are in flight, after a live read. The final
// file must hold every record once, whole, in an order that respects each
// appender's and real time, and each live read must be a prefix of it.
// Each crash image must pass the checks, and show at each record's place
// that record (whole where an fsync or RWFDsync made it durable) or zeros,
// never stale data, another record or one appended after the crash; zeros
// where the record was not durable yet are allowed by the durability rules
// and counted (-crashtest.appendstrict fails them). The cases run under
// Concurrent() and Seeds() (ParallelAppends on and off), and without -short
// under Classic() with ParallelAppends; the soak build runs more seeds.
// The engine bugs it found are targeted tests of their own:
// TestTargetedDirectWriteVsWritebackOfOneBlock,
// TestTargetedDirectReadVsBufferedAppend and
// TestTargetedAppendsWithBufferedReader.
//
// # Running
//
//	go test ./internal/harness/crashtest/                      # CI campaign (DefaultPoints crash points)
//	go test -tags soak ./internal/harness/crashtest/           # the soak campaign
//	go test ./internal/harness/crashtest/ -crashtest.points=N  # N crash points
//	go test ./internal/harness/crashtest/ -run TestCrashCampaign -crashtest.seed=S [-crashtest.point=P]
//	go test ./internal/harness/crashtest/ -run TestTargetedConcurrentAppends [-crashtest.appendseeds=N | -crashtest.appendseed=S] [-crashtest.appendpolicy=P]
//
// A failure prints its seed and the command that replays it, the crash
// (metadata kept, device fates), the problems and the op log. Script runs
// explicit op sequences and crashes them with every combination of fates
// (CrashAll): the targeted tests are scripts. Seeds and tests that fail
// because of an engine bug already described in
// the issue tracker are listed in knownFailures and knownBugs
// (test files) and log instead of failing.
package crashtest
