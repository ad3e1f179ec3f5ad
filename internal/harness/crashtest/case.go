package crashtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
)

// CaseConfig is one crash-test case: a seeded workload, crashed at several
// points, each crash reopened and checked.
type CaseConfig struct {
	// Seed selects everything random in the case.
	Seed uint64
	// Workers is the number of goroutines running the workload. With 1,
	// the case is deterministic: the same seed replays the same ops, the
	// same crash images and the same checks. With more, each worker works
	// in its own directory /wN and crashes happen while ops run.
	Workers int
	// Ops is the number of ops per worker and generation.
	Ops int
	// Generations is how many times (single worker only) the workload goes
	// on, on the file system recovered from the last crash point of the
	// previous generation.
	Generations int
	// Points is the number of crash points per generation.
	Points int
	// Only, if not 0, checks only crash point Only (numbered from 1 over
	// the case) and those the next generations start from.
	Only int
	// MaxFileBytes bounds file offsets. The default value is 512 KiB.
	MaxFileBytes int64
	// PebbleClonePct is the percentage of a single-worker case's crash
	// points whose metadata comes from Pebble's MemFS.CrashClone with a
	// random unsynced percentage instead of a commit prefix. Such points
	// are not replayed exactly (see RecKV). The default value is 0.
	PebbleClonePct int
	Env            EnvConfig
}

func (c CaseConfig) String() string {
	o := c.Env.Options
	metaKV := "pebble"
	if c.Env.Etcd != nil {
		metaKV = "etcd"
	}
	return fmt.Sprintf("seed=%d workers=%d ops=%d generations=%d points=%d block=%d iounit=%d device=%d sums=%t meta=%s options={%s}",
		c.Seed, c.Workers, c.Ops, c.Generations, c.Points, c.Env.BlockSize, c.Env.IOUnit, c.Env.DeviceBytes, c.Env.DataChecksums, metaKV, o.String())
}

func (c *CaseConfig) ensureDefaults() {
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 512 << 10
	}
	c.Env.ensureDefaults()
	c.Env.Options.EnsureDefaults()
}

// DeriveConfig returns the case configuration seed selects: mostly single
// worker (replayable) cases, with concurrent ones mixed in (concurrentPct
// percent), block sizes of 1, 4 and 16 KiB, and the engine's policies
// (randomPolicy).
func DeriveConfig(seed uint64, concurrentPct int) CaseConfig {
	rng := newRand(seed, 0xc0f)
	c := CaseConfig{Seed: seed, Workers: 1, Generations: 2, Points: 6}
	c.Ops = 60 + rng.IntN(100)
	if rng.IntN(100) < concurrentPct {
		c.Workers = 2 + rng.IntN(3)
		c.Generations = 1
		c.Points = 5
		c.Ops = 30 + rng.IntN(60)
	}
	switch r := rng.IntN(20); {
	case r < 3:
		c.Env.BlockSize = 1024
	case r < 6:
		c.Env.BlockSize = 16384
	default:
		c.Env.BlockSize = 4096
	}
	if c.Env.BlockSize >= 4096 && rng.IntN(6) == 0 {
		// O_DIRECT I/O in 4 KiB units; buffered writes of 512 B sectors
		// then need read-modify-write of device units at writeback.
		c.Env.IOUnit = 4096
	}
	c.Env.Options.Policy = randomPolicy(rng)
	c.Env.Options.NoGroupCommit = rng.IntN(5) == 0
	if c.Workers > 1 && rng.IntN(3) == 0 {
		// A small cache: writeback under pressure, in the background.
		c.Env.Options.CacheSizeBytes = 2 << 20
	}
	// A third of the cases whose blocks allow it checksum their data:
	// a false mismatch fails a read, which the checks report.
	c.Env.DataChecksums = c.Env.BlockSize <= 4096 && rng.IntN(3) == 0
	c.ensureDefaults()
	return c
}

