package directdev

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/harness/fio"
)

var (
	benchDir        = flag.String("directdev.benchdir", "/var/tmp/sluice-bench", "directory on a real disk for the 1 GiB benchmark image")
	benchFioRuntime = flag.Int("directdev.fioruntime", 5, "seconds of each fio reference run")
	benchPairs      = flag.Int("directdev.pairs", 10, "fio/directdev slice pairs of BenchmarkRandReadVsFio")
)

const (
	benchImageSize = 1 << 30
	benchBlock     = 4096
)

// benchImage returns the path of a 1 GiB image filled with pseudo-random
// data (so that every block is allocated and reads reach the disk), creating
// it on first use.
func benchImage(b *testing.B) string {
	b.Helper()
	path := filepath.Join(*benchDir, "directdev-bench-1g.img")
	if st, err := os.Stat(path); err == nil && st.Size() == benchImageSize {
		return path
	}
	if err := os.MkdirAll(*benchDir, 0o755); err != nil {
		b.Skipf("benchmark directory: %v", err)
	}
	b.Logf("creating %s", path)
	tmp := path + ".tmp"
	fd, err := unix.Open(tmp, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		b.Skipf("cannot create an O_DIRECT image in %s: %v", *benchDir, err)
	}
	defer unix.Close(fd)
	chunk := device.AlignedBuf(1 << 20)
	for off := int64(0); off < benchImageSize; off += int64(len(chunk)) {
		fill(chunk, 7, 7, uint64(off))
		if _, err := unix.Pwrite(fd, chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// fioResult is what the benchmarks take from a fio run.
type fioResult struct {
	IOPS float64
	// CPUPerOp is fio's user+system CPU time per I/O, in microseconds.
	CPUPerOp float64
}

// fioRef keeps the latest fio measurement per queue depth, so that each
// benchmark compares with fio runs made just before and just after it on
// the same image: the shared virtual disk this was written on varies by
// tens of percent from one second to the next.
var fioRef struct {
	sync.Mutex
	last map[int]fioResult
}

// runFio runs fio's io_uring engine on path at queue depth qd for
// -directdev.fioruntime seconds.
func runFio(b *testing.B, path string, qd int) fioResult {
	b.Helper()
	return runFioFor(b, path, qd, time.Duration(*benchFioRuntime)*time.Second)
}

// runFioFor runs fio for d.
func runFioFor(b *testing.B, path string, qd int, d time.Duration) fioResult {
	b.Helper()
	if !fio.Available() {
		b.Skip("fio not installed: no reference to compare with")
	}
	r, err := fio.Run(context.Background(), fio.Job{Name: "x", Filename: path, IOEngine: "io_uring", Direct: true, RW: "randread",
		BS: benchBlock, IODepth: qd, TimeBased: true, Runtime: d})
	if err != nil {
		b.Fatal(err)
	}
	res := fioResult{IOPS: r.Read.IOPS}
	if r.Read.IOs > 0 {
		res.CPUPerOp = float64(r.CPU.Nanoseconds()) / 1e3 / float64(r.Read.IOs)
	}
	if d >= time.Second {
		b.Logf("%s: %.0f IOPS, %.2f cpu-us/op", r.Cmdline, res.IOPS, res.CPUPerOp)
	}
	return res
}

// fioBefore returns the latest fio result at depth qd, measuring it if
// there is none yet.
func fioBefore(b *testing.B, path string, qd int) fioResult {
	fioRef.Lock()
	defer fioRef.Unlock()
	if v, ok := fioRef.last[qd]; ok {
		return v
	}
	v := runFio(b, path, qd)
	if fioRef.last == nil {
		fioRef.last = map[int]fioResult{}
	}
	fioRef.last[qd] = v
	return v
}

// fioAfter measures fio at depth qd again and records it as the latest.
func fioAfter(b *testing.B, path string, qd int) fioResult {
	v := runFio(b, path, qd)
	fioRef.Lock()
	fioRef.last[qd] = v
	fioRef.Unlock()
	return v
}

// BenchmarkRandRead measures 4 KiB O_DIRECT random reads on a 1 GiB image at
// queue depth 1 and 32 on both backends, and compares with fio's io_uring
// engine at the same depth on the same image: fio-ratio is this
// benchmark's IOPS over the mean of the fio runs just before and just after
// it (fio runs after every timed run of at least half a second, so the
// reported, final run is always bracketed).
//
//   - sync: qd goroutines, each calling ReadAt in a loop (how a file system
//     with many concurrent callers drives the device);
//   - async: one goroutine keeps qd requests in flight with Submit, each
//     completion submitting the next (how fio drives it).
//
// The image is -directdev.benchdir/directdev-bench-1g.img, created on first
// use. The benchmark skips when fio is not installed.
func BenchmarkRandRead(b *testing.B) {
	if !fio.Available() {
		b.Skip("fio not installed: no reference to compare with")
	}
	path := benchImage(b)
	for _, be := range backends {
		for _, qd := range []int{1, 32} {
			for _, mode := range []string{"sync", "async"} {
				if qd == 1 && mode == "async" {
					continue // the same as sync at depth 1
				}
				b.Run(fmt.Sprintf("%s/qd=%d/%s", be, qd, mode), func(b *testing.B) {
					b.ReportAllocs()
					before := fioBefore(b, path, qd)
					d, err := Open(path, Options{Backend: be, ReadOnly: true})
					if be == Uring && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)) {
						b.Skipf("io_uring unavailable: %v", err)
					}
					if err != nil {
						b.Fatal(err)
					}
					defer d.Close()
					stats := d.Stats()
					var ru0, ru1 unix.Rusage
					unix.Getrusage(unix.RUSAGE_SELF, &ru0)
					b.ResetTimer()
					start := time.Now()
					if mode == "sync" {
						benchSync(b, d, qd)
					} else {
						benchAsync(b, d, qd)
					}
					elapsed := time.Since(start)
					b.StopTimer()
					unix.Getrusage(unix.RUSAGE_SELF, &ru1)
					iops := float64(b.N) / elapsed.Seconds()
					b.ReportMetric(iops, "IOPS")
					cpu := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano() + ru1.Stime.Nano() - ru0.Stime.Nano())
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-us/op")
					if be == Uring {
						s := d.Stats()
						if reqs := s.Requests - stats.Requests; reqs > 0 {
							b.ReportMetric(float64(s.Enters-stats.Enters)/float64(reqs), "enters/op")
							b.ReportMetric(float64(s.DepthNanos-stats.DepthNanos)/float64(elapsed.Nanoseconds()), "mean-qd")
						}
					}
					ref := before
					if elapsed >= 500*time.Millisecond {
						after := fioAfter(b, path, qd)
						ref = fioResult{IOPS: (before.IOPS + after.IOPS) / 2, CPUPerOp: (before.CPUPerOp + after.CPUPerOp) / 2}
					}
					b.ReportMetric(ref.IOPS, "fio-IOPS")
					b.ReportMetric(ref.CPUPerOp, "fio-cpu-us/op")
					b.ReportMetric(iops/ref.IOPS, "fio-ratio")
				})
			}
		}
	}
}

