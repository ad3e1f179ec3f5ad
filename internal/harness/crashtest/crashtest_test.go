package crashtest

import (
	"flag"
	"runtime"
	"runtime/debug"
	"testing"
)

var (
	flagSeed   = flag.Uint64("crashtest.seed", 0, "replay the one case of this seed (0: run the campaign)")
	flagPoint  = flag.Int("crashtest.point", 0, "with -crashtest.seed: check only this crash point")
	flagPoints = flag.Int("crashtest.points", DefaultPoints, "number of crash points the campaign checks")
	flagFirst  = flag.Uint64("crashtest.first", 1, "seed of the campaign's first case")
	flagConc   = flag.Int("crashtest.concurrent", 25, "percentage of concurrent (not replayable) cases")
	flagOps    = flag.Int("crashtest.ops", 0, "with -crashtest.seed: override the number of ops per generation")
	flagShrink = flag.Bool("crashtest.shrink", false, "with -crashtest.seed: shrink a failing single-worker case to a short op sequence")
	flagPebble = flag.Int("crashtest.pebbleclone", 0, "percentage of single-worker crash points whose metadata is Pebble's random CrashClone (not replayable)")
	flagPar    = flag.Int("crashtest.parallel", 0, "cases run at once (0: GOMAXPROCS+1)")
	flagGC     = flag.Int("crashtest.gcpercent", 1000, "GOGC for the campaign (crash images allocate and drop much memory; the default GC would dominate)")
)

// knownFailures lists the seeds that fail because of an engine bug already
// described in its issue; the campaign logs them
// instead of failing. Remove a seed once its bug is fixed.
var knownFailures = map[uint64]string{}

// knownSignature recognises failures of concurrent (not replayable) cases
// that an engine bug already described explains, and returns the note;
// the campaign logs them instead of failing. Remove a signature once its
// bug is fixed.
func knownSignature(f *Failure) string {
	// None: concurrent writebacks of one block are serialised now
	// (the lost-write bugs this recognised are fixed).
	return ""
}

// TestCrashCampaign runs the seeded crash campaign (-crashtest.points crash
// points), or replays one case (-crashtest.seed).
func TestCrashCampaign(t *testing.T) {
	if *flagSeed != 0 {
		replayCase(t, nil)
		return
	}
	if testing.Short() {
		*flagPoints = min(*flagPoints, 200)
	}
	runCampaign(t, *flagPoints, nil)
}

// replayCase runs the one case of -crashtest.seed, its metadata in etcd
// if m is set.
func replayCase(t *testing.T, m *EtcdMeta) {
	cfg := DeriveConfig(*flagSeed, *flagConc)
	cfg.Env.Etcd = m
	cfg.Only = *flagPoint
	cfg.PebbleClonePct = *flagPebble
	if *flagOps > 0 {
		cfg.Ops = *flagOps
	}
	r := RunCase(cfg)
	t.Logf("%s: %d crash points in %v; checked %+v", cfg, r.Points, r.Elapsed, r.Stats)
	if r.Failure != nil {
		if *flagShrink {
			shrinkFailure(t, r.Failure)
		}
		t.Fatalf("%s", r.Failure.Report(1000))
	}
}

// runCampaign runs a campaign of points crash points from -crashtest.first
// on, its metadata in etcd if m is set, and fails t for every case that
// fails but for a known engine bug.
func runCampaign(t *testing.T, points int, m *EtcdMeta) {
	defer debug.SetGCPercent(debug.SetGCPercent(*flagGC))
	par := *flagPar
	if par == 0 {
		par = runtime.GOMAXPROCS(0) + 1
	}
	c := CampaignConfig{FirstSeed: *flagFirst, Points: points, ConcurrentPct: *flagConc, Parallel: par, PebbleClonePct: *flagPebble, Etcd: m}
	res := Campaign(c, func(r *CaseResult) {
		if r.Failure == nil {
			return
		}
		if note, ok := knownFailures[r.Config.Seed]; ok {
			t.Logf("seed %d fails with a known engine bug (%s): %v", r.Config.Seed, note, firstProblem(r.Failure))
			return
		}
		if note := knownSignature(r.Failure); note != "" {
			t.Logf("seed %d (concurrent) fails in a way a known engine bug explains (%s): %v", r.Config.Seed, note, firstProblem(r.Failure))
			return
		}
		t.Errorf("%s", r.Failure.Report(60))
	})
	st := res.Stats
	t.Logf("crash campaign: %d cases, %d crash points, %d failed, in %v; checked %d files (%d with one allowed content, %d with a clone or shift in doubt), %d sectors (%d written: %d cloned from another file, %d moved within one)",
		res.Cases, res.Points, res.Failed, res.Elapsed, st.Files, st.Exact, st.Worlds, st.Sectors, st.Tagged, st.Cloned, st.Moved)
	t.Logf("reflink: %d crash points found shared blocks (%d in all); the runs cloned %d times, wrote %d shared blocks out of place (O_DIRECT) and copied %d before other writes",
		st.SharedPoints, st.SharedBlocks, st.Clones, st.CowWrites, st.CowCopiedBlocks)
	t.Logf("data syncs: %d fdatasyncs and O_DSYNC writes found the metadata durable and only flushed the device", st.DataSyncsFlushOnly)
	t.Logf("untorn writes: %d RWFAtomic writes, %d of them out of place", st.AtomicWrites, st.AtomicWritesOutOfPlace)
	if st.AtomicWritesOutOfPlace == 0 && res.Failed == 0 {
		t.Error("no RWFAtomic write went out of place: the campaign does not test it")
	}
	t.Logf("data checksums: %d blocks verified on checksummed volumes (no false mismatch), %d corrupted reads injected, each failed with EIO", st.SumVerifiedBlocks, st.Corruptions)
	if (st.SumVerifiedBlocks == 0 || st.Corruptions == 0) && res.Failed == 0 {
		t.Error("no checksummed volume verified a block or caught a corruption: the campaign does not test data checksums")
	}
	if st.DataSyncsFlushOnly == 0 && res.Failed == 0 {
		t.Error("no fdatasync or O_DSYNC write took the flush-only path: the campaign does not test it")
	}
}

func firstProblem(f *Failure) string {
	if f.Err != nil {
		return f.Err.Error()
	}
	if len(f.Problems) > 0 {
		return f.Problems[0].String()
	}
	return "?"
}

// shrinkFailure shrinks the ops of a failing single-worker, first-generation
// case to a short sequence that fails the same way, and logs it.
func shrinkFailure(t *testing.T, f *Failure) {
	if f.Config.Workers != 1 || f.Generation != 0 || len(f.Ops) == 0 {
		t.Logf("shrink: only first-generation single-worker failures shrink")
		return
	}
	kind := "live"
	if len(f.Problems) > 0 {
		kind = f.Problems[0].Kind
	}
	ops := Shrink(f.Config.Env, f.Ops[0], 256, 6, func(p Problem) bool { return p.Kind == kind }, t.Logf)
	t.Logf("shrunk to %d ops failing with a %q problem:", len(ops), kind)
	for i, op := range ops {
		t.Logf("  %d %v", i+1, op)
	}
}