// randomPolicy returns the engine policy of a case: one of the presets
// (Concurrent, the default, most often; Seeds; Classic) or each field drawn
// on its own.
func randomPolicy(rng *rand.Rand) *sluice.Policy {
	var p sluice.Policy
	switch rng.IntN(8) {
	case 0, 1, 2:
		p = sluice.Concurrent()
	case 3:
		p = sluice.Seeds()
	case 4:
		p = sluice.Classic()
	default:
		p = sluice.Policy{
			SharedDirectReads:         rng.IntN(2) == 0,
			OptimisticUnalignedWrites: rng.IntN(2) == 0,
			ParallelDirectWrites:      rng.IntN(2) == 0,
			AsyncBufferedReads:        rng.IntN(2) == 0,
			SkipFullPageRMW:           rng.IntN(2) == 0,
			ParallelAppends:           rng.IntN(2) == 0,
			BlockRangeExclusion:       rng.IntN(2) == 0,
		}
	}
	return &p
}

// Failure describes a failed case.
type Failure struct {
	Config CaseConfig
	// Generation and Point say where it failed (Point numbered from 1 over
	// the case; 0 for a failure of the workload itself); Op is the number
	// of ops the worker had run in that generation (single worker).
	Generation, Point, Op int
	// Crash describes the crash: metadata kept and device fates.
	Crash    string
	Problems []Problem
	// Err is a failure of the workload or of the harness.
	Err error
	// Ops lists the ops of each generation up to the failure (single
	// worker), or of each worker (concurrent).
	Ops [][]Op
}

// Report formats the failure, with at most lastOps ops of each list.
func (f *Failure) Report(lastOps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "crash test case %s\n", f.Config)
	test := "TestCrashCampaign"
	if f.Config.Env.Etcd != nil {
		test = "TestCampaignEtcd"
	}
	fmt.Fprintf(&b, "replay: go test ./internal/harness/crashtest/ -run %s -crashtest.seed=%d", test, f.Config.Seed)
	if f.Point > 0 && f.Config.Workers == 1 {
		fmt.Fprintf(&b, " -crashtest.point=%d", f.Point)
	}
	fmt.Fprintf(&b, "\n")
	if f.Err != nil {
		fmt.Fprintf(&b, "generation %d, op %d: %v\n", f.Generation, f.Op, f.Err)
	}
	if f.Point > 0 {
		fmt.Fprintf(&b, "crash point %d (generation %d, after op %d): %s\n", f.Point, f.Generation, f.Op, f.Crash)
	}
	for _, p := range f.Problems {
		fmt.Fprintf(&b, "  %v\n", p)
	}
	for i, ops := range f.Ops {
		label := "generation"
		if f.Config.Workers > 1 {
			label = "worker"
		}
		from := max(0, len(ops)-lastOps)
		fmt.Fprintf(&b, "%s %d ops %d..%d of %d:\n", label, i, from+1, len(ops), len(ops))
		for j := from; j < len(ops); j++ {
			fmt.Fprintf(&b, "  %4d %v\n", j+1, ops[j])
		}
	}
	return b.String()
}

// CaseResult is the outcome of a case.
type CaseResult struct {
	Config CaseConfig
	// Points is the number of crash points checked.
	Points  int
	Stats   Stats
	Failure *Failure
	Elapsed time.Duration
}

// RunCase runs one case.
func RunCase(cfg CaseConfig) *CaseResult {
	start := time.Now()
	cfg.ensureDefaults()
	var res *CaseResult
	if cfg.Workers <= 1 {
		cfg.Workers = 1
		res = runSingle(cfg)
	} else {
		res = runConcurrent(cfg)
	}
	res.Config = cfg
	res.Elapsed = time.Since(start)
	return res
}

// pointSeed is the seed of crash point n of a case.
func pointSeed(seed uint64, n int) uint64 { return mix(seed ^ mix(uint64(n)+0x5eed)) }

