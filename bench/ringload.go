package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/sys/rusage"
	"github.com/sluicefs/sluice/ring"
)

// The ring's workload drivers for the seed experiments that measure it:
// W3 (seed 002, hashed vs parallel punted direct writes) and W4 (seed
// 003, async buffered reads). W3 and W4 (and the ring benchmark tests)
// call them; they take an open file system and report one run each.

// prepareEngineFile makes path a file of size bytes (a multiple of
// 1 MiB) in fs, written once, sequentially, with 1 MiB O_DIRECT writes of
// pseudo-random data, then fsynced, so that every block is a written
// extent and nothing is cached. An existing file of exactly that size is
// kept as it is. prepareFile does the same for a host file.
func prepareEngineFile(fs *sluice.FS, path string, size int64) error {
	const chunk = 1 << 20
	if size <= 0 || size%chunk != 0 {
		return fmt.Errorf("bench: prepareEngineFile: size %d is not a positive multiple of 1 MiB", size)
	}
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if a, err := f.Stat(); err != nil {
		return err
	} else if a.Size == size {
		return nil
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	buf := device.AlignedBuf(chunk)
	rng := rand.New(rand.NewPCG(uint64(size), 3))
	for off := int64(0); off < size; off += chunk {
		fillRandom(buf, rng)
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
	}
	return f.Fsync()
}

// fillRandom fills buf (a multiple of 8 bytes long) from rng.
func fillRandom(buf []byte, rng *rand.Rand) {
	for i := 0; i+8 <= len(buf); i += 8 {
		v := rng.Uint64()
		for k := 0; k < 8; k++ {
			buf[i+k] = byte(v >> (8 * k))
		}
	}
}

// ringWriteOptions configures ringRandomWrites (workload W3).
type ringWriteOptions struct {
	// Submitters is the number of submitting goroutines (fio numjobs).
	// The default value is 8.
	Submitters int
	// Depth is the number of writes each submitter keeps in flight (fio
	// iodepth). The default value is 8.
	Depth int
	// BlockSize is the size of each write. The default value is 4096.
	BlockSize int
	// Duration is how long writes are submitted. The default value is 5s.
	Duration time.Duration
	// Inline lets each write try the inline, non-blocking attempt first.
	// The default value is false: every write is forced to the pool
	// (Options.ForceAsync, fio force_async=1), since W3 measures the
	// pool's per-inode hashing.
	Inline bool
	// RingPerSubmitter gives each submitter its own ring, and so its own
	// worker pool and hashing, as each fio job (each task) has its own
	// io-wq in the kernel: hashed writes then still run one per
	// submitter at once. The default value is false: the submitters share
	// one ring of Submitters*Depth entries, whose pool hashes all their
	// writes to the file into one chain.
	RingPerSubmitter bool
	// Workers is each ring's pool size. The default value is the writes
	// in flight per ring.
	Workers int
	// Seed seeds the offsets. The default value is 1.
	Seed uint64
}

func (o *ringWriteOptions) ensureDefaults() {
	setDefault(&o.Submitters, 8)
	setDefault(&o.Depth, 8)
	setDefault(&o.BlockSize, 4096)
	setDefault(&o.Duration, 5*time.Second)
	if o.RingPerSubmitter {
		setDefault(&o.Workers, o.Depth)
	}
	setDefault(&o.Workers, o.Submitters*o.Depth)
	setDefault(&o.Seed, 1)
}

// setDefault sets *p to def if it is the zero value.
func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// String renders the options on one line.
func (o ringWriteOptions) String() string {
	return fmt.Sprintf("submitters=%d depth=%d bs=%d duration=%v inline=%t ring_per_submitter=%t workers=%d seed=%d",
		o.Submitters, o.Depth, o.BlockSize, o.Duration, o.Inline, o.RingPerSubmitter, o.Workers, o.Seed)
}

// ringRate is what a ring workload run did, per operation.
type ringRate struct {
	// Ops is the number of operations completed; Elapsed the time from
	// the first submission to the last completion; IOPS their ratio.
	Ops     int64
	Elapsed time.Duration
	IOPS    float64
	// CPUPerOp is the process's user+system CPU time (getrusage) per
	// operation.
	CPUPerOp time.Duration
	// SwitchesPerOp is the process's context switches (voluntary and
	// involuntary, getrusage) per operation.
	SwitchesPerOp float64
}

// set fills r from ops operations done in elapsed with the process's
// use.
func (r *ringRate) set(ops int64, elapsed time.Duration, use rusage.Usage) {
	r.Ops, r.Elapsed = ops, elapsed
	r.IOPS = float64(ops) / elapsed.Seconds()
	if ops > 0 {
		r.CPUPerOp = use.CPU / time.Duration(ops)
		r.SwitchesPerOp = float64(use.Switches) / float64(ops)
	}
}

// ringWriteResult is one run of W3.
type ringWriteResult struct {
	// Options are the options run with, defaults applied.
	Options ringWriteOptions
	// Policy is the engine's policy.
	Policy string
	// Parallel says whether the file took parallel direct writes (so
	// the punts were not hashed).
	Parallel bool
	// Ops, Elapsed, IOPS, CPUPerOp and SwitchesPerOp count the writes.
	ringRate
	// MaxDeviceInFlight is the most device I/Os the engine had in flight.
	MaxDeviceInFlight int64
	// Ring sums the rings' counters (peaks are the largest ring's).
	Ring ring.Stats
}

// ringRandomWrites runs W3 (seed 002) on fs: Submitters goroutines keep
// Submitters*Depth BlockSize-sized O_DIRECT writes in flight at random
// aligned offsets of path, a file prepareEngineFile wrote, through one shared
// ring (or one ring each), for Duration. Whether the punted writes are
// hashed per inode depends on fs's policy (Policy.ParallelDirectWrites).
//
// With a shared ring each submitter reaps whatever completions it finds
// and submits one new write for each, so the writes in flight stay at
// Submitters*Depth whichever goroutine reaped them.
func ringRandomWrites(fs *sluice.FS, path string, o ringWriteOptions) (ringWriteResult, error) {
	o.ensureDefaults()
	res := ringWriteResult{Options: o, Policy: fs.Policy().String()}
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		return res, err
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		return res, err
	}
	blocks := a.Size / int64(o.BlockSize)
	if blocks < 1 {
		return res, fmt.Errorf("bench: ringRandomWrites: %s is smaller than one block", path)
	}
	res.Parallel = f.ParallelDirectWrites()

	nrings := 1
	if o.RingPerSubmitter {
		nrings = o.Submitters
	}
	perRing := o.Submitters * o.Depth / nrings
	rings := make([]*ring.Ring, nrings)
	ropts := ring.Options{ForceAsync: !o.Inline, Workers: o.Workers}
	for i := range rings {
		if rings[i], err = ring.New(perRing, &ropts); err != nil {
			return res, err
		}
	}
	defer func() {
		for _, r := range rings {
			r.Close()
		}
	}()
	// One buffer per write in flight, found by the tag; the content does
	// not matter.
	bufs := make([][]byte, o.Submitters*o.Depth)
	for i := range bufs {
		bufs[i] = device.AlignedBuf(o.BlockSize)
		bufs[i][0] = byte(i)
	}
	fs.ResetCounters()

	var ops atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var failed atomic.Bool
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		failed.Store(true)
	}
	// outstanding counts the writes in flight on each ring; a submitter
	// of a shared ring stops reaping when it reaches zero.
	outstanding := make([]atomic.Int64, nrings)
	// drained ends the reapers' waits once every write has completed.
	drained, allDone := context.WithCancel(context.Background())
	defer allDone()
	var ringsDone atomic.Int64
	deadline := time.Now().Add(o.Duration)
	ru0 := rusage.Self()
	start := time.Now()
	var wg sync.WaitGroup
	for s := 0; s < o.Submitters; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ri := 0
			if o.RingPerSubmitter {
				ri = s
			}
			r := rings[ri]
			rng := rand.New(rand.NewPCG(o.Seed, uint64(s)))
			submit := func(slot int) bool {
				off := rng.Int64N(blocks) * int64(o.BlockSize)
				outstanding[ri].Add(1)
				if err := r.Write(f, bufs[slot], off, 0, uint64(slot)); err != nil {
					outstanding[ri].Add(-1)
					fail(err)
					return false
				}
				return true
			}
			for d := 0; d < o.Depth; d++ {
				if !submit(s*o.Depth + d) {
					return
				}
			}
			cqes := make([]ring.CQE, o.Depth)
			for outstanding[ri].Load() > 0 {
				n, err := r.Wait(drained, 1, cqes)
				if err != nil && drained.Err() == nil {
					fail(err)
					return
				}
				for _, c := range cqes[:n] {
					if c.Err != nil {
						fail(c.Err)
					} else {
						ops.Add(1)
					}
					if !failed.Load() && time.Now().Before(deadline) {
						if submit(int(c.Tag)) {
							// The new write holds the slot before the
							// old one leaves the count.
							outstanding[ri].Add(-1)
							continue
						}
					}
					if outstanding[ri].Add(-1) == 0 && ringsDone.Add(1) == int64(nrings) {
						// The last write of the last ring: the other
						// reapers stop waiting.
						allDone()
					}
				}
			}
		}()
	}
	wg.Wait()
	res.set(ops.Load(), time.Since(start), rusage.Self().Sub(ru0))
	if firstErr != nil {
		return res, firstErr
	}
	res.MaxDeviceInFlight = fs.Counters()["MaxDeviceInFlight"]
	for _, r := range rings {
		res.Ring = addRingStats(res.Ring, r.Stats())
	}
	return res, nil
}

