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
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/internal/harness/fio"
	"github.com/sluicefs/sluice/internal/sys/rusage"
	"github.com/sluicefs/sluice/volume"
)

// Benchmarks on a real volume (directdev, O_DIRECT on the host disk). They
// need SLUICE_BENCH=1 (they write a 1 GiB file); `sluice bench` runs the
// full seed experiments.

func benchVolume(b *testing.B, pol Policy) (*FS, func()) { return benchVolumeNamed(b, pol, "vol") }

// benchVolumeNamed is benchVolume on the volume SLUICE_BENCH_DIR/name.
func benchVolumeNamed(b *testing.B, pol Policy, name string) (*FS, func()) {
	return benchVolumeWith(b, pol, name, volume.MkfsOptions{})
}

// benchVolumeWith is benchVolumeNamed, the volume made with mo (2 GiB).
func benchVolumeWith(b *testing.B, pol Policy, name string, mo volume.MkfsOptions) (*FS, func()) {
	if os.Getenv("SLUICE_BENCH") == "" {
		b.Skip("set SLUICE_BENCH=1 to run benchmarks on a real volume")
	}
	dir := os.Getenv("SLUICE_BENCH_DIR")
	if dir == "" {
		dir = "/var/tmp/sluice-bench"
	}
	vol := filepath.Join(dir, name)
	if _, err := os.Stat(vol); err != nil {
		mo.Size = 2 << 30
		if err := volume.Mkfs(vol, mo); err != nil {
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

// The per-I/O cost of the direct paths (issue 16, item 3): W1's 512 B
// O_DIRECT reads and W2's 512 B and 4 KiB randrw, with b.N I/Os shared by
// g goroutines, each with one I/O in flight. Besides ns/op (wall time per
// I/O of the whole group) and allocs/op they report cpu-ns/op, the
// process's user+system CPU time per I/O (getrusage), and switches/op, its
// context switches per I/O: on a shared machine the CPU time is the figure
// to compare. "device" sub-benchmarks run the same I/Os straight on the
// data device (device.ReadAt and WriteAt on directdev), "pread" with
// pread(2)/pwrite(2) from each goroutine on the volume's image (fio's
// psync), so that the engine's share shows side by side in one run:
//
//	SLUICE_BENCH=1 go test -run '^$' -bench 'DirectIO' -benchtime 200000x -count 3 .

// BenchmarkDirectIO runs the direct-I/O cells.
func BenchmarkDirectIO(b *testing.B) {
	fs, done := benchVolume(b, Concurrent())
	defer done()
	f, err := fs.OpenFile("/data", O_RDWR|O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const fileBytes = 1 << 30
	devOff := benchDevOffsets(b, f, fileBytes)
	img, err := os.OpenFile(filepath.Join(fs.vol.Dir, "data"), os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer img.Close()
	type cell struct {
		name  string
		bs, g int
		rw    bool // randrw 50/50; otherwise sequential reads, each goroutine in its own region
	}
	cells := []cell{
		{"read512/g8", 512, 8, false}, {"read512/g32", 512, 32, false},
		{"randrw512/g32", 512, 32, true}, {"randrw4k/g32", 4096, 32, true},
	}
	for _, c := range cells {
		bufs := make([][]byte, c.g)
		for i := range bufs {
			bufs[i] = device.AlignedBuf(c.bs)
		}
		region := int64(fileBytes / c.g / c.bs * c.bs)
		cursor := make([]int64, c.g)
		// pos returns goroutine w's next file offset.
		pos := func(w int, rng *rand.Rand) (off int64, write bool) {
			if c.rw {
				return rng.Int64N(fileBytes/int64(c.bs)) * int64(c.bs), rng.IntN(2) == 0
			}
			off = int64(w)*region + cursor[w]
			cursor[w] += int64(c.bs)
			if cursor[w]+int64(c.bs) > region {
				cursor[w] = 0
			}
			return off, false
		}
		b.Run("engine/"+c.name, func(b *testing.B) {
			runOps(b, fs.vol.Dev, c.g, func(w int, rng *rand.Rand) error {
				off, write := pos(w, rng)
				var err error
				if write {
					_, err = f.WriteAt(bufs[w], off)
				} else {
					_, err = f.ReadAt(bufs[w], off)
				}
				return err
			})
		})
		dev := fs.vol.Dev
		b.Run("device/"+c.name, func(b *testing.B) {
			runOps(b, fs.vol.Dev, c.g, func(w int, rng *rand.Rand) error {
				off, write := pos(w, rng)
				d := devOff[off>>12] + off&4095
				if write {
					return device.WriteAt(dev, bufs[w], d)
				}
				return device.ReadAt(dev, bufs[w], d)
			})
		})
		b.Run("pread/"+c.name, func(b *testing.B) {
			runOps(b, fs.vol.Dev, c.g, func(w int, rng *rand.Rand) error {
				off, write := pos(w, rng)
				d := devOff[off>>12] + off&4095
				var err error
				if write {
					_, err = img.WriteAt(bufs[w], d)
				} else {
					_, err = img.ReadAt(bufs[w], d)
				}
				return err
			})
		})
	}
}

// benchDevOffsets returns the device byte offset of every 4 KiB block of
// f's first size bytes, which must all be mapped.
func benchDevOffsets(b *testing.B, f *File, size int64) []int64 {
	f.in.mu.Lock()
	defer f.in.mu.Unlock()
	m, err := f.in.extentsLocked()
	if err != nil {
		b.Fatal(err)
	}
	bs := f.fs.blockSize
	if bs != 4096 {
		b.Skipf("block size %d, want 4096", bs)
	}
	out := make([]int64, size/bs)
	for i := range out {
		segs := m.Lookup(uint64(i), 1, nil)
		if len(segs) != 1 || segs[0].Hole {
			b.Fatalf("block %d of the benchmark file is not mapped", i)
		}
		out[i] = int64(segs[0].DevBlock) * bs
	}
	return out
}

// runOps runs b.N calls of op shared by g goroutines and reports the
// process's CPU time and context switches per call.
func runOps(b *testing.B, dev device.Device, g int, op func(w int, rng *rand.Rand) error) {
	b.ReportAllocs()
	dd, _ := dev.(*directdev.Device)
	var d0 directdev.Stats
	if dd != nil {
		d0 = dd.Stats()
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	ru0 := rusage.Self()
	u0, s0 := cpuTimes()
	for w := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for next.Add(1) <= int64(b.N) {
				if err := op(w, rng); err != nil {
					firstErr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	use := rusage.Self().Sub(ru0)
	u1, s1 := cpuTimes()
	b.StopTimer()
	if e := firstErr.Load(); e != nil {
		b.Fatal(e)
	}
	b.ReportMetric(float64(use.CPU.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if dd != nil {
		d1 := dd.Stats()
		b.ReportMetric(float64(d1.Enters-d0.Enters)/float64(b.N), "enters/op")
		b.ReportMetric(float64(d1.Wakeups-d0.Wakeups)/float64(b.N), "wakeups/op")
		b.ReportMetric(float64(d1.Deferred-d0.Deferred)/float64(b.N), "deferred/op")
		if n := d1.Batches - d0.Batches; n > 0 {
			b.ReportMetric(float64(d1.SQEs-d0.SQEs)/float64(n), "sqes/batch")
		}
	}
	b.ReportMetric(float64(u1-u0)/float64(b.N), "usr-ns/op")
	b.ReportMetric(float64(s1-s0)/float64(b.N), "sys-ns/op")
	b.ReportMetric(float64(use.Switches)/float64(b.N), "switches/op")
}

// cpuTimes returns the process's user and system CPU time so far, in
// nanoseconds.
func cpuTimes() (usr, sys int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
}
