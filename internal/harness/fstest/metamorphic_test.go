package fstest

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta/etcdkv"
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
// returns true for a candidate op that would trigger the bug, given the
// generator's state and the sequence's configuration. Remove an entry
// when its bug is fixed.
var metamorphicKnownBugs = []struct {
	id   string
	what string
	skip func(g *Generator, op Op, cfg metaConfig) bool
}{}

// skipKnownBugs returns the Skip function of a sequence in configuration
// cfg: the ID of the known bug an op would trigger, or "".
func skipKnownBugs(cfg metaConfig) func(g *Generator, op Op) string {
	return func(g *Generator, op Op) string {
		for _, b := range metamorphicKnownBugs {
			if b.skip(g, op, cfg) {
				return b.id
			}
		}
		return ""
	}
}

// TestMetamorphic generates seeded random operation sequences and runs
// each on the model, on the engine under Concurrent(), Seeds() and
// Classic() (and a mix of their fields, policiesFor), and
// (for 512 B-aligned geometries) on the host kernel. Every operation's
// result must be the same everywhere; at the end the trees must be equal,
// the engine's consistency check clean, and the trees the same again after
// a clean remount. Three sequences in four also make reflink calls
// (reflinkPerMille) and untorn writes (atomicPct) and run on the host's
// XFS; the fourth keep the older mix and run on ext4.
//
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.seed=N -v  # replay one
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.n=500      # more
//	go test ./internal/harness/fstest -run TestMetamorphic -fstest.first=1000 # others
func TestMetamorphic(t *testing.T) {
	runSequences(t, ciSequences, 10, 100, func(seed uint64) int {
		if seed%4 == 2 {
			return 0
		}
		return reflinkPerMille
	})
}

// TestMetamorphicClones is TestMetamorphic with a third of the operations
// reflink calls (clonesPerMille): copy-on-write, shared blocks moved by
// collapse, insert and exchange, dedupe of what clones made equal, all
// through every write path the sequences use.
func TestMetamorphicClones(t *testing.T) {
	runSequences(t, cloneSequences, 6, cloneOpsPct, func(uint64) int { return clonesPerMille })
}

const (
	// reflinkPerMille is TestMetamorphic's share of reflink calls
	// (GenConfig.ReflinkPerMille).
	reflinkPerMille = 60
	// atomicPct is the share of positioned writes that are untorn
	// (GenConfig.AtomicPct) in the sequences that make reflink calls,
	// whose host is XFS: ext4, the others', has no RWF_ATOMIC without
	// hardware support.
	atomicPct = 25
	// cloneSequences, cloneOpsPct and clonesPerMille are
	// TestMetamorphicClones's number of sequences, their length in
	// percent of the configuration's, and its share of reflink calls:
	// about 6 s with -race on two idle CPUs.
	cloneSequences = 12
	cloneOpsPct    = 50
	clonesPerMille = 330
)

// runSequences runs the seeds the flags choose (ci of them by default,
// short with -short) as parallel subtests, opsPct percent as long as
// their configuration says; perMille gives a seed's
// GenConfig.ReflinkPerMille.
func runSequences(t *testing.T, ci, short, opsPct int, perMille func(seed uint64) int) {
	n := *flagN
	if n == 0 {
		n = ci
		if testing.Short() {
			n = short
		}
	}
	var seeds []uint64
	for i := range n {
		seeds = append(seeds, *flagFirst+uint64(i))
	}
	runSeeds(t, seeds, opsPct, perMille, nil)
}

// runSeeds runs seeds (only -fstest.seed if it is given) as runSequences
// does, on engines whose metadata is in etcd if etcd is not nil (it
// returns each engine's options; the host is then left out: TestMetamorphic
// compares it with the model on the same sequences).
func runSeeds(t *testing.T, seeds []uint64, opsPct int, perMille func(seed uint64) int, etcd func(t *testing.T) *etcdkv.Options) {
	if *flagSeed != 0 {
		seeds = []uint64{*flagSeed}
	}
	for _, b := range metamorphicKnownBugs {
		t.Logf("generator avoids known bug %s (%s)", b.id, b.what)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runSequence(t, seed, opsPct, perMille(seed), etcd)
		})
	}
}

