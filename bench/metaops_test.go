package bench

// Metadata operations and 4 KiB O_DIRECT IOPS on a volume whose metadata is
// in the embedded Pebble store and on one whose metadata is in a
// three-member etcd cluster started in this test process (etcdtest), side
// by side (issue 18, "Benchmark"):
//
//	go test -run '^$' -bench MetaOps -benchtime 1x ./bench/
//
// prints one table: create, stat, rename and unlink ops/s with 1, 4 and 16
// goroutines, each goroutine in a directory of its own ("own") and all in
// one directory ("shared"), then 4 KiB O_DIRECT random writes and reads of
// a fully written file at queue depth 16 (goroutines); each cell's median
// over SLUICE_METAOPS_REPS repetitions (3) on fresh volumes, the backends'
// order alternating, and the ratio etcd/pebble of the medians
// (SLUICE_METAOPS_DIO_ONLY=1: the O_DIRECT rows only). The etcd
// columns also give the etcd round trips per operation and their mean
// latency (etcdkv.Stats: reads and commits, not the lease's keep-alives). Each phase runs SLUICE_METAOPS_SECONDS (1 s) or
// until it runs out of files. etcdtest's members do not fsync
// (UnsafeNoFsync): etcd's cost here is raft's round trips and CPU.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
	"github.com/sluicefs/sluice/volume"
)

// metaCluster is started by the first test or benchmark that asks for it,
// with the limits sluice volumes need.
var metaCluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

func TestMain(m *testing.M) {
	code := m.Run()
	metaCluster.Close()
	os.Exit(code)
}

var metaPrefixSeq atomic.Int64

// metaVol is an open engine on a fresh volume; kv is its etcd KV (nil on
// Pebble).
type metaVol struct {
	fs *sluice.FS
	kv *etcdkv.KV
}

// openMetaVol formats a fresh 1 GiB volume under dir, its metadata in
// Pebble or (backend "etcd") in the shared cluster under a prefix of its
// own, and opens the engine on it with opts.
func openMetaVol(tb testing.TB, backend, dir string, opts *sluice.Options) *metaVol {
	tb.Helper()
	vdir := filepath.Join(dir, "vol")
	mo := volume.MkfsOptions{Size: 1 << 30}
	if backend == "etcd" {
		url := metaCluster.Get(tb).URL(fmt.Sprintf("bench/metaops/%d-%d", os.Getpid(), metaPrefixSeq.Add(1)))
		mo.Etcd = &volume.EtcdOptions{URL: url}
		mo.Data = filepath.Join(dir, "data.img")
	}
	if err := volume.Mkfs(vdir, mo); err != nil {
		tb.Fatalf("mkfs %s: %v", backend, err)
	}
	v, err := volume.Open(vdir, volume.OpenOptions{})
	if err != nil {
		tb.Fatalf("open %s: %v", backend, err)
	}
	fs, err := sluice.OpenVolume(v, opts)
	if err != nil {
		v.Close()
		tb.Fatalf("engine on %s: %v", backend, err)
	}
	kv, _ := v.KV.(*etcdkv.KV)
	tb.Cleanup(func() {
		if err := fs.Close(); err != nil {
			tb.Errorf("close %s: %v", backend, err)
		}
		if err := v.Close(); err != nil {
			tb.Errorf("close %s volume: %v", backend, err)
		}
	})
	return &metaVol{fs: fs, kv: kv}
}

// etcdStats returns the KV's counters (zero on Pebble).
func (m *metaVol) etcdStats() etcdkv.Stats {
	if m.kv == nil {
		return etcdkv.Stats{}
	}
	return m.kv.Stats()
}

// metaResult is one phase of one cell: ops/s, and on etcd the round trips
// per operation and their mean latency.
type metaResult struct {
	opsPerSec, rtPerOp, rtMeanMs float64
}

// metaTrips returns the round trips that read keys or sent commits: all
// but the lease's.
func metaTrips(s etcdkv.Stats) uint64 { return s.Reads + s.CommitRequests }