func benchSync(b *testing.B, d *Device, qd int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	blocks := d.Size() / benchBlock
	for g := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			buf := device.AlignedBuf(benchBlock)
			for next.Add(1) <= int64(b.N) {
				if err := device.ReadAt(d, buf, rng.Int64N(blocks)*benchBlock); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func benchAsync(b *testing.B, d *Device, qd int) {
	var issued, completed atomic.Int64
	done := make(chan struct{})
	blocks := d.Size() / benchBlock
	var fail atomic.Bool
	reqs := make([]device.Request, qd)
	for i := range reqs {
		r := &reqs[i]
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		r.Op = device.OpRead
		r.Buf = device.AlignedBuf(benchBlock)
		r.Done = func(r *device.Request, err error) {
			if err != nil && fail.CompareAndSwap(false, true) {
				b.Error(err)
			}
			if completed.Add(1) == int64(b.N) {
				close(done)
			}
			if issued.Add(1) <= int64(b.N) {
				r.Off = rng.Int64N(blocks) * benchBlock
				if err := d.Submit(r); err != nil {
					b.Error(err)
				}
			}
		}
		if issued.Add(1) <= int64(b.N) {
			r.Off = rng.Int64N(blocks) * benchBlock
			if err := d.Submit(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	<-done
}

// BenchmarkRandReadVsFio compares with fio at queue depth 32 in a way that
// survives a noisy shared disk: it alternates one-second slices of fio and
// of the io_uring backend (-directdev.pairs pairs, the order flipping every
// pair) and reports the median and range of the per-pair IOPS ratios. The
// fio/fio case pairs fio with itself and shows the noise floor. It runs once
// whatever b.N is.
func BenchmarkRandReadVsFio(b *testing.B) {
	if !fio.Available() {
		b.Skip("fio not installed: no reference to compare with")
	}
	path := benchImage(b)
	const qd, slice = 32, time.Second
	for _, mode := range []string{"fio", "sync", "async"} {
		b.Run(mode, func(b *testing.B) {
			ours := func() float64 {
				if mode == "fio" {
					return runFioFor(b, path, qd, slice).IOPS
				}
				d, err := Open(path, Options{Backend: Uring, ReadOnly: true})
				if err != nil {
					b.Skip(err)
				}
				defer d.Close()
				start := time.Now()
				n := runFor(d, qd, mode, slice)
				el := time.Since(start)
				st := d.Stats()
				b.Logf("  %s: mean queue depth %.1f, %.1f requests per io_uring_enter", mode,
					float64(st.DepthNanos)/float64(el.Nanoseconds()), float64(st.Requests)/float64(st.Enters))
				return float64(n) / el.Seconds()
			}
			var ratios []float64
			for i := range *benchPairs {
				var f, o float64
				if i%2 == 0 {
					f, o = runFioFor(b, path, qd, slice).IOPS, ours()
				} else {
					o, f = ours(), runFioFor(b, path, qd, slice).IOPS
				}
				ratios = append(ratios, o/f)
				b.Logf("pair %d: %s %.0f IOPS, fio %.0f IOPS, ratio %.3f", i, mode, o, f, o/f)
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "median-fio-ratio")
			b.ReportMetric(ratios[0], "min-ratio")
			b.ReportMetric(ratios[len(ratios)-1], "max-ratio")
		})
	}
}

// runFor reads at random with qd requests in flight for dur, as benchSync
// (mode "sync") or benchAsync ("async") do, and returns the number of reads
// completed.
func runFor(d *Device, qd int, mode string, dur time.Duration) int64 {
	var count atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	blocks := d.Size() / benchBlock
	seed := uint64(time.Now().UnixNano())
	if mode == "sync" {
		for g := range qd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), seed))
				buf := device.AlignedBuf(benchBlock)
				for !stop.Load() {
					if err := device.ReadAt(d, buf, rng.Int64N(blocks)*benchBlock); err != nil {
						panic(err)
					}
					count.Add(1)
				}
			}()
		}
	} else {
		reqs := make([]device.Request, qd)
		for i := range reqs {
			r := &reqs[i]
			rng := rand.New(rand.NewPCG(uint64(i), seed))
			r.Op, r.Buf = device.OpRead, device.AlignedBuf(benchBlock)
			r.Done = func(r *device.Request, err error) {
				if err != nil {
					panic(err)
				}
				count.Add(1)
				if stop.Load() {
					wg.Done()
					return
				}
				r.Off = rng.Int64N(blocks) * benchBlock
				if err := d.Submit(r); err != nil {
					panic(err)
				}
			}
			wg.Add(1)
			r.Off = rng.Int64N(blocks) * benchBlock
			if err := d.Submit(r); err != nil {
				panic(err)
			}
		}
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	return count.Load()
}
