package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/internal/sys/rusage"
	"github.com/sluicefs/sluice/volume"
)

// Engine policy labels. Seeds is the five seed optimisations without the
// two beyond them (A1's and Z1's middle column).
const (
	PolicyClassic    = "classic"
	PolicySeeds      = "seeds"
	PolicyConcurrent = "concurrent"
)

// enginePolicy is a policy with the label the report uses.
type enginePolicy struct {
	label string
	pol   sluice.Policy
}

var (
	polClassic    = enginePolicy{PolicyClassic, sluice.Classic()}
	polSeeds      = enginePolicy{PolicySeeds, sluice.Seeds()}
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
		"allocs_per_io":       r.AllocsPerOp,
	}
	return m, r.Options.String(), nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// freshEngineFile makes path an empty file (removing an old one, so that
// none of its blocks is reused), and with fallocate > 0 allocates that
// many bytes of it (mode 0: unwritten extents, the size set) and makes
// that durable, so that the cell starts with nothing to commit.
func freshEngineFile(fs *sluice.FS, path string, fallocate int64) error {
	if err := fs.Unlink(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if fallocate > 0 {
		if err = f.Fallocate(0, 0, fallocate); err == nil {
			err = f.Fsync()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendExclFrac is the share of A1's appends that took the I/O lock
// exclusive: direct (LockExclDirectWrite of DirectWrites) or buffered
// (LockExclBuffered of BufferedWrites), over the counter delta c.
func appendExclFrac(c sluice.CounterValues, direct bool) float64 {
	if direct {
		return exclFrac(c)
	}
	return perIO(c["LockExclBuffered"], c["BufferedWrites"])
}

// runAppends is A1 on the engine: n goroutines append bs-byte records
// to one fresh file at path, each through its own File opened
// O_WRONLY|O_APPEND (and O_DIRECT if direct, from an aligned buffer)
// with File.Write, as n processes appending with write(2) would; for
// warm, then for dur, measured, or until the records fill maxBytes.
// Then the file is checked (verifyRecords: every record once, whole) and
// removed; a failed check is the cell's error. Direct cells also report
// max_in_flight, the most direct I/Os in flight on the file at once over
// the cell (1 while appends are exclusive).
func runAppends(ctx context.Context, e *engineFS, path string, direct bool, n, bs int, maxBytes int64, warm, dur time.Duration) (map[string]float64, error) {
	if err := freshEngineFile(e.fs, path, 0); err != nil {
		return nil, err
	}
	defer e.fs.Unlink(path)
	flags := sluice.O_WRONLY | sluice.O_APPEND
	if direct {
		flags |= sluice.O_DIRECT
	}
	files := make([]*sluice.File, n)
	bufs := make([][]byte, n)
	for g := range files {
		f, err := e.fs.OpenFile(path, flags, 0)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
		files[g], bufs[g] = f, device.AlignedBuf(bs)
		fillRecordBody(bufs[g], g)
	}
	// seq[g] is appender g's count of records written; only g touches
	// it until measureLoop has returned.
	seq := make([]int64, n)
	maxRecs := maxBytes / int64(bs)
	var claimed atomic.Int64
	op := func(g int, _ *rand.Rand) (bool, int, error) {
		if claimed.Add(1) > maxRecs {
			return true, 0, errLoopDone
		}
		tagRecord(bufs[g], g, seq[g])
		m, err := files[g].Write(bufs[g])
		if err == nil && m != bs {
			err = fmt.Errorf("append of %d B wrote %d", bs, m)
		}
		if err != nil {
			return true, m, err
		}
		seq[g]++
		return true, m, nil
	}
	if direct {
		// Idle now (a direct cell leaves no writeback behind), so the
		// reset disturbs no gauge; it starts MaxDirectInFlightFile afresh.
		e.fs.ResetCounters()
	}
	// The lock counts cover the whole cell, warm-up included: read while
	// no append is in flight, their two counters agree.
	c0 := e.fs.Counters()
	l, err := measureLoop(ctx, n, warm, dur, 3, op, nil, nil)
	c1 := e.fs.Counters()
	if cerr := closeFiles(files); err == nil {
		err = cerr
	}
	if err == nil && l.ops() == 0 {
		err = fmt.Errorf("no append completed in the measured window")
	}
	if err != nil {
		return nil, err
	}
	m := l.metrics(false)
	c := counterDelta(c0, c1)
	m["excl_lock_frac"] = appendExclFrac(c, direct)
	var total int64
	for _, k := range seq {
		total += k
	}
	m["records"] = float64(total)
	if direct {
		m["max_in_flight"] = float64(c1["MaxDirectInFlightFile"])
	}
	if err := verifyEngineRecords(e.fs, path, direct, bs, seq); err != nil {
		return nil, err
	}
	return m, nil
}

// verifyEngineRecords runs verifyRecords on the engine's file at path,
// read the way it was written (O_DIRECT or through the page cache).
func verifyEngineRecords(fs *sluice.FS, path string, direct bool, bs int, counts []int64) error {
	flags := sluice.O_RDONLY
	if direct {
		flags |= sluice.O_DIRECT
	}
	f, err := fs.OpenFile(path, flags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		return err
	}
	return verifyRecords(f, a.Size, bs, counts)
}

// closeFiles closes every non-nil file and returns the first error.
func closeFiles(files []*sluice.File) error {
	var first error
	for _, f := range files {
		if f == nil {
			continue
		}
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// runFreshSubBlock is Z1 on the engine: a fresh file at path whose first
// size bytes are fallocated (mode 0) and never written, then n
// goroutines, each with one O_DIRECT File.WriteAt of bs bytes in flight
// (bs below the block size), each write into a block not written before
// (the blocks in a random order, at a random bs-aligned place in the
// block), so that every write lands in an unwritten extent and must zero
// the rest of its block; for warm, then for dur, measured, or until
// every block has been written. Afterwards a sample of the written
// blocks is read back: the written bytes there, zeros around them. The
// file is removed at the end.
func runFreshSubBlock(ctx context.Context, e *engineFS, path string, size int64, bs, n int, warm, dur time.Duration, seed uint64) (map[string]float64, error) {
	fs := e.fs
	blockSize := fs.BlockSize()
	if bs >= blockSize || blockSize%bs != 0 {
		return nil, fmt.Errorf("Z1: %d B writes are not sub-block writes on %d B blocks", bs, blockSize)
	}
	if err := freshEngineFile(fs, path, size); err != nil {
		return nil, err
	}
	defer fs.Unlink(path)
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	blocks := size / int64(blockSize)
	order := freshBlockOrder(blocks, seed)
	// slot[i] is the bs-sized slot of block order[i] that write i wrote;
	// written by the goroutine that took i, read after measureLoop.
	slot := make([]uint8, blocks)
	perBlock := blockSize / bs
	bufs := make([][]byte, n)
	for g := range bufs {
		bufs[g] = device.AlignedBuf(bs)
		fillRecordBody(bufs[g], g)
	}
	var next atomic.Int64
	op := func(g int, rng *rand.Rand) (bool, int, error) {
		i := next.Add(1) - 1
		if i >= blocks {
			return true, 0, errLoopDone
		}
		s := rng.IntN(perBlock)
		slot[i] = uint8(s)
		tagRecord(bufs[g], int(order[i]), int64(s))
		m, err := f.WriteAt(bufs[g], int64(order[i])*int64(blockSize)+int64(s*bs))
		return true, m, err
	}
	fs.ResetCounters() // idle: a fresh engine, and the file's allocation synced
	m, c, l, err := measureDirect(ctx, e, n, warm, dur, seed, op, false)
	if err == nil && l.ops() == 0 {
		err = fmt.Errorf("no write completed in the measured window")
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	written := min(next.Load(), blocks)
	m["eagain_retries_per_write"] = perIO(c["UnalignedEAGAINRetries"], l.writes)
	m["max_in_flight"] = float64(fs.Counters()["MaxDirectInFlightFile"])
	m["converted_frac"] = float64(written) / float64(blocks)
	err = verifyFreshBlocks(f, order[:written], slot, blockSize, bs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// verifyFreshBlocks reads back up to 256 of Z1's written blocks, spread
// over the writes in order: each must hold its write (tagged with the
// block number and its slot) in its slot and zeros in the rest.
func verifyFreshBlocks(f *sluice.File, written []int32, slot []uint8, blockSize, bs int) error {
	buf := device.AlignedBuf(blockSize)
	step := max(1, len(written)/256)
	for i := 0; i < len(written); i += step {
		b := written[i]
		if _, err := f.ReadAt(buf, int64(b)*int64(blockSize)); err != nil {
			return fmt.Errorf("verify: reading block %d: %w", b, err)
		}
		s := int(slot[i])
		for k := 0; k < blockSize; k += bs {
			part := buf[k : k+bs]
			if k/bs == s {
				if g, seq, ok := readTag(part); !ok || g != int(b) || seq != int64(s) {
					return fmt.Errorf("verify: block %d: slot %d does not hold the write made there", b, s)
				}
				continue
			}
			for _, x := range part {
				if x != 0 {
					return fmt.Errorf("verify: block %d: slot %d, not written, is not zero", b, k/bs)
				}
			}
		}
	}
	return nil
}