// deviceFate picks the fates of the device's pending writes for a crash:
// random ones mostly, sometimes all dropped or all kept. With byContent,
// a write's random fate is drawn from the seed and the write's offset,
// length and data rather than from its position in the device's log, so
// that writes issued at once (OpWriteParallel), whose order in the log
// varies from run to run, get the same fates in every replay; otherwise it
// is memdev.CrashImage(seed).
func deviceFate(seed uint64, byContent bool) (func(memdev.PendingWrite) memdev.Fate, string) {
	switch newRand(seed, 2).IntN(20) {
	case 0, 1, 2:
		return func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Drop} }, "every pending device write dropped"
	case 3, 4, 5:
		return func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Keep} }, "every pending device write kept"
	}
	if !byContent {
		return nil, fmt.Sprintf("memdev.CrashImage(%d)", seed)
	}
	return func(w memdev.PendingWrite) memdev.Fate {
		h := mix(seed ^ mix(uint64(w.Off)^mix(uint64(len(w.Data)))))
		for i := 0; i+8 <= len(w.Data); i += 512 {
			h = mix(h ^ uint64(w.Data[i]) ^ uint64(w.Data[i+1])<<8 ^ uint64(w.Data[i+16])<<16 ^ uint64(w.Data[i+17])<<24)
		}
		rng := newRand(h, 3)
		switch rng.IntN(3) {
		case 0:
			return memdev.Fate{Kind: memdev.Keep}
		case 1:
			s := make([]bool, w.Sectors())
			for i := range s {
				s[i] = rng.IntN(2) == 1
			}
			return memdev.Fate{Kind: memdev.Tear, Sectors: s}
		}
		return memdev.Fate{Kind: memdev.Drop}
	}, fmt.Sprintf("random fates (seed %d, drawn per write from its content)", seed)
}

func runSingle(cfg CaseConfig) *CaseResult {
	res := &CaseResult{}
	fail := func(f *Failure) *CaseResult {
		f.Config = cfg
		res.Failure = f
		return res
	}
	env, err := NewEnv(cfg.Env)
	if err != nil {
		return fail(&Failure{Err: err})
	}
	defer func() { env.Close() }()
	sh := &shared{fs: env.FS, blockSize: int64(cfg.Env.BlockSize), maxFileBytes: cfg.MaxFileBytes, ioUnit: int64(cfg.Env.IOUnit)}
	w := newWorker(sh, 0, "/", cfg.Seed, newModel(namespace{}))
	var logs [][]Op
	point := 0
	for gen := 0; gen < cfg.Generations; gen++ {
		rng := newRand(cfg.Seed, uint64(1000+gen))
		at := map[int]bool{cfg.Ops: true}
		for len(at) < min(cfg.Points, cfg.Ops) {
			at[1+rng.IntN(cfg.Ops)] = true
		}
		c, _ := env.KV.Commits()
		marks := []uint64{c}
		lastSync := 0 // the last op that promised durability
		var next *Env
		var nextRec *recovered
		for op := 1; op <= cfg.Ops; op++ {
			if err := w.step(); err != nil {
				return fail(&Failure{Generation: gen, Op: op, Err: err, Ops: append(logs, w.log)})
			}
			c, _ := env.KV.Commits()
			marks = append(marks, c)
			if isSyncPoint(w, w.log[len(w.log)-1]) {
				lastSync = op
			}
			if !at[op] {
				continue
			}
			point++
			last := op == cfg.Ops && gen < cfg.Generations-1
			if cfg.Only != 0 && point != cfg.Only && !last {
				continue
			}
			cp := &crashPoint{env: env, seed: pointSeed(cfg.Seed, point), opts: cfg.Env.Options, probeName: fmt.Sprintf("probe-%d", point), stats: &res.Stats, pebblePct: cfg.PebbleClonePct}
			cp.single(w, marks, lastSync)
			res.Points++
			if len(cp.problems) > 0 || cp.err != nil {
				if cp.next != nil {
					cp.next.Close()
				}
				return fail(&Failure{Generation: gen, Point: point, Op: op, Crash: cp.desc, Problems: cp.problems, Err: cp.err, Ops: append(logs, slices.Clone(w.log))})
			}
			if last {
				next, nextRec = cp.next, cp.rec
			} else if cp.next != nil {
				cp.next.Close()
			}
		}
		if err := finalCheck(env); err != nil {
			return fail(&Failure{Generation: gen, Op: cfg.Ops, Err: err, Ops: append(logs, w.log)})
		}
		res.Stats.addCounters(env.FS)
		if next == nil {
			break
		}
		// The next generation runs on what the crash left.
		env.Close()
		env = next
		logs = append(logs, w.log)
		names := w.names
		w = newWorker(&shared{fs: env.FS, blockSize: sh.blockSize, maxFileBytes: sh.maxFileBytes, ioUnit: sh.ioUnit}, 0, "/", cfg.Seed+uint64(gen+1)*0x9e37, rebuildModel(nextRec, "/"))
		w.names = names
		w.sh.seq.Store(sh.seq.Load())
		sh = w.sh
	}
	return res
}

