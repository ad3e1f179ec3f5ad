package fstest

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
)

var (
	flagSeed  = flag.Uint64("fstest.seed", 0, "replay only the metamorphic sequence with this seed")
	flagN     = flag.Int("fstest.n", 0, "number of metamorphic sequences (0: the CI default)")
	flagFirst = flag.Uint64("fstest.first", 1, "seed of the first metamorphic sequence (the others follow)")
	flagOps   = flag.Int("fstest.ops", 0, "operations per sequence (0: the configuration's default)")
	flagHost  = flag.Bool("fstest.host", true, "also run the sequences on the host kernel (where the geometry allows)")
	flagV     = flag.Bool("fstest.v", false, "log every sequence's operations and results")
	flagCache = flag.Int64("fstest.cache", 0, "override the page cache size of the tiny-cache configurations (bytes)")
)

// ciSequences is how many sequences a plain `go test` runs: about 20 s
// with -race on two idle CPUs (-short runs 10). Each runs on three or four
// engines (policiesFor); 48 sequences on two engines took as long.
const ciSequences = 32

// metaConfig is one configuration a sequence runs in. The seed chooses it.
type metaConfig struct {
	name        string
	blockSize   int
	ioUnit      int
	cacheBytes  int64
	fileBytes   int64 // GenConfig.MaxFileBytes
	ioBytes     int64 // GenConfig.MaxIOBytes
	ops         int
	largeIOPct  int  // GenConfig.LargeIOPct
	fastFlusher bool // WritebackAge and SyncInterval of milliseconds
	host        bool // the host kernel is a valid oracle (512 B O_DIRECT alignment)
}

var metaConfigs = []metaConfig{
	// 0-4: the common case.
	{name: "4k", blockSize: 4096, ioUnit: 512, fileBytes: 96 << 10, ioBytes: 20 << 10, ops: 300, host: true},
	// 5: 64 KiB blocks on a 512 B I/O-unit device: pages smaller than
	// blocks, sub-block O_DIRECT, and the host as oracle.
	{name: "64k-512", blockSize: 64 << 10, ioUnit: 512, fileBytes: 512 << 10, ioBytes: 96 << 10, ops: 250, host: true},
	// 6-7: a 1 MiB page cache and files larger than it, so that eviction,
	// throttling and writeback run mid-sequence; the flusher and syncer
	// run every few milliseconds.
	{name: "4k-tinycache", blockSize: 4096, ioUnit: 512, cacheBytes: 1 << 20, fileBytes: 1536 << 10, ioBytes: 256 << 10, largeIOPct: 50, ops: 200, fastFlusher: true, host: true},
	// 8: 64 KiB blocks and a 64 KiB device I/O unit: pages smaller than
	// blocks, O_DIRECT aligned to 64 KiB.
	{name: "64k", blockSize: 64 << 10, ioUnit: 64 << 10, fileBytes: 1 << 20, ioBytes: 192 << 10, ops: 250},
	// 9: both.
	{name: "64k-tinycache", blockSize: 64 << 10, ioUnit: 64 << 10, cacheBytes: 1 << 20, fileBytes: 2 << 20, ioBytes: 320 << 10, largeIOPct: 50, ops: 200, fastFlusher: true},
}

func configFor(seed uint64) metaConfig {
	switch m := seed % 10; {
	case m < 5:
		return metaConfigs[0]
	case m == 5:
		return metaConfigs[1]
	case m < 8:
		return metaConfigs[2]
	case m == 8:
		return metaConfigs[3]
	default:
		return metaConfigs[4]
	}
}

// mixedPolicyEvery makes every mixedPolicyEvery-th sequence also run on an
// engine whose policy fields the seed draws one by one.
const mixedPolicyEvery = 4

