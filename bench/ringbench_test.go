package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/volume"
)

// The ring's seed experiments in detail (W3 and W4 as `sluice bench`
// runs them, plus the data device's io_uring counters and every run's
// IOPS), on a real volume (directdev, O_DIRECT on the host disk). They
// need SLUICE_BENCH=1; they make a 2 GiB volume and a 1 GiB raw image
// under $SLUICE_BENCH_DIR/ring-bench (default /var/tmp/sluice-ring-bench),
// once, and reuse them. Each configuration runs SLUICE_BENCH_ROUNDS times
// (default 3), the configurations interleaved round by round so that the
// host disk's drift hits them alike, and the tables show medians. Other
// knobs: SLUICE_BENCH_DURATION (each W3 run, default 5s),
// SLUICE_BENCH_W4_OPS (reads per W4 run, default 262144: the file's size),
// SLUICE_BENCH_CACHE (W4's page cache, default 256M), SLUICE_BENCH_DEPTHS
// (W4, default 1,2,4,8,16,32), SLUICE_BENCH_POLICY (W4, one policy). For
// example:
//
//	SLUICE_BENCH=1 go test -run 'TestBenchW3|TestBenchW4' -v -timeout 60m ./bench/

const benchFileSize = 1 << 30

type benchSetup struct {
	vol, image string
	duration   time.Duration
	rounds     int
}