// ringReadOptions configures ringRandomReads (workload W4).
type ringReadOptions struct {
	// Depth is the number of reads kept in flight by the one submitter.
	// The default value is 32.
	Depth int
	// BlockSize is the size of each read, at an aligned offset. The
	// default value is 4096.
	BlockSize int
	// Duration is how long reads are submitted, unless Ops is set. The
	// default value is 5s.
	Duration time.Duration
	// Ops, when set, stops after that many reads instead.
	Ops int64
	// Workers is the ring's pool size. The default value is Depth.
	Workers int
	// Seed seeds the offsets. The default value is 89 (the seed's fio
	// randseed).
	Seed uint64
}

func (o *ringReadOptions) ensureDefaults() {
	setDefault(&o.Depth, 32)
	setDefault(&o.BlockSize, 4096)
	setDefault(&o.Duration, 5*time.Second)
	setDefault(&o.Workers, o.Depth)
	setDefault(&o.Seed, 89)
}

// String renders the options on one line.
func (o ringReadOptions) String() string {
	return fmt.Sprintf("depth=%d bs=%d duration=%v ops=%d workers=%d seed=%d",
		o.Depth, o.BlockSize, o.Duration, o.Ops, o.Workers, o.Seed)
}

// ringReadResult is one run of W4.
type ringReadResult struct {
	// Options are the options run with, defaults applied.
	Options ringReadOptions
	// Policy is the engine's policy.
	Policy string
	// Ops, Elapsed, IOPS, CPUPerOp and SwitchesPerOp count the reads
	// (SwitchesPerOp is the seed's "context switch rate").
	ringRate
	// CacheHits counts reads served from the page cache by the first
	// inline attempt (no device read, retry or punt).
	CacheHits int64
	// AllocsPerOp is the process's heap allocations (runtime.MemStats
	// Mallocs, every goroutine's) per read over the run.
	AllocsPerOp float64
	// PeakGoroutines is the most goroutines of the process, sampled at
	// every reaped batch.
	PeakGoroutines int
	// PeakWorkersBlocked is the most pool workers blocked in the engine
	// at once (the ring's WorkersBlockedPeak).
	PeakWorkersBlocked int64
	// Ring holds the ring's counters.
	Ring ring.Stats
}