// policiesFor returns the engine policies sequence seed runs under: the
// three presets (Concurrent, Seeds, Classic) and, for every
// mixedPolicyEvery-th seed, a mix of their fields drawn from the seed
// (unless it is a preset).
func policiesFor(seed uint64) []sluice.Policy {
	pols := []sluice.Policy{sluice.Concurrent(), sluice.Seeds(), sluice.Classic()}
	if seed%mixedPolicyEvery != 0 {
		return pols
	}
	rng := rand.New(rand.NewPCG(seed, 0x9011c7))
	mix := sluice.Policy{
		SharedDirectReads:         rng.IntN(2) == 0,
		OptimisticUnalignedWrites: rng.IntN(2) == 0,
		ParallelDirectWrites:      rng.IntN(2) == 0,
		AsyncBufferedReads:        rng.IntN(2) == 0,
		SkipFullPageRMW:           rng.IntN(2) == 0,
		ParallelAppends:           rng.IntN(2) == 0,
		BlockRangeExclusion:       rng.IntN(2) == 0,
	}
	if !slices.Contains(pols, mix) {
		pols = append(pols, mix)
	}
	return pols
}

// metamorphicKnownBugs lists the known engine bugs (entries of
// the issue tracker) that the generator steers around: skip
// returns true for a candidate op that would trigger the bug. Remove an
// entry when its bug is fixed.
var metamorphicKnownBugs = []struct {
	id   string
	what string
	skip func(g *Generator, op Op) bool
}{
	// None open. Entries looked like this one (B17, fixed):
	//
	//	{"B17", "O_DIRECT|O_APPEND pwrite with a misaligned offset argument", func(g *Generator, op Op) bool {
	//		h := g.slot(op.Slot)
	//		return op.Kind == OpPwrite && h != nil && !h.closed && h.flags&syscall.O_DIRECT != 0 &&
	//			h.flags&syscall.O_APPEND != 0 && op.Off%g.Model.DirectAlign != 0
	//	}},
}

func skipKnownBugs(g *Generator, op Op) string {
	for _, b := range metamorphicKnownBugs {
		if b.skip(g, op) {
			return b.id
		}
	}
	return ""
}

// TestMetamorphic generates seeded random operation sequences and runs
// each on the model, on the engine under Concurrent(), Seeds() and
// Classic() (and a mix of their fields, policiesFor), and
// (for 512 B-aligned geometries) on the host kernel. Every operation's
// result must be the same everywhere; at the end the trees must be equal,
// the engine's consistency check clean, and the trees the same again after
// a clean remount.
//
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.seed=N -v  # replay one
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.n=500      # more
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.first=1000 # others
func TestMetamorphic(t *testing.T) {
	var seeds []uint64
	switch {
	case *flagSeed != 0:
		seeds = []uint64{*flagSeed}
	default:
		n := *flagN
		if n == 0 {
			n = ciSequences
			if testing.Short() {
				n = 10
			}
		}
		for i := range n {
			seeds = append(seeds, *flagFirst+uint64(i))
		}
	}
	for _, b := range metamorphicKnownBugs {
		t.Logf("generator avoids known bug %s (%s)", b.id, b.what)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSequence(t, seed)
		})
	}
}

