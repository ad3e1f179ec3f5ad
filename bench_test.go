package sluice

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/volume"
)

// Benchmarks on a real volume (directdev, O_DIRECT on the host disk). They
// need SLUICE_BENCH=1 (they write a 1 GiB file); `sluice bench` runs the
// full seed experiments.

func benchVolume(b *testing.B, pol Policy) (*FS, func()) {
	if os.Getenv("SLUICE_BENCH") == "" {
		b.Skip("set SLUICE_BENCH=1 to run benchmarks on a real volume")
	}
	dir := os.Getenv("SLUICE_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp/sluice-bench"
	}
	vol := filepath.Join(dir, "vol")
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
	bufs := sync.Pool{New: func() any { return device.AlignedBuf(4096) }}
	const blocks = (1 << 30) / 4096
	engine, err := runParallel(32, 3*time.Second, func(rng *rand.Rand) error {
		buf := bufs.Get().([]byte)
		defer bufs.Put(buf)
		_, err := f.ReadAt(buf, int64(rng.IntN(blocks))*4096)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	dev := fs.vol.Dev
	raw, err := runParallel(32, 3*time.Second, func(rng *rand.Rand) error {
		buf := bufs.Get().([]byte)
		defer bufs.Put(buf)
		return dev.ReadAt(buf, int64(rng.IntN(blocks))*4096)
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(engine, "engine_iops")
	b.ReportMetric(raw, "device_iops")
	b.ReportMetric(engine/raw, "ratio")
}