// isSyncPoint reports whether op promised a sync point, every metadata
// commit made by then durable: Fsync, a directory's fsync, SyncAll, a
// write through an O_SYNC handle. Fdatasync and O_DSYNC writes promise
// their file's data and what reads it back (model.fileSync).
func isSyncPoint(w *worker, op Op) bool {
	switch op.Kind {
	case OpFsync:
		return op.Flags != 1
	case OpFsyncDir, OpSyncAll:
		return true
	case OpWrite:
		h := w.slot(op.H)
		return h != nil && h.sync
	}
	return false
}

// finalCheck checks the live file system at the end of a generation.
func finalCheck(env *Env) error {
	r, err := env.FS.Check()
	if err != nil {
		return fmt.Errorf("final Check: %w", err)
	}
	if len(r.Problems) > 0 {
		return fmt.Errorf("final Check (no crash) found problems: %v", r.Problems)
	}
	c := env.FS.Counters()
	if c["SumMismatches"] != int64(env.corruptions) || c["SumPartialWrites"] != 0 {
		return fmt.Errorf("%d data checksum mismatches where %d corruptions were injected (a false positive), %d partial-block writes on a checksummed volume",
			c["SumMismatches"], env.corruptions, c["SumPartialWrites"])
	}
	return nil
}

// corruptionProbe checks, on a recovered checksummed volume, that a block
// corrupted as it is read is caught: a bit flipped in the read of the
// first written block of the first file (of paths, in order) that has one
// fails the read with EIO, and the same read without the corruption
// returns data. It counts the corruption in env.corruptions and stats.
func corruptionProbe(env *Env, paths []string, stats *Stats) []Problem {
	fs := env.FS
	bs := int64(env.Vol.Header.BlockSize)
	for _, p := range paths {
		f, err := fs.OpenFile(p, sluice.O_RDONLY|sluice.O_DIRECT, 0)
		if err != nil {
			continue // a directory, or gone
		}
		a, err := f.Stat()
		var exts []sluice.FiemapExtent
		if err == nil && a.Size > 0 {
			exts, err = f.Fiemap(0, uint64(a.Size), 0)
		}
		if err != nil {
			f.Close()
			return []Problem{{"corruption", fmt.Sprintf("%s: %v", p, err)}}
		}
		for _, x := range exts {
			if x.Flags&(sluice.FiemapExtentUnwritten|sluice.FiemapExtentDelalloc) != 0 || int64(x.Logical) >= a.Size {
				continue
			}
			buf := make([]byte, bs)
			inj := env.Fault.Inject(faultdev.CorruptRange(int64(x.Physical), bs))
			_, err := f.Pread(buf, int64(x.Logical), 0)
			inj.Remove()
			env.corruptions++
			stats.Corruptions++
			var probs []Problem
			if !errors.Is(err, syscall.EIO) {
				probs = append(probs, Problem{"corruption", fmt.Sprintf("%s offset %d: a read of a corrupted block returned %v, want EIO", p, x.Logical, err)})
			}
			if _, err := f.Pread(buf, int64(x.Logical), 0); err != nil {
				probs = append(probs, Problem{"corruption", fmt.Sprintf("%s offset %d: the read once healed: %v", p, x.Logical, err)})
			}
			f.Close()
			return probs
		}
		f.Close()
	}
	return nil
}