func benchEnv(t *testing.T) benchSetup {
	if os.Getenv("SLUICE_BENCH") == "" {
		t.Skip("set SLUICE_BENCH=1 to run the seed benchmarks on a real volume")
	}
	dir := "/var/tmp/sluice-ring-bench"
	if d := os.Getenv("SLUICE_BENCH_DIR"); d != "" {
		dir = filepath.Join(d, "ring-bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := benchSetup{vol: filepath.Join(dir, "vol"), image: filepath.Join(dir, "raw.img"), duration: 5 * time.Second, rounds: 3}
	if d := os.Getenv("SLUICE_BENCH_DURATION"); d != "" {
		var err error
		if s.duration, err = time.ParseDuration(d); err != nil {
			t.Fatal(err)
		}
	}
	if r := os.Getenv("SLUICE_BENCH_ROUNDS"); r != "" {
		if _, err := fmt.Sscan(r, &s.rounds); err != nil || s.rounds < 1 {
			t.Fatalf("SLUICE_BENCH_ROUNDS=%q", r)
		}
	}
	if _, err := os.Stat(s.vol); err != nil {
		if err := volume.Mkfs(s.vol, volume.MkfsOptions{Size: 2 << 30, Prealloc: true}); err != nil {
			t.Fatal(err)
		}
	}
	e := benchOpen(t, s, sluice.Concurrent())
	if err := prepareEngineFile(e.fs, "/data", benchFileSize); err != nil {
		t.Fatal(err)
	}
	e.close()
	return s
}

// benchFS is an engine over a real volume, with its data device at hand
// for its counters.
type benchFS struct {
	t   *testing.T
	fs  *sluice.FS
	vol *volume.Volume
	dev *directdev.Device // nil if the volume's device is something else
}

func benchOpen(t *testing.T, s benchSetup, pol sluice.Policy) *benchFS {
	return benchOpenOpts(t, s, sluice.Options{Policy: &pol})
}

func benchOpenOpts(t *testing.T, s benchSetup, opts sluice.Options) *benchFS {
	v, err := volume.Open(s.vol, volume.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := sluice.OpenVolume(v, &opts)
	if err != nil {
		v.Close()
		t.Fatal(err)
	}
	dev, _ := v.Dev.(*directdev.Device)
	return &benchFS{t: t, fs: fs, vol: v, dev: dev}
}

func (b *benchFS) close() {
	if err := b.fs.Close(); err != nil {
		b.t.Fatal(err)
	}
	if err := b.vol.Close(); err != nil {
		b.t.Fatal(err)
	}
}

// devStats returns the data device's io_uring counters (zero without a
// directdev device).
func (b *benchFS) devStats() directdev.Stats {
	if b.dev == nil {
		return directdev.Stats{}
	}
	return b.dev.Stats()
}

// devPerOp returns io_uring_enter calls and owner wake-ups per I/O between
// two snapshots.
func devPerOp(a, b directdev.Stats, ops int64) (enters, wakeups float64) {
	if ops == 0 {
		return 0, 0
	}
	return float64(b.Enters-a.Enters) / float64(ops), float64(b.Wakeups-a.Wakeups) / float64(ops)
}

// runSeries collects one configuration's runs.
type runSeries struct {
	iops, cpu, switches, enters, wakeups, goroutines, blocked []float64
	last                                                      any
}

func (s *runSeries) add(iops float64, cpu time.Duration, switches, enters, wakeups float64, goroutines int, blocked int64, last any) {
	s.iops = append(s.iops, iops)
	s.cpu = append(s.cpu, float64(cpu))
	s.switches = append(s.switches, switches)
	s.enters = append(s.enters, enters)
	s.wakeups = append(s.wakeups, wakeups)
	s.goroutines = append(s.goroutines, float64(goroutines))
	s.blocked = append(s.blocked, float64(blocked))
	s.last = last
}

func (s *runSeries) cpuMedian() time.Duration {
	return time.Duration(median(s.cpu)).Round(10 * time.Nanosecond)
}

func maxOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

// TestBenchW3 is seed 002's experiment: 8 submitters, 4 KiB O_DIRECT
// random writes to one prewritten 1 GiB file, depth 8 each, every write
// forced to the pool; hashed (classic) against parallel (concurrent), with
// one ring (and pool) per submitter as each fio job has its own io-wq, and
// with one ring shared by all; and fio's io_uring engine with the same
// shape on a raw image of the same size on the same disk, as the
// reference.
func TestBenchW3(t *testing.T) {
	s := benchEnv(t)
	type cfg struct {
		name   string
		pol    sluice.Policy
		shared bool
	}
	cfgs := []cfg{
		{"hashed (classic), one shared ring", sluice.Classic(), true},
		{"parallel (concurrent), one shared ring", sluice.Concurrent(), true},
		{"hashed (classic), ring per submitter", sluice.Classic(), false},
		{"parallel (concurrent), ring per submitter", sluice.Concurrent(), false},
	}
	fio := "/usr/bin/fio"
	haveFio := false
	if st, err := os.Stat(fio); err == nil && !st.IsDir() {
		haveFio = true
		if err := prepareFile(context.Background(), s.image, benchFileSize, true); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]runSeries, len(cfgs))
	var fioRes runSeries
	for round := 0; round < s.rounds; round++ {
		if haveFio {
			r, err := fioRunner{path: fio}.run(context.Background(), sysJob{name: "w3", rw: "randwrite", path: s.image,
				direct: true, ioengine: "io_uring", bs: 4096, numjobs: 8, iodepth: 8, size: benchFileSize,
				runtime: s.duration, timeBased: true})
			if err != nil {
				t.Fatal(err)
			}
			m := r.metrics(false)
			fioRes.add(m["iops"], time.Duration(m["cpu_ns_per_io"]), m["ctx_switches_per_io"], 0, 0, 0, 0, r)
			t.Logf("round %d fio: %.0f IOPS (%s)", round, m["iops"], r.cmdline)
		}
		for i, c := range cfgs {
			b := benchOpen(t, s, c.pol)
			d0 := b.devStats()
			r, err := ringRandomWrites(b.fs, "/data", ringWriteOptions{Duration: s.duration, RingPerSubmitter: !c.shared})
			d1 := b.devStats()
			b.close()
			if err != nil {
				t.Fatal(err)
			}
			en, wk := devPerOp(d0, d1, r.Ops)
			res[i].add(r.IOPS, r.CPUPerOp, r.SwitchesPerOp, en, wk, 0, r.Ring.WorkersBlockedPeak, r)
			t.Logf("round %d %s: %.0f IOPS, %v/write; %v; ring: %v", round, c.name, r.IOPS, r.CPUPerOp, r.Options, r.Ring)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nW3: 8 submitters x depth 8, 4 KiB O_DIRECT random writes to one 1 GiB file, forced punting; median of %d runs of %v\n", s.rounds, s.duration)
	fmt.Fprintf(&b, "| run | IOPS (median) | IOPS (all runs) | CPU/write | ctx switches/write | max device in flight | peak blocked workers | hashed waits |\n|---|---|---|---|---|---|---|---|\n")
	all := func(xs []float64) string {
		var p []string
		for _, x := range xs {
			p = append(p, fmt.Sprintf("%.0f", x))
		}
		return strings.Join(p, ", ")
	}
	for i, c := range cfgs {
		r := res[i].last.(ringWriteResult)
		fmt.Fprintf(&b, "| %s | %.0f | %s | %v | %.2f | %d | %.0f | %d |\n", c.name, median(res[i].iops), all(res[i].iops),
			res[i].cpuMedian(), median(res[i].switches), r.MaxDeviceInFlight, maxOf(res[i].blocked), r.Ring.HashedWaits)
	}
	if haveFio {
		fmt.Fprintf(&b, "| fio --ioengine=io_uring --direct=1 --numjobs=8 --iodepth=8 --rw=randwrite --bs=4096, raw image | %.0f | %s | %v | %.2f | - | - | - |\n",
			median(fioRes.iops), all(fioRes.iops), fioRes.cpuMedian(), median(fioRes.switches))
	}
	fmt.Fprintf(&b, "\nparallel/hashed (medians): %.2fx (one shared ring), %.2fx (ring per submitter)",
		median(res[1].iops)/median(res[0].iops), median(res[3].iops)/median(res[2].iops))
	if haveFio {
		f := median(fioRes.iops)
		fmt.Fprintf(&b, "; parallel/fio: %.0f%% (one shared ring), %.0f%% (ring per submitter)",
			100*median(res[1].iops)/f, 100*median(res[3].iops)/f)
	}
	t.Log(b.String())
}

// TestBenchW4 is seed 003's experiment: random 4 KiB buffered reads of a
// cold 1 GiB file through one ring at depth 32 (and 1, 2, 4, 8, 16),
// classic (punt; a worker blocks on each page) against concurrent (retry
// armed on the page's unlock). Each run opens a fresh engine: an empty
// page cache, of SLUICE_BENCH_CACHE bytes (default the engine's default,
// 256 MiB, a quarter of the file, so that eviction runs as well).
func TestBenchW4(t *testing.T) {
	s := benchEnv(t)
	cache := int64(sluice.DefaultCacheSizeBytes)
	if c := os.Getenv("SLUICE_BENCH_CACHE"); c != "" {
		var err error
		if cache, err = volume.ParseSize(c); err != nil {
			t.Fatal(err)
		}
	}
	// Each run reads the file's size in 4 KiB reads (as the seed read 4 GiB
	// from its 4 GiB file), so both policies see the same mix of misses
	// and hits (about a fifth hit pages read earlier in the run).
	ops := int64(benchFileSize / 4096)
	if o := os.Getenv("SLUICE_BENCH_W4_OPS"); o != "" {
		if _, err := fmt.Sscan(o, &ops); err != nil || ops < 1 {
			t.Fatalf("SLUICE_BENCH_W4_OPS=%q", o)
		}
	}
	type key struct {
		depth int
		pol   string
	}
	depths, pols := benchDepths(t), benchPolicies(t)
	got := map[key]*runSeries{}
	for round := 0; round < s.rounds; round++ {
		for _, depth := range depths {
			for _, pol := range pols {
				b := benchOpenOpts(t, s, sluice.Options{Policy: &pol, CacheSizeBytes: cache})
				d0 := b.devStats()
				r, err := ringRandomReads(b.fs, "/data", ringReadOptions{Depth: depth, Ops: ops})
				d1 := b.devStats()
				b.close()
				if err != nil {
					t.Fatal(err)
				}
				k := key{depth, pol.String()}
				if got[k] == nil {
					got[k] = &runSeries{}
				}
				en, wk := devPerOp(d0, d1, r.Ops)
				got[k].add(r.IOPS, r.CPUPerOp, r.SwitchesPerOp, en, wk, r.PeakGoroutines, r.PeakWorkersBlocked, r)
				t.Logf("round %d QD%d %s: %.0f IOPS, %v/read, %.2f switches/read, %.2f allocs/read, device depth %.1f, %.1f SQEs/batch; ring: %v", round, depth, pol, r.IOPS, r.CPUPerOp, r.SwitchesPerOp, r.AllocsPerOp,
					float64(d1.DepthNanos-d0.DepthNanos)/float64(r.Elapsed), float64(d1.SQEs-d0.SQEs)/float64(max(d1.Batches-d0.Batches, 1)), r.Ring)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nW4: %d random 4 KiB buffered reads of a cold 1 GiB file per run, one submitter, one ring, %d MiB page cache; median of %d runs\n", ops, cache>>20, s.rounds)
	fmt.Fprintf(&b, "| depth | policy | IOPS | CPU/read | ctx switches/read | io_uring_enter/read | owner wake-ups/read | peak goroutines | peak blocked workers | cache hits | retries armed | punts |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, depth := range depths {
		for _, pol := range pols {
			x := got[key{depth, pol.String()}]
			r := x.last.(ringReadResult)
			fmt.Fprintf(&b, "| %d | %s | %.0f | %v | %.2f | %.2f | %.2f | %.0f | %.0f | %.1f%% | %d | %d |\n", depth, pol, median(x.iops), x.cpuMedian(),
				median(x.switches), median(x.enters), median(x.wakeups), maxOf(x.goroutines), maxOf(x.blocked),
				100*float64(r.CacheHits)/float64(max(r.Ops, 1)), r.Ring.RetriesArmed, r.Ring.Punts)
		}
	}
	if len(pols) == 2 {
		fmt.Fprintf(&b, "\nconcurrent vs classic (medians):")
		for _, depth := range depths {
			c, k := got[key{depth, "concurrent"}], got[key{depth, "classic"}]
			fmt.Fprintf(&b, " QD%d: %+.0f%% CPU/read, %.2fx IOPS;", depth,
				100*(median(c.cpu)/median(k.cpu)-1), median(c.iops)/median(k.iops))
		}
	}
	t.Log(b.String())
}

// benchDepths returns SLUICE_BENCH_DEPTHS (comma-separated) or the seed's
// depths.
func benchDepths(t *testing.T) []int {
	env := os.Getenv("SLUICE_BENCH_DEPTHS")
	if env == "" {
		return []int{1, 2, 4, 8, 16, 32}
	}
	var out []int
	for _, f := range strings.Split(env, ",") {
		var d int
		if _, err := fmt.Sscan(f, &d); err != nil || d < 1 {
			t.Fatalf("SLUICE_BENCH_DEPTHS: bad depth %q", f)
		}
		out = append(out, d)
	}
	return out
}

// benchPolicies returns SLUICE_BENCH_POLICY (one policy) or classic and
// concurrent.
func benchPolicies(t *testing.T) []sluice.Policy {
	env := os.Getenv("SLUICE_BENCH_POLICY")
	if env == "" {
		return []sluice.Policy{sluice.Classic(), sluice.Concurrent()}
	}
	p, err := sluice.ParsePolicy(env)
	if err != nil {
		t.Fatal(err)
	}
	return []sluice.Policy{p}
}