func runSequence(t *testing.T, seed uint64) {
	cfg := configFor(seed)
	ops := cfg.ops
	if *flagOps != 0 {
		ops = *flagOps
	}
	steps, g := Generate(seed, GenConfig{
		Ops: ops, MaxFileBytes: cfg.fileBytes, MaxIOBytes: cfg.ioBytes, LargeIOPct: cfg.largeIOPct,
		BlockSize: int64(cfg.blockSize), DirectAlign: int64(cfg.ioUnit), Skip: skipKnownBugs,
	})
	replay := fmt.Sprintf("replay: go test ./internal/harness/fstest -run 'TestMetamorphic/seed=%d$' -fstest.seed=%d -v", seed, seed)
	if *flagV {
		for i, s := range steps {
			t.Logf("%4d %v -> %v", i, s.Op, s.Result)
		}
	}
	t.Logf("seed %d config %s, %d ops:%s; skipped for known bugs: %v", seed, cfg.name, len(steps), Describe(steps), g.Skipped)

	modelTree, err := Tree(g.Model)
	if err != nil {
		t.Fatalf("model tree: %v", err)
	}
	var targets []Target
	for _, pol := range policiesFor(seed) {
		opts := sluice.Options{Policy: &pol, CacheSizeBytes: cfg.cacheBytes}
		if *flagCache != 0 && cfg.cacheBytes != 0 {
			opts.CacheSizeBytes = *flagCache
		}
		if cfg.fastFlusher {
			opts.WritebackAge = 2 * time.Millisecond
			opts.SyncInterval = 5 * time.Millisecond
		}
		e := newTestEngine(t, EngineConfig{
			DeviceBytes: 256 << 20, IOUnit: cfg.ioUnit, BlockSize: cfg.blockSize, Options: opts,
		})
		targets = append(targets, e)
	}
	if cfg.host && *flagHost {
		targets = append(targets, newTestHost(t))
	}
	// The targets run side by side: each has its own state, and the host
	// and the engines' syncs wait more than they compute.
	var wg sync.WaitGroup
	failed := make([]bool, len(targets))
	for i, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			failed[i] = !runOn(t, tg, steps, modelTree)
			t.Logf("%s: %v", tg.Name(), time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	if slices.Contains(failed, true) {
		t.Errorf("%s", replay)
	}
}

// runOn applies steps to tg, compares each result and the final tree with
// the model's, and reports whether all matched.
func runOn(t *testing.T, tg Target, steps []Step, modelTree []string) bool {
	t.Helper()
	r := NewRunner(tg)
	for i, s := range steps {
		got := r.Apply(s.Op)
		if got.String() == s.Result.String() {
			continue
		}
		var sb strings.Builder
		for j := max(0, i-40); j < i; j++ {
			fmt.Fprintf(&sb, "  %4d %v -> %v\n", j, steps[j].Op, steps[j].Result)
		}
		fmt.Fprintf(&sb, "  %4d %v\n     model: %v\n     %s: %v\n", i, s.Op, s.Result, tg.Name(), got)
		r.CloseAll()
		t.Errorf("%s differs from the model at op %d:\n%s", tg.Name(), i, sb.String())
		return false
	}
	r.CloseAll()
	if !sameTree(t, tg, "at the end", modelTree) {
		return false
	}
	if e, ok := tg.(*Engine); ok {
		c := e.Counters()
		t.Logf("%s: evictions=%d throttles=%d writeback_pages=%d direct_writes=%d buffered_writes=%d sync_points=%d",
			tg.Name(), c["CacheEvictions"], c["CacheThrottles"], c["CacheWritebackPages"], c["DirectWrites"], c["BufferedWrites"], c["SyncPoints"])
		if p := checkEngine(t, e); len(p) > 0 {
			t.Errorf("%s: consistency check at the end:\n  %s", tg.Name(), strings.Join(p, "\n  "))
			return false
		}
		if err := e.Remount(); err != nil {
			t.Errorf("%s: %v", tg.Name(), err)
			return false
		}
		if !sameTree(t, tg, "after a remount", modelTree) {
			return false
		}
		if p := checkEngine(t, e); len(p) > 0 {
			t.Errorf("%s: consistency check after the remount:\n  %s", tg.Name(), strings.Join(p, "\n  "))
			return false
		}
	}
	return true
}

func sameTree(t *testing.T, tg Target, when string, want []string) bool {
	t.Helper()
	got, err := Tree(tg)
	if err != nil {
		t.Errorf("%s: tree %s: %v", tg.Name(), when, err)
		return false
	}
	if d := diffLines("model", want, tg.Name(), got); d != "" {
		t.Errorf("%s: tree %s differs from the model's:\n%s", tg.Name(), when, d)
		return false
	}
	return true
}