// rebuildModel makes the model of the subtree root from what a crash
// left: every file's recovered content is its durable base.
func rebuildModel(rec *recovered, root string) *model {
	ns := subtree(rec.ns, root)
	m := newModel(ns)
	inos := map[sluice.Ino]bool{}
	for _, e := range ns {
		if !e.dir {
			inos[e.ino] = true
		}
	}
	ordered := make([]sluice.Ino, 0, len(inos))
	for ino := range inos {
		ordered = append(ordered, ino)
	}
	sort.Slice(ordered, func(i, j int) bool { return ordered[i] < ordered[j] })
	for _, ino := range ordered {
		rf := rec.files[ino]
		if rf == nil {
			continue
		}
		fm := newFileModel(rf.id, ino)
		fm.size, fm.sizes, fm.nlink = rf.size, []int64{rf.size}, rf.nlink
		fm.shares = rec.shares
		for i, v := range rf.values {
			fm.sec[i] = newSectorHist(v)
		}
		m.addFile(fm)
	}
	return m
}

// crashPoint crashes a running environment and checks what it left.
type crashPoint struct {
	env       *Env
	seed      uint64
	opts      sluice.Options
	probeName string
	stats     *Stats
	pebblePct int
	// keepAll makes a single-worker crash keep every metadata commit:
	// exactly what etcd holds when the engine's process dies.
	keepAll bool

	desc     string
	problems []Problem
	err      error
	// next is the file system on the crash image, open, when the checks
	// passed; rec what it holds.
	next *Env
	rec  *recovered
}

// single crashes a single-worker case after op len(marks)-1 and checks.
// marks[i] is the number of metadata commits after op i; lastSync is the
// last op that promised durability.
func (cp *crashPoint) single(w *worker, marks []uint64, lastSync int) {
	rng := newRand(cp.seed, 1)
	commits, synced := cp.env.KV.Commits()
	if marks[lastSync] > synced {
		cp.problems = append(cp.problems, Problem{"sync", fmt.Sprintf("op %d (%v) promised durability, but only %d of the %d metadata commits made by then were synced",
			lastSync, w.log[lastSync-1], synced, marks[lastSync])})
	}
	var k uint64
	var how string
	switch r := rng.IntN(20); {
	case r < 8: // an op boundary
		var js []int
		for j, c := range marks {
			if c >= synced {
				js = append(js, j)
			}
		}
		j := js[rng.IntN(len(js))]
		k, how = marks[j], fmt.Sprintf("metadata as after op %d", j)
	case r < 13: // any commit
		k = synced + rng.Uint64N(commits-synced+1)
		how = "metadata prefix"
	case r < 16:
		k, how = synced, "synced metadata only"
	default:
		k, how = commits, "all metadata"
	}
	if cp.keepAll {
		k, how = commits, "all metadata"
	}
	fate, fdesc := deviceFate(cp.seed, true)
	m := MetaCrash{UpTo: k}
	cp.desc = fmt.Sprintf("%s (%d of %d commits, %d synced), %s", how, k, commits, synced, fdesc)
	random := rng.IntN(100) < cp.pebblePct && cp.env.canCrashRandom()
	if random {
		m = MetaCrash{Random: true, Percent: rng.IntN(101)}
		cp.desc = fmt.Sprintf("%v (%d commits, %d synced; not replayable), %s", m, commits, synced, fdesc)
	}

	// The namespaces the kept metadata may hold.
	j := 0
	for i, c := range marks {
		if c <= k {
			j = i
		}
	}
	nsAt := func(op int) namespace {
		var ns namespace
		for _, s := range w.m.nsLog {
			if s.op <= op {
				ns = s.ns
			}
		}
		return ns
	}
	cands := []namespace{nsAt(j)}
	if marks[j] < k && j+1 < len(marks) {
		cands = append(cands, nsAt(j+1))
	}
	if random {
		// Some prefix of the unsynced commits, from the synced ones on.
		js := 0
		for i, c := range marks {
			if c <= synced {
				js = i
			}
		}
		cands = nil
		for _, s := range w.m.nsLog {
			if s.op >= js || len(cands) == 0 {
				cands = append(cands, s.ns)
			} else {
				cands[0] = s.ns
			}
		}
	}
	w.mu.Lock()
	snap := w.m.snapshot()
	w.mu.Unlock()
	exp := &expectation{
		files:   expectFrom(snap, snap),
		roots:   []string{"/"},
		nsCands: map[string][]namespace{"/": cands},
		owner:   owners([]*worker{w}),
	}
	img, err := cp.env.Crash(cp.seed, fate, m)
	if err != nil {
		cp.err = fmt.Errorf("crashing: %w", err)
		return
	}
	cp.check(img, exp)
}

