package sluice

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/harness/fio"
	"github.com/sluicefs/sluice/volume"
)

// Benchmarks on a real volume (directdev, O_DIRECT on the host disk). They
// need SLUICE_BENCH=1 (they write a 1 GiB file); `sluice bench` runs the
// full seed experiments.

func benchVolume(b *testing.B, pol Policy) (*FS, func()) { return benchVolumeNamed(b, pol, "vol") }

// benchVolumeNamed is benchVolume on the volume SLUICE_BENCH_DIR/name.
func benchVolumeNamed(b *testing.B, pol Policy, name string) (*FS, func()) {
	if os.Getenv("SLUICE_BENCH") == "" {
		b.Skip("set SLUICE_BENCH=1 to run benchmarks on a real volume")
	}
	dir := os.Getenv("SLUICE_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp/sluice-bench"
	}
	vol := filepath.Join(dir, name)
	if _, err := os.Stat(vol); err != nil {
		if err := volume.Mkfs(vol, volume.MkfsOptions{Size: 2 << 30}); err != nil {
			b.Fatal(err)
		}
	}
	fs, err := Open(vol, &Options{Policy: &pol})
	if err != nil {
		b.Fatal(err)
	}
	f, err := fs.OpenFile("/data", O_RDWR|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if a, _ := f.Stat(); a.Size < 1<<30 {
		buf := pattern(1<<20, 1)
		for off := int64(0); off < 1<<30; off += 1 << 20 {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Fsync(); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	return fs, func() { fs.Close() }
}

// runParallel runs fn from g goroutines for about d and returns ops/s.
func runParallel(g int, d time.Duration, fn func(rng *rand.Rand) error) (float64, error) {
	var ops atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			for time.Now().Before(stop) {
				if err := fn(rng); err != nil {
					firstErr.Store(err)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		return 0, e.(error)
	}
	return float64(ops.Load()) / time.Since(start).Seconds(), nil
}

// BenchmarkRandRead4K32 compares 4 KiB O_DIRECT random reads by 32
// goroutines through the engine and straight from the data device.
func BenchmarkRandRead4K32(b *testing.B) {
	fs, done := benchVolume(b, Concurrent())
	defer done()
	f, err := fs.OpenFile("/data", O_RDONLY|O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bufs := sync.Pool{New: func() any { b := device.AlignedBuf(4096); return &b }}
	const blocks = (1 << 30) / 4096
	// The device reads go to the very blocks the file occupies (the image
	// is sparse: reading elsewhere would read host-file holes, which cost
	// no disk I/O).
	dev := fs.vol.Dev
	devOff := make([]int64, 0, blocks)
	f.in.mu.Lock()
	m, err := f.in.extentsLocked()
	if err != nil {
		f.in.mu.Unlock()
		b.Fatal(err)
	}
	for _, x := range m.Extents() {
		for i := uint64(0); i < x.Len && len(devOff) < blocks; i++ {
			devOff = append(devOff, int64(x.DevBlock+i)*4096)
		}
	}
	f.in.mu.Unlock()
	engineRead := func(rng *rand.Rand) error {
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		_, err := f.ReadAt(*buf, int64(rng.IntN(blocks))*4096)
		return err
	}
	deviceRead := func(rng *rand.Rand) error {
		buf := bufs.Get().(*[]byte)
		defer bufs.Put(buf)
		return device.ReadAt(dev, *buf, devOff[rng.IntN(len(devOff))])
	}
	// Alternate short slices so that machine noise hits both alike; report
	// medians.
	var eng, raw, ratio []float64
	for round := 0; round < 5; round++ {
		e, err := runParallel(32, time.Second, engineRead)
		if err != nil {
			b.Fatal(err)
		}
		r, err := runParallel(32, time.Second, deviceRead)
		if err != nil {
			b.Fatal(err)
		}
		eng, raw, ratio = append(eng, e), append(raw, r), append(ratio, e/r)
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(eng), "engine_iops")
	b.ReportMetric(med(raw), "device_iops")
	b.ReportMetric(med(ratio), "ratio")
}

// BenchmarkCreateFsync8 measures creates+fsync per second from 8
// goroutines, with group commit on and off, on a real volume.
func BenchmarkCreateFsync8(b *testing.B) {
	if os.Getenv("SLUICE_BENCH") == "" {
		b.Skip("set SLUICE_BENCH=1 to run benchmarks on a real volume")
	}
	dir := filepath.Join(b.TempDir(), "vol")
	if err := volume.Mkfs(dir, volume.MkfsOptions{Size: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	rates := map[bool][]float64{}
	for round := 0; round < 3; round++ {
		for _, group := range []bool{true, false} {
			fs, err := Open(dir, &Options{NoGroupCommit: !group})
			if err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			buf := pattern(4096, 1)
			rate, err := runParallel(8, 2*time.Second, func(*rand.Rand) error {
				n := seq.Add(1)
				f, err := fs.OpenFile("/f"+strconv.FormatInt(n, 10)+"-"+strconv.Itoa(round)+strconv.FormatBool(group), O_RDWR|O_CREAT|O_EXCL, 0o644)
				if err != nil {
					return err
				}
				if _, err := f.WriteAt(buf, 0); err != nil {
					return err
				}
				if err := f.Fsync(); err != nil {
					return err
				}
				return f.Close()
			})
			if err != nil {
				b.Fatal(err)
			}
			rates[group] = append(rates[group], rate)
			fs.Close()
		}
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	on, off := med(rates[true]), med(rates[false])
	b.ReportMetric(on, "group_commit_per_s")
	b.ReportMetric(off, "serial_per_s")
	b.ReportMetric(on/off, "ratio")
}

// BenchmarkBufferedRandRead4KQD1 measures cold random 4 KiB buffered reads
// by one goroutine (queue depth 1) through the engine's page cache, next to
// fio --rw=randread --direct=0 --ioengine=psync reading the same blocks
// straight from the volume's image file: both read the largest extent of
// the 1 GiB file (fio with --offset/--size on it, and --invalidate=1 so
// that it starts cold too). Reading the same blocks matters on a virtual
// disk: the host caches what was read or written recently, so another file
// would see another latency. The two alternate in slices; medians are
// reported.
func BenchmarkBufferedRandRead4KQD1(b *testing.B) {
	if !fio.Available() {
		b.Skip("fio not installed: no reference to compare with")
	}
	fs, done := benchVolume(b, Concurrent())
	dir := fs.vol.Dir
	f, err := fs.OpenFile("/data", O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	f.in.mu.Lock()
	m, err := f.in.extentsLocked()
	var big extmap.Extent
	if err == nil {
		for _, x := range m.Extents() {
			if x.Len > big.Len {
				big = x
			}
		}
	}
	f.in.mu.Unlock()
	f.Close()
	done()
	if err != nil {
		b.Fatal(err)
	}
	const bs = 4096
	const slice = 2 * time.Second
	seed := uint64(time.Now().UnixNano())
	engine := func() float64 {
		fs, err := Open(dir, nil) // a fresh Open: an empty page cache
		if err != nil {
			b.Fatal(err)
		}
		defer fs.Close()
		f, err := fs.OpenFile("/data", O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		seed++
		rng := rand.New(rand.NewPCG(seed, 1))
		rate, err := runParallel(1, slice, func(*rand.Rand) error {
			var buf [4096]byte
			_, err := f.ReadAt(buf[:], int64(big.FileBlock+rng.Uint64N(big.Len))*bs)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return rate
	}
	fioRate := func() float64 {
		seed++
		r, err := fio.Run(context.Background(), fio.Job{Name: "x", Filename: filepath.Join(dir, "data"),
			Offset: int64(big.DevBlock * bs), Size: int64(big.Len * bs), RandSeed: seed % 1000000,
			RW: "randread", Direct: false, IOEngine: "psync", BS: bs, IODepth: 1, Invalidate: true,
			TimeBased: true, Runtime: slice})
		if err != nil {
			b.Fatal(err)
		}
		return r.Read.IOPS
	}
	var eng, ref, ratio []float64
	for round := range 5 {
		var e, f float64
		if round%2 == 0 {
			e, f = engine(), fioRate()
		} else {
			f, e = fioRate(), engine()
		}
		eng, ref, ratio = append(eng, e), append(ref, f), append(ratio, e/f)
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(eng), "engine_iops")
	b.ReportMetric(med(ref), "fio_psync_iops")
	b.ReportMetric(med(ratio), "ratio")
	b.ReportMetric(float64(big.Len*bs>>20), "MiB_read_from")
}
