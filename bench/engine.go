package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/internal/sys/rusage"
	"github.com/sluicefs/sluice/volume"
)

// Engine policy labels.
const (
	PolicyClassic    = "classic"
	PolicyConcurrent = "concurrent"
)

// enginePolicy is a policy with the label the report uses.
type enginePolicy struct {
	label string
	pol   sluice.Policy
}

var (
	polClassic    = enginePolicy{PolicyClassic, sluice.Classic()}
	polConcurrent = enginePolicy{PolicyConcurrent, sluice.Concurrent()}
)

// without returns the concurrent policy with one seed's toggle off,
// labelled "concurrent-Field".
func without(field string) enginePolicy {
	p := sluice.Concurrent()
	switch field {
	case "SharedDirectReads":
		p.SharedDirectReads = false
	case "OptimisticUnalignedWrites":
		p.OptimisticUnalignedWrites = false
	case "ParallelDirectWrites":
		p.ParallelDirectWrites = false
	case "AsyncBufferedReads":
		p.AsyncBufferedReads = false
	case "SkipFullPageRMW":
		p.SkipFullPageRMW = false
	default:
		panic("bench: unknown policy field " + field)
	}
	return enginePolicy{PolicyConcurrent + "-" + field, p}
}

// engineVol is one engine volume and the benchmark file in it.
type engineVol struct {
	role      string
	dir       string
	file      string // path inside the volume
	fileBytes int64
	blockSize int
	ioUnit    int
	sizeBytes int64
	// cleanFile removes the file at the end (a user's volume).
	cleanFile bool
}

// ensureVolume makes a volume at dir with the geometry asked for, or,
// with reuse, keeps one already there with that geometry and at least
// that size.
func ensureVolume(dir string, size int64, blockSize, ioUnit int, reuse bool) error {
	if reuse {
		if v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true}); err == nil {
			ok := int(v.Header.BlockSize) == blockSize && int(v.Header.IOUnit) == ioUnit && int64(v.Header.DeviceBytes) >= size
			v.Close()
			if ok {
				return nil
			}
		}
	}
	return volume.Mkfs(dir, volume.MkfsOptions{Size: size, BlockSize: blockSize, IOUnit: ioUnit, Force: true})
}

// engineFS is an engine opened on a volume for one policy.
type engineFS struct {
	fs  *sluice.FS
	vol *volume.Volume
	// options is the file system's Options.String(); device the data
	// device's directdev.Options.String().
	options, device string
}

// open opens v's volume with policy pol: a fresh engine, so an empty page
// cache (the data device is O_DIRECT: the host's cache is not involved).
func (v *engineVol) open(pol sluice.Policy) (*engineFS, error) {
	vol, err := volume.Open(v.dir, volume.OpenOptions{})
	if err != nil {
		return nil, err
	}
	fs, err := sluice.OpenVolume(vol, &sluice.Options{Policy: &pol})
	if err != nil {
		vol.Close()
		return nil, err
	}
	e := &engineFS{fs: fs, vol: vol}
	o := fs.Options()
	e.options = o.String()
	if d, ok := vol.Dev.(*directdev.Device); ok {
		e.device = d.Options().String()
	}
	return e, nil
}

func (e *engineFS) close() error {
	err := e.fs.Close()
	if cerr := e.vol.Close(); err == nil {
		err = cerr
	}
	return err
}

// with opens the volume with the concurrent policy, runs fn on it and
// closes it, returning fn's error or else the close's.
func (v *engineVol) with(fn func(fs *sluice.FS) error) error {
	e, err := v.open(sluice.Concurrent())
	if err != nil {
		return err
	}
	err = fn(e.fs)
	if cerr := e.close(); err == nil {
		err = cerr
	}
	return err
}

// prepare makes the volume's benchmark file: fully written (O_DIRECT,
// then fsync), kept if it is already there with the right size.
func (v *engineVol) prepare() error {
	return v.with(func(fs *sluice.FS) error {
		if d := filepath.Dir(v.file); d != "/" {
			if err := fs.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
		}
		return prepareEngineFile(fs, v.file, v.fileBytes)
	})
}

// removeFile deletes the benchmark file (and its directory if empty).
func (v *engineVol) removeFile() error {
	return v.with(func(fs *sluice.FS) error {
		err := fs.Unlink(v.file)
		if d := filepath.Dir(v.file); d != "/" {
			fs.Rmdir(d)
		}
		return err
	})
}

