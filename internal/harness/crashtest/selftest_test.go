package crashtest

import (
	"strings"
	"testing"

	"github.com/sluicefs/sluice"
)

// TestHarnessCatchesLyingFlush checks the harness itself: on a device that
// acknowledges flushes without flushing, fsynced data is lost at a crash,
// and the campaign must say so.
func TestHarnessCatchesLyingFlush(t *testing.T) {
	failed, kinds := 0, map[string]int{}
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := DeriveConfig(seed, 0)
		cfg.Env.lyingFlush = true
		r := RunCase(cfg)
		if r.Failure != nil {
			failed++
			for _, p := range r.Failure.Problems {
				kinds[p.Kind]++
			}
			if r.Failure.Err != nil {
				kinds["err:"+strings.SplitN(r.Failure.Err.Error(), ":", 2)[0]]++
			}
		}
	}
	t.Logf("%d of 20 cases failed on a lying device; problems: %v", failed, kinds)
	if failed < 10 {
		t.Fatalf("only %d of 20 cases noticed that flushes do nothing", failed)
	}
}

// TestHarnessShrinks checks the shrinker on a lying device: a failing case
// shrinks to a handful of ops (a write and a sync, in essence).
func TestHarnessShrinks(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := DeriveConfig(seed, 0)
		cfg.Env.lyingFlush = true
		cfg.Generations = 1
		r := RunCase(cfg)
		if r.Failure == nil || len(r.Failure.Problems) == 0 || r.Failure.Generation != 0 {
			continue
		}
		kind := r.Failure.Problems[0].Kind
		ops := Shrink(cfg.Env, r.Failure.Ops[0], 16, 3, func(p Problem) bool { return p.Kind == kind }, nil)
		t.Logf("seed %d: %d ops shrunk to %d (%s):", seed, len(r.Failure.Ops[0]), len(ops), kind)
		for _, op := range ops {
			t.Logf("  %v", op)
		}
		if len(ops) > 6 {
			t.Errorf("shrunk to %d ops; expected a handful", len(ops))
		}
		return
	}
	t.Fatal("no failing case to shrink")
}

// TestHarnessAppendsCatchLyingFlush checks TestTargetedConcurrentAppends's
// checks: on a device that acknowledges flushes without flushing, records
// made durable by fsync or RWFDsync are lost at a crash, and the checks
// must say so.
func TestHarnessAppendsCatchLyingFlush(t *testing.T) {
	pol := sluice.Concurrent()
	found := 0
	for seed := uint64(1); seed <= 4 && found == 0; seed++ {
		c := &checker{t: t, known: "harness self-test: a lying device"}
		runAppendCase(t, c, appendCases[0], EnvConfig{Options: sluice.Options{Policy: &pol}, lyingFlush: true}, seed, seed)
		found += c.failures
	}
	if found == 0 {
		t.Fatal("no crash noticed that flushes do nothing")
	}
}