// owners names each file identity of the workers' models.
func owners(ws []*worker) map[uint64]string {
	out := map[uint64]string{}
	for _, w := range ws {
		w.mu.Lock()
		names := map[sluice.Ino][]string{}
		for p, e := range w.m.ns {
			names[e.ino] = append(names[e.ino], p)
		}
		for _, f := range w.m.files {
			n := names[f.ino]
			sort.Strings(n)
			out[f.id] = fmt.Sprintf("file %#x (ino %d, now %v)", f.id, f.ino, n)
		}
		w.mu.Unlock()
	}
	return out
}

// check opens the crash image and runs every check.
func (cp *crashPoint) check(img *Image, exp *expectation) {
	next, pre, err := img.Open(cp.opts)
	if pre != nil {
		for _, p := range pre.Problems {
			cp.problems = append(cp.problems, Problem{"check-before-recovery", p.String()})
		}
	}
	if err != nil {
		cp.problems = append(cp.problems, Problem{"reopen", err.Error()})
		return
	}
	v := &verifier{fs: next.FS, exp: exp, bufferedEvery: 4, stats: cp.stats}
	v.run()
	if len(v.problems) == 0 {
		// Check after the probe only at every other point: it is the
		// costliest step under -race (Pebble's invariants build).
		v.probe(cp.probeName, cp.seed%2 == 0)
	}
	if len(v.problems) == 0 && next.FS.DataChecksums() {
		var paths []string
		for p, e := range v.rec.ns {
			if !e.dir {
				paths = append(paths, p)
			}
		}
		slices.Sort(paths)
		v.problems = append(v.problems, corruptionProbe(next, paths, cp.stats)...)
	}
	cp.problems = append(cp.problems, v.problems...)
	cp.next, cp.rec = next, v.rec
	if len(cp.problems) > 0 {
		next.Close()
		cp.next = nil
	}
}