func (v *engineVol) info() VolumeInfo {
	return VolumeInfo{Role: v.role, Path: v.dir, SizeBytes: v.sizeBytes, BlockSize: v.blockSize, IOUnit: v.ioUnit,
		File: v.file, FileBytes: v.fileBytes}
}

// counterDelta returns b - a for every counter.
func counterDelta(a, b sluice.CounterValues) sluice.CounterValues {
	d := sluice.CounterValues{}
	for k, v := range b {
		d[k] = v - a[k]
	}
	return d
}

// exclFrac is the share of direct I/Os that took the I/O lock exclusive.
func exclFrac(c sluice.CounterValues) float64 {
	excl := c["LockExclDirectRead"] + c["LockExclDirectWrite"] + c["LockExclUnaligned"]
	all := c["DirectReads"] + c["DirectWrites"]
	if all == 0 {
		return 0
	}
	return float64(excl) / float64(all)
}

// runSeqReads is W1 on the engine: n goroutines read f sequentially with
// O_DIRECT, bs at a time, each in its own 1/n of the file (wrapping at
// its end).
func runSeqReads(ctx context.Context, e *engineFS, f *sluice.File, size int64, bs, n int, warm, dur time.Duration) (map[string]float64, error) {
	region := size / int64(n) / int64(bs) * int64(bs)
	if region < int64(bs) {
		return nil, fmt.Errorf("file of %d bytes is too small for %d readers of %d B", size, n, bs)
	}
	bufs := make([][]byte, n)
	cursor := make([]int64, n)
	for i := range bufs {
		bufs[i] = device.AlignedBuf(bs)
	}
	op := func(g int, _ *rand.Rand) (bool, int, error) {
		m, err := f.ReadAt(bufs[g], int64(g)*region+cursor[g])
		cursor[g] += int64(bs)
		if cursor[g]+int64(bs) > region {
			cursor[g] = 0
		}
		return false, m, err
	}
	m, _, _, err := measureDirect(ctx, e, n, warm, dur, 1, op, false)
	return m, err
}

// measureDirect runs op from n goroutines (measureLoop) and adds to the
// loop's metrics the I/O lock figures of the engine's counters over the
// measured part. It also returns the counter delta and the loop's result.
func measureDirect(ctx context.Context, e *engineFS, n int, warm, dur time.Duration, seed uint64, op opFunc, rw bool) (map[string]float64, sluice.CounterValues, loopResult, error) {
	var c0, c1 sluice.CounterValues
	l, err := measureLoop(ctx, n, warm, dur, seed, op,
		func() { c0 = e.fs.Counters() }, func() { c1 = e.fs.Counters() })
	if err != nil {
		return nil, nil, l, err
	}
	m := l.metrics(rw)
	c := counterDelta(c0, c1)
	m["excl_lock_frac"] = exclFrac(c)
	m["drains_per_io"] = perIO(c["Drains"], l.ops())
	return m, c, l, nil
}

// runRandRW is W2 on the engine: n goroutines each keep one O_DIRECT
// I/O in flight at random bs-aligned offsets of f, half reads and half
// writes (fio randrw's default mix), so n I/Os are in flight in all.
func runRandRW(ctx context.Context, e *engineFS, f *sluice.File, size int64, bs, n int, warm, dur time.Duration) (map[string]float64, error) {
	blocks := size / int64(bs)
	rbufs, wbufs := make([][]byte, n), make([][]byte, n)
	for i := range rbufs {
		rbufs[i], wbufs[i] = device.AlignedBuf(bs), device.AlignedBuf(bs)
		for k := range wbufs[i] {
			wbufs[i][k] = byte(i ^ k)
		}
	}
	op := func(g int, rng *rand.Rand) (bool, int, error) {
		off := rng.Int64N(blocks) * int64(bs)
		if rng.IntN(2) == 0 {
			m, err := f.WriteAt(wbufs[g], off)
			return true, m, err
		}
		m, err := f.ReadAt(rbufs[g], off)
		return false, m, err
	}
	m, c, l, err := measureDirect(ctx, e, n, warm, dur, 2, op, true)
	if err != nil {
		return nil, err
	}
	m["eagain_retries_per_write"] = perIO(c["UnalignedEAGAINRetries"], l.writes)
	return m, nil
}

func perIO(n, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(n) / float64(ops)
}

