// Package crashtest is sluice's crash-consistency harness: seeded random
// workloads on a crashable stack (memdev under the data, Pebble on a
// crashable in-memory FS or a real etcd cluster under the metadata),
// crashed at many points; each crash image is reopened (orphan recovery
// included) and checked against a model of what the engine's durability
// rules allow.
//
// # The stack
//
// Env is a file system on a volume that testvol.Format made (on etcd,
// volume.Format on a memdev and a prefix of its own):
//
//	sluice.FS -> faultdev -> flush fence -> memdev            (data)
//	          -> RecKV -> Pebble -> vfs.NewCrashableMem       (metadata)
//	          or EtcdRecKV -> etcdkv, owned -> etcd cluster   (EnvConfig.Etcd)
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
// ZERO_RANGE, UNSHARE_RANGE), truncate up and down, rename (over existing
// files too, and of directories), link, unlink of open and closed files
// (orphans), Fsync, Fdatasync, directory fsync, SyncAll, reads compared
// with the model while the file system runs, and reflink: OpClone
// (CloneRange between two open files of the worker or within one file,
// whole blocks or up to the source's EOF with its unaligned tail where the
// destination's EOF allows it, at the source's offset, past the
// destination's EOF or anywhere below it; sometimes a whole-file Clone),
// OpCollapse and OpInsert (COLLAPSE_RANGE and INSERT_RANGE of whole
// blocks: a collapse ends before EOF, an insert starts before it). The
// writes that follow land in shared blocks as any write does: O_DIRECT
// writes of whole blocks take the out-of-place route, sub-block direct and
// buffered writes (and truncate's, punch's and UNSHARE_RANGE's) copy
// first. Every offset, length and size is a multiple of 512 B, and every
// sector written carries a Tag (the file's identity in the model, the
// write's sequence number, the file offset) and a filler derived from it,
// so each sector read back is classified exactly: zeros, a write (of
// which file, at which offset), or garbage. A clone or a shift legitimately moves a write elsewhere: the
// model's values are whole tags, and a sector is accepted only where the
// model allows that exact tag (a source file's write at the source's
// offset, in a clone's destination); otherwise it is stale data (another
// file's write the model never put in this file), misplaced data (a write
// this file may hold, but at another offset) or an unexpected write.
//
// The model (model.go) keeps, for each sector, size and the namespace, the
// history of values since their durable base, following the engine's
// package doc: Fsync/Fdatasync make a file's data and size durable; SyncAll
// everything; an O_DSYNC write its bytes. Fsync, SyncAll, a directory's
// fsync and O_SYNC writes are sync points, which also make durable every
// committed metadata change (namespace, sizes, truncate, punch, zero
// range, fallocate, clones, shifts) and every completed direct write of
// every file; Fdatasync and O_DSYNC writes are sync points of their file
// alone (the engine flushes only the device when what reads the file's
// data back is durable already), and the check that every commit made
// before a sync was synced skips them. Buffered data is never assumed
// written back unless its own file was synced. A crash may show, for each
// sector, any value from its base on, and nothing else; a file synced
// after its last change therefore has exactly one allowed content and
// size.
//
// A clone into a file, a collapse and an insert are each one metadata
// transaction that remaps a range (the engine writes the range back first),
// so until a sync point the crash shows the file wholly before or wholly
// after each. The model keeps a file's worlds: the current one, and one for
// the file as it was before each clone or shift no sync point covered yet.
// The kept metadata is a prefix of the commits, so a crash shows the file
// as one world: that world's sizes (later commits are not in it) and every
// sector below the size as that world has it, consistently. The change
// starts the sectors it remaps over in the new world (a cloned sector's
// history is the source sector's from its base, to the end of the last
// block shared; a shifted sector's the one whose block it now maps; an
// insert's hole zeros); the others are shared with the world before. A
// write after a clone into its range goes to other blocks than those the
// world before mapped, but a write after a shift may land in place in a
// moved block, so it is also added to the sector that maps the block in
// the world before. A sync point keeps only the current world. A
// concurrent crash whose window holds a sync point cannot keep the worlds
// apart, and allows each sector any value of any world, from its base.
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
//  3. no sector shows data of another file, or of another offset, but
//     where a clone or shift put that exact write;
//  4. the space adds up: each file's Blocks are its extents (FIEMAP); the
//     distinct blocks the files map, plus staging blocks (none is left
//     after recovery), are Check's used blocks; those mapped more than
//     once are its shared blocks, and FIEMAP flags exactly those shared
//     (a shared block is in the Blocks of every file mapping it, so the
//     files' Blocks exceed the used blocks by the extra references, which
//     only the references counted per block give); Statfs's free blocks
//     are Check's free ones;
//  5. a probe (write buffered and direct, fsync, read back, truncate,
//     unlink) works and leaves Check clean and the free space as it was.
//
// A single-worker case then goes on, for Generations, on the file system
// recovered from its last crash point, its model rebuilt from what was
// read back.
//
// # Engine bugs the campaign found
//
// An O_DIRECT append (O_APPEND or RWFAppend) of whole blocks at an EOF
// inside a shared block failed with EIO: directWrite takes an append's
// route from its length alone, and the aligned route then met a partial
// shared block (TestTargetedDirectAppendAtSharedEOF).
//
// It also found a clone within one file past its EOF sharing a
// staging block (a crash then left a volume that did not open) and a crash
// leaving data past EOF that an extension cut short by a second crash
// showed; both are fixed, and TestTargetedSameFileClonePastSharedEOF and
// TestTargetedStaleTailAfterTwoCrashes keep them so.
//
// # The etcd backend
//
// On etcd (EnvConfig.Etcd, an EtcdMeta: a client of a cluster and a key
// prefix), each volume keeps its metadata under a prefix of its own, and
// a crash is the engine's process dying while etcd keeps what it
// committed. The volume is formatted as mkfs formats one (a released
// owner.last), and its KV owns it as a mount's does, before the engine
// opens: etcdkv's Acquire (an owner key on a lease, kept alive), so that
// every engine commit is nested in the owner's comparison and guard
// (owner key carries the lease, owner.last unchanged since the last
// commit) and rewrites owner.last, a commit that got no answer is sent
// again under the guard and applies at most once, and the read cache is
// on (Get and Scan from memory, and the engine's KnownEmpty hints for new
// directories, which EtcdRecKV passes on). Close releases the volume cleanly, as a mount does after
// its last data request.
//
// EtcdRecKV records every commit's writes and the etcd revision it made:
// the revision etcd answered it with or, for a commit etcdkv resolved as
// applied by an attempt whose reply never came (its resend refused, the
// guard moved, the owner key still ours), owner.last's mod revision in
// that refusal, which is the revision the unanswered attempt made (both
// seen through the client's KV). Since every owned commit rewrites
// owner.last, the checks of a revision also check that key: last written
// at the revision recorded for the last commit that wrote, and written
// once per such commit since the KV opened (its etcd version), so that a
// commit applied twice, or recorded at a revision not its own, fails. A
// commit etcdkv sent more than once is checked at once. With
// EtcdMeta.LoseReplyEvery (TestCampaignEtcd: every 16th commit of each
// volume), the reply to a commit's first attempt is lost after etcd
// applied it, as when the member it went through stops: etcdkv resolves
// it by the guard, and the campaign fails if that never happened.
//
// An etcd commit is durable on a quorum once it returns and Sync does
// nothing, but EtcdRecKV counts the commits the engine synced as RecKV
// does, so the check that every op that promised durability was synced
// runs unchanged. A crash keeps the first k commits, k from the synced
// ones to all of them as on Pebble (MetaCrash.Random is Pebble's only):
// the volume's keys as of commit k's revision (a read WithRev), checked
// against the state the KV opened on plus the writes of commits 1..k, are
// copied under a new prefix without the owner key (the crashed owner's
// lease expired) and with owner.last as it was (not released, the crashed
// owner's terms and lease), where the crash image's volume opens owned:
// the new owner takes it over as after an unclean end (Owner.Clean false,
// Previous naming the crashed owner's lease and terms; opening fails
// otherwise), and the checks run as
// they do on Pebble. The harness does not wrap the data device in the
// lease's fence, so nothing waits for the takeover (Owner.TakeoverWait,
// package volume's): the crash image's device is a copy no earlier owner
// can reach. k = all is exactly what etcd holds when the process dies; a
// smaller k is the process dying after commit k, paired with the device
// as it is at the crash, which the model allows as it does on Pebble
// (where the unsynced commits are lost). A case's next generation runs on
// its last crash image, so it takes over a volume that was itself taken
// over. TestCampaignEtcd runs DefaultEtcdPoints crash points from the
// campaign's first seed on (the cases TestCrashCampaign runs first, so
// that a failure on one backend only points at it), on one three-member
// cluster started in the test process (etcdtest), each case and crash
// image under a prefix of its own, and logs the KVs' counters (commits,
// resends, commits resolved by the guard, reads, cache hits); it fails if
// the read cache served nothing or a commit was refused as not the
// owner's. TestHarnessEtcdCatchesLostCommit checks that the checks are
// not vacuous: a commit recorded at a revision before its own, or after
// it with the volume's keys unchanged (only owner.last tells), and a key
// lost from etcd, are caught.
//
// The etcd members' own crash: TestEtcdMemberCrash stops a member before a
// chosen commit of a single-worker workload and restarts it later (two
// members keep the quorum): a follower, gracefully; the leader, killed,
// the commit waiting for the new leader; the leader killed while the
// commit is sent. Every commit that returned must be in etcd at its
// revision, once (EtcdRecKV.checkHistory), the workload must not notice
// (in-flight: etcdkv sends the commit again under its guard; the test
// logs the commits sent more than once and how each was resolved), and
// the volume etcd then holds must pass the crash-point checks. In ten
// runs under -race, the in-flight commit's first attempt never applied: a
// resend did, after the first attempt's whole RequestTimeout (forwarded to
// the dead leader; 8 runs) or at once (refused by the dying leader; 2).
// Should a commit fail all the same, the test fails, and first logs
// whether etcd applied it and checks the volume etcd holds (fsck).
//
// TestTargetedEtcdCacheReadsDuringCommit holds the reply to an owned
// commit after etcd applied it: a KV.Get that reaches etcd then sees the
// commit, and a KV.Get after it of a cached key the commit wrote still
// read the old value from the read cache (the commit writes through when
// it returns), a pair of reads no linearizable store gives, until
// etcdkv's cache stopped serving the keys of a commit in flight.
//
// The campaign used to run on a KV that owned no volume; that mode is
// gone, since no mount commits unowned (mkfs's format, before any owner,
// is the only unowned writer, and the harness formats that way too).
// Without the guard, a commit in flight at the leader's death failed with
// "outcome unknown" and the engine shut down; package reliability's
// TestEtcdLeaderChanges and TestEtcdQuorumLost cover owned volumes under
// a running mount.
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
//	go test ./internal/harness/crashtest/ -run TestCampaignEtcd [-crashtest.etcdpoints=N | -crashtest.seed=S]
//	go test ./internal/harness/crashtest/ -run TestEtcdMemberCrash [-count=N]
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