func runSequence(t *testing.T, seed uint64, opsPct, reflink int, etcd func(t *testing.T) *etcdkv.Options) {
	cfg := configFor(seed)
	ops := cfg.ops * opsPct / 100
	if *flagOps != 0 {
		ops = *flagOps
	}
	steps, g := Generate(seed, GenConfig{
		Ops: ops, MaxFileBytes: cfg.fileBytes, MaxIOBytes: cfg.ioBytes, LargeIOPct: cfg.largeIOPct,
		BlockSize: int64(cfg.blockSize), DirectAlign: int64(cfg.ioUnit), ReflinkPerMille: reflink, Skip: skipKnownBugs(cfg),
		AtomicPct: atomicPctFor(reflink),
	})
	test, _, _ := strings.Cut(t.Name(), "/")
	replay := fmt.Sprintf("replay: go test ./internal/harness/fstest -run '%s/seed=%d$' -fstest.seed=%d -v", test, seed, seed)
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
		ec := EngineConfig{DeviceBytes: 256 << 20, IOUnit: cfg.ioUnit, BlockSize: cfg.blockSize, Options: opts}
		if etcd != nil {
			ec.Etcd = etcd(t)
		}
		targets = append(targets, newTestEngine(t, ec))
	}
	if cfg.host && *flagHost && etcd == nil {
		host, why := metaHost(t, steps, int64(cfg.blockSize))
		if host != nil {
			targets = append(targets, host)
		} else {
			t.Logf("host not compared: %s", why)
		}
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

// atomicPctFor returns the GenConfig.AtomicPct of a sequence that makes
// reflink calls per mille of its operations: atomicPct if it makes any
// (its host is XFS), else 0.
func atomicPctFor(reflink int) int {
	if reflink > 0 {
		return atomicPct
	}
	return 0
}

// metaHost returns the host target of a sequence (hostFor: ext4 unless it
// makes reflink calls, then the XFS of its block size), or nil and why
// there is none. XFS is no oracle after an exchange to EOF at different
// offsets: it keeps the written blocks such an exchange leaves past a
// file's new EOF, and a later clone past EOF shows their bytes where
// POSIX (and the model, and sluice, which drops the blocks) has zeros.
func metaHost(t *testing.T, steps []Step, bs int64) (Target, string) {
	ops := make([]Op, len(steps))
	for i, s := range steps {
		ops[i] = s.Op
		if op := s.Op; op.Kind == OpExchangeRange && op.Flags&(ExchangeToEOF|ExchangeDryRun) == ExchangeToEOF &&
			op.Off != op.Off2 && s.Result.Errno == 0 {
			return nil, fmt.Sprintf("op %d exchanges to EOF at different offsets (XFS may show what it leaves past EOF)", i)
		}
	}
	return hostFor(t, ops, bs)
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
		if why := xfsArtifact(tg, s, got); why != "" {
			r.CloseAll()
			t.Logf("%s: not compared from op %d (%v -> %v, model %v): %s", tg.Name(), i, s.Op, got, s.Result, why)
			return true
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
		t.Logf("%s: evictions=%d throttles=%d writeback_pages=%d direct_writes=%d buffered_writes=%d sync_points=%d atomic_writes=%d (out of place %d, settles %d)",
			tg.Name(), c["CacheEvictions"], c["CacheThrottles"], c["CacheWritebackPages"], c["DirectWrites"], c["BufferedWrites"], c["SyncPoints"],
			c["AtomicWrites"], c["AtomicWritesOutOfPlace"], c["AtomicSettles"])
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

// xfsArtifact says why the XFS host's result got for step s is an
// artifact of XFS's implementation rather than an answer the model (or
// sluice) should give, or returns "". Two are known, both in sequences
// that mix buffered and O_DIRECT I/O on files that share blocks (XFS does
// block-misaligned O_DIRECT writes to such files as buffered writes):
// an EIO from the kernel's "Direct I/O collision with buffered writes"
// (dio_warn_stale_pagecache: the page cache could not be kept coherent),
// and EXCHANGE_RANGE's EINVAL for a delayed-allocation reservation left
// in the range after its flush (xfs_exchmaps refuses to move one).
func xfsArtifact(tg Target, s Step, got Result) string {
	if h, ok := tg.(*Host); !ok || h.Name() != "host/xfs" {
		return ""
	}
	switch {
	case got.Errno == syscall.EIO && s.Result.Errno != syscall.EIO:
		return "EIO: XFS lost page-cache coherence between buffered and O_DIRECT I/O (dmesg: Direct I/O collision with buffered writes)"
	case s.Op.Kind == OpExchangeRange && got.Errno == syscall.EINVAL && s.Result.Errno == 0:
		return "XFS refuses to exchange a delayed-allocation reservation its flush left in the range"
	}
	return ""
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