// runOverwrite is W5 on the engine: a buffered sequential overwrite of
// the existing file from offset 0, bs at a time (O_SYNC if sync), until
// its end or dur, then an fsync; the time includes the fsync (as fio's
// end_fsync=1). e must be freshly opened, so the file is not cached.
func runOverwrite(ctx context.Context, e *engineFS, path string, size int64, bs int, sync bool, dur time.Duration) (map[string]float64, error) {
	flags := sluice.O_WRONLY
	if sync {
		flags |= sluice.O_SYNC
	}
	f, err := e.fs.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, bs)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	e.fs.ResetCounters()
	c0 := e.fs.Counters()
	ru0, t0 := rusage.Self(), time.Now()
	deadline := t0.Add(dur)
	var off, writes int64
	for off+int64(bs) <= size && time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := f.WriteAt(buf, off)
		if err != nil {
			return nil, err
		}
		off += int64(n)
		writes++
	}
	if err := f.Fsync(); err != nil {
		return nil, err
	}
	el := time.Since(t0)
	use := rusage.Self().Sub(ru0)
	c := counterDelta(c0, e.fs.Counters())
	m := map[string]float64{
		"mib_s":          float64(off) / el.Seconds() / (1 << 20),
		"iops":           float64(writes) / el.Seconds(),
		"bytes_written":  float64(off),
		"seconds":        el.Seconds(),
		"cache_reads":    float64(c["CacheReads"]),
		"rmw_unit_reads": float64(c["CacheRMWUnitReads"]),
		"device_reads":   float64(c["CacheReads"] + c["CacheRMWUnitReads"]),
		"reads_avoided":  float64(c["CacheReadsAvoided"]),
		"device_writes":  float64(c["DeviceWrites"]),
		"device_flushes": float64(c["DeviceFlushes"]),
	}
	if writes > 0 {
		m["cpu_ns_per_io"] = float64(use.CPU.Nanoseconds()) / float64(writes)
		m["device_reads_per_mib"] = m["device_reads"] / (float64(off) / (1 << 20))
		m["ctx_switches_per_io"] = float64(use.Switches) / float64(writes)
	}
	return m, nil
}

// runRingWrites is W3 on the engine, through ringRandomWrites: a
// warm-up run (discarded), then the measured one.
func runRingWrites(e *engineFS, path string, o ringWriteOptions, warm time.Duration) (map[string]float64, string, error) {
	if warm > 0 {
		w := o
		w.Duration = warm
		if _, err := ringRandomWrites(e.fs, path, w); err != nil {
			return nil, "", err
		}
	}
	r, err := ringRandomWrites(e.fs, path, o)
	if err != nil {
		return nil, "", err
	}
	m := map[string]float64{
		"iops":                 r.IOPS,
		"mib_s":                r.IOPS * float64(r.Options.BlockSize) / (1 << 20),
		"cpu_ns_per_io":        float64(r.CPUPerOp.Nanoseconds()),
		"ctx_switches_per_io":  r.SwitchesPerOp,
		"blocked_workers_max":  float64(r.Ring.WorkersBlockedPeak),
		"busy_workers_max":     float64(r.Ring.WorkersBusyPeak),
		"hashed_waits_per_io":  perIO(r.Ring.HashedWaits, r.Ops),
		"max_device_in_flight": float64(r.MaxDeviceInFlight),
		"parallel":             b2f(r.Parallel),
	}
	return m, r.Options.String(), nil
}

// runRingReads is W4 on the engine, through ringRandomReads, on a
// freshly opened engine (cold). baseGoroutines is the process's
// goroutine count before the engine was opened.
func runRingReads(e *engineFS, path string, o ringReadOptions, baseGoroutines int) (map[string]float64, string, error) {
	r, err := ringRandomReads(e.fs, path, o)
	if err != nil {
		return nil, "", err
	}
	m := map[string]float64{
		"iops":                r.IOPS,
		"mib_s":               r.IOPS * float64(r.Options.BlockSize) / (1 << 20),
		"cpu_ns_per_io":       float64(r.CPUPerOp.Nanoseconds()),
		"ctx_switches_per_io": r.SwitchesPerOp,
		"goroutines_max":      float64(r.PeakGoroutines),
		"goroutines_base":     float64(baseGoroutines),
		"blocked_workers_max": float64(r.PeakWorkersBlocked),
		"workers_max":         float64(r.Ring.WorkersPeak),
		"cache_hit_pct":       100 * perIO(r.CacheHits, r.Ops),
		"retries_armed":       float64(r.Ring.RetriesArmed),
		"punts_per_io":        perIO(r.Ring.Punts, r.Ops),
	}
	return m, r.Options.String(), nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