// ringRandomReads runs W4 (seed 003) on fs: one submitter keeps Depth
// buffered BlockSize reads in flight at random aligned offsets of path
// through one ring, for Duration (or Ops reads). For the seed's "cold"
// runs pass a freshly opened fs (an empty page cache), and a file much
// larger than the cache. Whether a read that meets a page under I/O arms a
// retry or punts to a blocking worker depends on fs's policy
// (Policy.AsyncBufferedReads).
func ringRandomReads(fs *sluice.FS, path string, o ringReadOptions) (ringReadResult, error) {
	o.ensureDefaults()
	res := ringReadResult{Options: o, Policy: fs.Policy().String()}
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		return res, err
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		return res, err
	}
	blocks := a.Size / int64(o.BlockSize)
	if blocks < 1 {
		return res, fmt.Errorf("bench: ringRandomReads: %s is smaller than one block", path)
	}
	r, err := ring.New(o.Depth, &ring.Options{Workers: o.Workers})
	if err != nil {
		return res, err
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 4))
	bufs := make([][]byte, o.Depth)
	for i := range bufs {
		bufs[i] = device.AlignedBuf(o.BlockSize)
	}
	cqes := make([]ring.CQE, o.Depth)
	deadline := time.Now().Add(o.Duration)
	submitted := int64(0)
	more := func() bool {
		if o.Ops > 0 {
			return submitted < o.Ops
		}
		return submitted&15 != 0 || time.Now().Before(deadline)
	}
	submit := func(slot int) error {
		submitted++
		return r.Read(f, bufs[slot], rng.Int64N(blocks)*int64(o.BlockSize), 0, uint64(slot))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs0 := ms.Mallocs
	ru0 := rusage.Self()
	start := time.Now()
	inflight := 0
	for slot := 0; slot < o.Depth && more(); slot++ {
		if err := submit(slot); err != nil {
			return res, err
		}
		inflight++
	}
	peak := runtime.NumGoroutine()
	for inflight > 0 {
		n, err := r.Wait(context.Background(), 1, cqes)
		if err != nil {
			return res, err
		}
		peak = max(peak, runtime.NumGoroutine())
		for _, c := range cqes[:n] {
			inflight--
			if c.Err != nil {
				return res, c.Err
			}
			res.Ops++
			if c.Flags == ring.CQEInline {
				res.CacheHits++
			}
			if more() {
				if err := submit(int(c.Tag)); err != nil {
					return res, err
				}
				inflight++
			}
		}
	}
	res.set(res.Ops, time.Since(start), rusage.Self().Sub(ru0))
	runtime.ReadMemStats(&ms)
	res.AllocsPerOp = float64(ms.Mallocs-mallocs0) / float64(max(res.Ops, 1))
	res.PeakGoroutines = peak
	res.Ring = r.Stats()
	res.PeakWorkersBlocked = res.Ring.WorkersBlockedPeak
	return res, nil
}

