package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/internal/sys/rusage"
)

// loopResult is what measureLoop counted in its measured window.
type loopResult struct {
	reads, writes         int64
	readBytes, writeBytes int64
	elapsed               time.Duration
	use                   rusage.Usage // the process's CPU and context switches
}

func (l loopResult) ops() int64 { return l.reads + l.writes }

// metrics turns the window's counts into the common metrics: iops,
// read_iops and write_iops (when both kinds ran), mib_s, cpu_ns_per_io,
// ctx_switches_per_io.
func (l loopResult) metrics(both bool) map[string]float64 {
	s := l.elapsed.Seconds()
	m := map[string]float64{}
	if s <= 0 {
		return m
	}
	m["iops"] = float64(l.ops()) / s
	m["mib_s"] = float64(l.readBytes+l.writeBytes) / s / (1 << 20)
	if both {
		m["read_iops"] = float64(l.reads) / s
		m["write_iops"] = float64(l.writes) / s
		m["read_mib_s"] = float64(l.readBytes) / s / (1 << 20)
		m["write_mib_s"] = float64(l.writeBytes) / s / (1 << 20)
	}
	if n := l.ops(); n > 0 {
		m["cpu_ns_per_io"] = float64(l.use.CPU.Nanoseconds()) / float64(n)
		m["ctx_switches_per_io"] = float64(l.use.Switches) / float64(n)
	}
	return m
}

// opFunc does one I/O for goroutine g and says whether it wrote and how
// many bytes it moved.
type opFunc func(g int, rng *rand.Rand) (write bool, n int, err error)

// workerCount is one goroutine's counts, on its own cache lines.
type workerCount struct {
	reads, writes, rbytes, wbytes atomic.Int64
	_                             [32]byte
}

// measureLoop runs op from n goroutines: for warm (not measured), then
// for dur, measured: the I/Os completed in that window, its length and
// the process's CPU time in it. onMeasure, if set, runs as the window
// opens (to reset counters); onEnd as it closes, before the goroutines
// stop. The first error of any goroutine ends the run.
func measureLoop(ctx context.Context, n int, warm, dur time.Duration, seed uint64, op opFunc, onMeasure, onEnd func()) (loopResult, error) {
	counts := make([]workerCount, n)
	var stop atomic.Bool
	var errOnce sync.Once
	var firstErr error
	failed := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			c := &counts[g]
			for !stop.Load() {
				w, nb, err := op(g, rng)
				if err != nil {
					errOnce.Do(func() { firstErr = err; close(failed) })
					return
				}
				if w {
					c.writes.Add(1)
					c.wbytes.Add(int64(nb))
				} else {
					c.reads.Add(1)
					c.rbytes.Add(int64(nb))
				}
			}
		}()
	}
	sum := func() (l loopResult) {
		for i := range counts {
			c := &counts[i]
			l.reads += c.reads.Load()
			l.writes += c.writes.Load()
			l.readBytes += c.rbytes.Load()
			l.writeBytes += c.wbytes.Load()
		}
		return l
	}
	finish := func(err error) (loopResult, error) {
		stop.Store(true)
		wg.Wait()
		if firstErr != nil {
			return loopResult{}, firstErr
		}
		return loopResult{}, err
	}
	if err := sleepCtx(ctx, warm, failed); err != nil {
		return finish(err)
	}
	if onMeasure != nil {
		onMeasure()
	}
	a, ru0, t0 := sum(), rusage.Self(), time.Now()
	if err := sleepCtx(ctx, dur, failed); err != nil {
		return finish(err)
	}
	b, ru1, t1 := sum(), rusage.Self(), time.Now()
	if onEnd != nil {
		onEnd()
	}
	if _, err := finish(nil); err != nil {
		return loopResult{}, err
	}
	return loopResult{
		reads: b.reads - a.reads, writes: b.writes - a.writes,
		readBytes: b.readBytes - a.readBytes, writeBytes: b.writeBytes - a.writeBytes,
		elapsed: t1.Sub(t0), use: ru1.Sub(ru0),
	}, nil
}

// errWorkerFailed is returned by sleepCtx when a worker failed.
var errWorkerFailed = errors.New("a worker failed")

// sleepCtx sleeps for d, or until ctx ends or failed is closed.
func sleepCtx(ctx context.Context, d time.Duration, failed <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-failed:
		return errWorkerFailed
	}
}