func result(ops int64, d time.Duration, before, after etcdkv.Stats) metaResult {
	r := metaResult{opsPerSec: float64(ops) / d.Seconds()}
	if n := metaTrips(after) - metaTrips(before); n > 0 {
		r.rtPerOp = float64(n) / float64(max(ops, 1))
		r.rtMeanMs = float64(after.LatencySum-before.LatencySum) / float64(n) / 1e6
	}
	return r
}

// runPhase runs op(g, i) for i = 0, 1, ... on n goroutines g until dur has
// passed or op says it ran out (false), and returns the operations done
// and the time taken.
func runPhase(tb testing.TB, n int, dur time.Duration, op func(g, i int) (bool, error)) (int64, time.Duration) {
	var (
		done  atomic.Int64
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	deadline := start.Add(dur)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				more, err := op(g, i)
				if err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
				if !more {
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
	return done.Load(), time.Since(start)
}

// metaCell runs create, stat, rename and unlink with n goroutines under a
// fresh directory top: each goroutine in top/g<i> (shared false) or all in
// top (true).
func metaCell(tb testing.TB, m *metaVol, top string, n int, shared bool, dur time.Duration) map[string]metaResult {
	fs := m.fs
	if err := fs.Mkdir(top, 0o755); err != nil {
		tb.Fatal(err)
	}
	dirOf := func(g int) string { return top }
	if !shared {
		dirOf = func(g int) string { return fmt.Sprintf("%s/g%d", top, g) }
		for g := range n {
			if err := fs.Mkdir(dirOf(g), 0o755); err != nil {
				tb.Fatal(err)
			}
		}
	}
	name := func(g, i int) string { return fmt.Sprintf("%s/g%d-f%d", dirOf(g), g, i) }
	renamed := func(g, i int) string { return name(g, i) + ".r" }
	out := make(map[string]metaResult)
	created := make([]int, n)
	const maxFiles = 1 << 20
	before := m.etcdStats()
	ops, d := runPhase(tb, n, dur, func(g, i int) (bool, error) {
		if i == maxFiles {
			return false, nil
		}
		f, err := fs.OpenFile(name(g, i), sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
		if err != nil {
			return false, err
		}
		created[g] = i + 1
		return true, f.Close()
	})
	out["create"] = result(ops, d, before, m.etcdStats())

	before = m.etcdStats()
	ops, d = runPhase(tb, n, dur, func(g, i int) (bool, error) {
		if created[g] == 0 {
			return false, nil
		}
		_, err := fs.Stat(name(g, i%created[g]))
		return true, err
	})
	out["stat"] = result(ops, d, before, m.etcdStats())

	moved := make([]int, n)
	before = m.etcdStats()
	ops, d = runPhase(tb, n, dur, func(g, i int) (bool, error) {
		if i == created[g] {
			return false, nil
		}
		moved[g] = i + 1
		return true, fs.Rename(name(g, i), renamed(g, i), 0)
	})
	out["rename"] = result(ops, d, before, m.etcdStats())

	before = m.etcdStats()
	ops, d = runPhase(tb, n, dur, func(g, i int) (bool, error) {
		switch {
		case i == created[g]:
			return false, nil
		case i < moved[g]:
			return true, fs.Unlink(renamed(g, i))
		}
		return true, fs.Unlink(name(g, i))
	})
	out["unlink"] = result(ops, d, before, m.etcdStats())
	return out
}

const (
	dioFileBytes = 64 << 20
	dioBlock     = 4096
	dioDepth     = 16
)

// prepareDirectFile makes path a fully written dioFileBytes file
// (fallocated, then written with 1 MiB O_DIRECT writes and fsynced), so
// that the measured writes overwrite written blocks.
func prepareDirectFile(tb testing.TB, fs *sluice.FS, path string) {
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL|sluice.O_DIRECT, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Fallocate(0, 0, dioFileBytes); err != nil {
		tb.Fatal(err)
	}
	buf := device.AlignedBuf(1 << 20)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	for off := int64(0); off < dioFileBytes; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Fsync(); err != nil {
		tb.Fatal(err)
	}
}

// directIOPS runs dioDepth goroutines of 4 KiB O_DIRECT random writes (or
// reads) of path for dur.
func directIOPS(tb testing.TB, m *metaVol, path string, write bool, dur time.Duration) metaResult {
	f, err := m.fs.OpenFile(path, sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	bufs := make([][]byte, dioDepth)
	rngs := make([]*rand.Rand, dioDepth)
	for g := range bufs {
		bufs[g] = device.AlignedBuf(dioBlock)
		rngs[g] = rand.New(rand.NewPCG(uint64(g)+1, 7))
	}
	before := m.etcdStats()
	ops, d := runPhase(tb, dioDepth, dur, func(g, i int) (bool, error) {
		off := int64(rngs[g].IntN(dioFileBytes/dioBlock)) * dioBlock
		var err error
		if write {
			_, err = f.WriteAt(bufs[g], off)
		} else {
			_, err = f.ReadAt(bufs[g], off)
		}
		return true, err
	})
	r := result(ops, d, before, m.etcdStats())
	r.rtPerOp = float64(metaTrips(m.etcdStats()) - metaTrips(before)) // round trips in the phase, not per op
	return r
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkMetaOps prints the table described at the top of the file. It
// runs the whole matrix once, whatever b.N.
func BenchmarkMetaOps(b *testing.B) {
	reps := envInt("SLUICE_METAOPS_REPS", 3)
	dioOnly := os.Getenv("SLUICE_METAOPS_DIO_ONLY") != ""
	dur := time.Duration(envInt("SLUICE_METAOPS_MS", 1000)) * time.Millisecond
	backends := []string{"pebble", "etcd"}
	// samples[backend][row] holds one result per repetition.
	samples := map[string]map[string][]metaResult{"pebble": {}, "etcd": {}}
	var rows []string
	seen := map[string]bool{}
	add := func(backend, row string, r metaResult) {
		if !seen[row] {
			seen[row] = true
			rows = append(rows, row)
		}
		samples[backend][row] = append(samples[backend][row], r)
	}
	for rep := range reps {
		order := backends
		if rep%2 == 1 {
			order = []string{"etcd", "pebble"}
		}
		for _, backend := range order {
			b.Run(fmt.Sprintf("%s-%d", backend, rep), func(b *testing.B) {
				m := openMetaVol(b, backend, b.TempDir(), nil)
				for _, shared := range []bool{false, true} {
					if dioOnly {
						break
					}
					layout := "own"
					if shared {
						layout = "shared"
					}
					for _, n := range []int{1, 4, 16} {
						res := metaCell(b, m, fmt.Sprintf("/%s-%d", layout, n), n, shared, dur)
						for _, op := range []string{"create", "stat", "rename", "unlink"} {
							add(backend, fmt.Sprintf("%-6s %-6s %2d", op, layout, n), res[op])
						}
					}
				}
				prepareDirectFile(b, m.fs, "/dio")
				add(backend, fmt.Sprintf("%-13s %2d", "dio-randwrite", dioDepth), directIOPS(b, m, "/dio", true, dur))
				add(backend, fmt.Sprintf("%-13s %2d", "dio-randread", dioDepth), directIOPS(b, m, "/dio", false, dur))
			})
		}
	}
	med := func(rs []metaResult, f func(metaResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nmetadata ops/s and 4 KiB O_DIRECT IOPS, median of %d (phase %v); etcd: 3 embedded members, no fsync\n", reps, dur)
	fmt.Fprintf(&sb, "%-20s %12s %12s %8s %10s %9s   %s\n", "op layout goroutines", "pebble/s", "etcd/s", "etcd/peb", "etcd rt/op", "rt mean", "etcd samples")
	for _, row := range rows {
		p, e := samples["pebble"][row], samples["etcd"][row]
		pm := med(p, func(r metaResult) float64 { return r.opsPerSec })
		em := med(e, func(r metaResult) float64 { return r.opsPerSec })
		var all []string
		for _, r := range e {
			all = append(all, fmt.Sprintf("%.0f", r.opsPerSec))
		}
		rtLabel := "%10.2f"
		if strings.HasPrefix(row, "dio") {
			rtLabel = "%7.0f rt" // round trips during the whole phase
		}
		fmt.Fprintf(&sb, "%-20s %12.0f %12.0f %8.3f "+rtLabel+" %7.2fms   %s\n", row, pm, em, em/pm,
			med(e, func(r metaResult) float64 { return r.rtPerOp }), med(e, func(r metaResult) float64 { return r.rtMeanMs }), strings.Join(all, " "))
	}
	fmt.Print(sb.String())
	for _, row := range rows {
		if strings.HasPrefix(row, "create own    16") || strings.HasPrefix(row, "stat   own    16") {
			key := strings.Fields(row)[0] + "16"
			b.ReportMetric(med(samples["etcd"][row], func(r metaResult) float64 { return r.opsPerSec }), "etcd-"+key+"/s")
		}
	}
}

// TestDirectOverwritesNoEtcd: on a volume whose metadata is in etcd,
// steady-state 4 KiB O_DIRECT overwrites (and reads) of written blocks
// make no etcd round trip: data I/O never waits for the metadata store.
// The background syncer is held off; the lease's keep-alives are not
// counted.
func TestDirectOverwritesNoEtcd(t *testing.T) {
	m := openMetaVol(t, "etcd", t.TempDir(), &sluice.Options{SyncInterval: time.Hour})
	prepareDirectFile(t, m.fs, "/dio")
	f, err := m.fs.OpenFile("/dio", sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := device.AlignedBuf(dioBlock)
	if _, err := f.WriteAt(buf, 0); err != nil { // warm-up
		t.Fatal(err)
	}
	before := m.kv.Stats()
	const writers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := device.AlignedBuf(dioBlock)
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range each {
				off := int64(rng.IntN(dioFileBytes/dioBlock)) * dioBlock
				if _, err := f.WriteAt(b, off); err != nil {
					errs <- err
					return
				}
				if _, err := f.ReadAt(b, off); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	after := m.kv.Stats()
	if r, c := after.Reads-before.Reads, after.CommitRequests-before.CommitRequests; r != 0 || c != 0 {
		t.Errorf("%d O_DIRECT overwrites and reads of written blocks made %d etcd reads and %d commits, want none", 2*writers*each, r, c)
	}
}

// TestCreateInNewDirNoRead: creating files in a directory this engine just
// made reads nothing from etcd (the engine tells the KV the new
// directory's entries are empty: meta.EmptyHinter), only commits; the
// names are there after a remount.
func TestCreateInNewDirNoRead(t *testing.T) {
	m := openMetaVol(t, "etcd", t.TempDir(), nil)
	if err := m.fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	before := m.kv.Stats()
	const n = 20
	for i := range n {
		f, err := m.fs.OpenFile(fmt.Sprintf("/d/f%d", i), sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	after := m.kv.Stats()
	if r := after.Reads - before.Reads; r != 0 {
		t.Errorf("%d creates in a new directory made %d etcd reads, want 0", n, r)
	}
	if c := after.CommitRequests - before.CommitRequests; c != n {
		t.Errorf("%d creates made %d commits, want %d", n, c, n)
	}
	// A name made now is refused as existing, from the cache.
	if _, err := m.fs.OpenFile("/d/f3", sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("O_EXCL create of an existing name: %v, want EEXIST", err)
	}
	ents, err := m.fs.ReadDir("/d")
	if err != nil || len(ents) != n {
		t.Fatalf("ReadDir: %d entries, %v; want %d", len(ents), err, n)
	}
}