// addRingStats sums counts and takes the larger peaks.
func addRingStats(a, b ring.Stats) ring.Stats {
	return ring.Stats{
		Submitted: a.Submitted + b.Submitted, Completed: a.Completed + b.Completed,
		Inline: a.Inline + b.Inline, Queued: a.Queued + b.Queued,
		Punts: a.Punts + b.Punts, ForcedPunts: a.ForcedPunts + b.ForcedPunts,
		HashedPunts: a.HashedPunts + b.HashedPunts, HashedWaits: a.HashedWaits + b.HashedWaits,
		NoWaitEAGAIN: a.NoWaitEAGAIN + b.NoWaitEAGAIN,
		RetriesArmed: a.RetriesArmed + b.RetriesArmed, RetriesFired: a.RetriesFired + b.RetriesFired,
		Canceled: a.Canceled + b.Canceled, RingFull: a.RingFull + b.RingFull,
		Workers: a.Workers + b.Workers, WorkersPeak: max(a.WorkersPeak, b.WorkersPeak),
		WorkersBusy: a.WorkersBusy + b.WorkersBusy, WorkersBusyPeak: max(a.WorkersBusyPeak, b.WorkersBusyPeak),
		WorkersBlocked: a.WorkersBlocked + b.WorkersBlocked, WorkersBlockedPeak: max(a.WorkersBlockedPeak, b.WorkersBlockedPeak),
	}
}