func runConcurrent(cfg CaseConfig) *CaseResult {
	res := &CaseResult{}
	fail := func(f *Failure) *CaseResult {
		f.Config = cfg
		res.Failure = f
		return res
	}
	env, err := NewEnv(cfg.Env)
	if err != nil {
		return fail(&Failure{Err: err})
	}
	defer func() { env.Close() }()
	sh := &shared{fs: env.FS, blockSize: int64(cfg.Env.BlockSize), maxFileBytes: cfg.MaxFileBytes, ioUnit: int64(cfg.Env.IOUnit)}
	var ws []*worker
	roots := []string{}
	for i := range cfg.Workers {
		root := fmt.Sprintf("/w%d", i)
		if err := env.FS.Mkdir(root, 0o755); err != nil {
			return fail(&Failure{Err: err})
		}
		roots = append(roots, root)
		ws = append(ws, newWorker(sh, i, root, cfg.Seed, newModel(namespace{})))
	}
	if err := env.FS.SyncAll(); err != nil {
		return fail(&Failure{Err: err})
	}
	logs := func() [][]Op {
		out := make([][]Op, len(ws))
		for i, w := range ws {
			out[i] = w.log
		}
		return out
	}

	var stop sync.WaitGroup
	errs := make([]error, len(ws))
	var halt atomic.Bool
	for i, w := range ws {
		stop.Add(1)
		go func() {
			defer stop.Done()
			for op := 0; op < cfg.Ops && !halt.Load(); op++ {
				if err := w.step(); err != nil {
					errs[i] = err
					halt.Store(true)
					return
				}
			}
		}()
	}
	total := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.done.Load()
		}
		return n
	}
	rng := newRand(cfg.Seed, 77)
	var at []int64
	for range cfg.Points {
		at = append(at, 1+rng.Int64N(int64(cfg.Ops*cfg.Workers)))
	}
	slices.Sort(at)
	var failure *Failure
	for point, target := range at {
		for total() < target && !halt.Load() {
			time.Sleep(20 * time.Microsecond)
		}
		if halt.Load() {
			break
		}
		cp := &crashPoint{env: env, seed: pointSeed(cfg.Seed, point+1), opts: cfg.Env.Options, probeName: fmt.Sprintf("probe-%d", point+1), stats: &res.Stats}
		cp.concurrent(ws, roots)
		res.Points++
		if cp.next != nil {
			cp.next.Close()
		}
		if len(cp.problems) > 0 || cp.err != nil {
			failure = &Failure{Point: point + 1, Crash: cp.desc, Problems: cp.problems, Err: cp.err}
			halt.Store(true)
			break
		}
	}
	stop.Wait()
	for i, err := range errs {
		if err != nil && failure == nil {
			failure = &Failure{Err: fmt.Errorf("worker %d: %w", i, err)}
		}
	}
	if failure == nil {
		if err := finalCheck(env); err != nil {
			failure = &Failure{Err: err}
		}
		res.Stats.addCounters(env.FS)
	}
	if failure != nil {
		failure.Ops = logs()
		return fail(failure)
	}
	return res
}

// concurrent crashes while the workers run and checks.
func (cp *crashPoint) concurrent(ws []*worker, roots []string) {
	rng := newRand(cp.seed, 1)
	// The window from m0 to m1 retains the worlds sync points drop
	// (expectFrom).
	snapAll := func(retain bool) []*modelSnap {
		out := make([]*modelSnap, len(ws))
		for i, w := range ws {
			w.mu.Lock()
			if retain {
				w.m.setRetain(true)
			}
			out[i] = w.m.snapshot()
			if !retain {
				w.m.setRetain(false)
			}
			w.mu.Unlock()
		}
		return out
	}
	m0 := snapAll(true)
	var m MetaCrash
	commits, synced := cp.env.KV.Commits()
	if rng.IntN(2) == 0 && cp.env.canCrashRandom() {
		m = MetaCrash{Random: true, Percent: rng.IntN(101)}
	} else {
		// Commits made after Commits() was read are dropped: a valid crash.
		m = MetaCrash{UpTo: synced + rng.Uint64N(commits-synced+1)}
	}
	fate, fdesc := deviceFate(cp.seed, false)
	cp.desc = fmt.Sprintf("%v, %s, while ops ran", m, fdesc)
	img, err := cp.env.Crash(cp.seed, fate, m)
	if err != nil {
		snapAll(false)
		cp.err = fmt.Errorf("crashing: %w", err)
		return
	}
	// Let the ops in flight at the crash finish, so that the second
	// snapshot holds whatever they may have left.
	started := make([]int64, len(ws))
	for i, w := range ws {
		started[i] = w.started.Load()
	}
	for i, w := range ws {
		for w.done.Load() < started[i] {
			time.Sleep(20 * time.Microsecond)
		}
	}
	m1 := snapAll(false)
	exp := &expectation{files: map[sluice.Ino]*fileExpect{}, roots: roots, nsCands: map[string][]namespace{}, owner: owners(ws)}
	for i := range ws {
		for ino, fe := range expectFrom(m0[i], m1[i]) {
			exp.files[ino] = fe
		}
		var cands []namespace
		for _, s := range m1[i].nsLog[m0[i].nsBase:] {
			cands = append(cands, s.ns)
		}
		exp.nsCands[roots[i]] = cands
	}
	cp.check(img, exp)
}
