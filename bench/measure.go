package bench

import (
	"context"
	"errors"
	"fmt"
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

// errLoopDone, returned by an op, says that the cell's work is used up
// (a cell bounded by a count as well as by time: A1's file is full,
// Z1's fresh blocks are all written). It is not an error: measureLoop
// closes the measured window at once and stops every goroutine.
var errLoopDone = errors.New("bench: the cell's work is done")

// measureLoop runs op from n goroutines: for warm (not measured), then
// for dur, measured: the I/Os completed in that window, its length and
// the process's CPU time in it. onMeasure, if set, runs as the window
// opens (to reset counters); onEnd as it closes, before the goroutines
// stop. The first error of any goroutine ends the run. An op that
// returns errLoopDone ends the window early; if that happens during the
// warm-up, the cell had too little work and measureLoop fails. A window
// in which no I/O completed is extended until one does (at most to ten
// times dur).
func measureLoop(ctx context.Context, n int, warm, dur time.Duration, seed uint64, op opFunc, onMeasure, onEnd func()) (loopResult, error) {
	counts := make([]workerCount, n)
	var stop atomic.Bool
	var errOnce, doneOnce sync.Once
	var firstErr error
	failed, done := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			c := &counts[g]
			for !stop.Load() {
				w, nb, err := op(g, rng)
				if err == errLoopDone {
					doneOnce.Do(func() { close(done) })
					return
				}
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
	if err := sleepCtx(ctx, warm, failed, done); err == errWorkDone {
		return finish(fmt.Errorf("the cell's work was used up in its %v warm-up: nothing left to measure", warm))
	} else if err != nil {
		return finish(err)
	}
	if onMeasure != nil {
		onMeasure()
	}
	a, ru0, t0 := sum(), rusage.Self(), time.Now()
	err := sleepCtx(ctx, dur, failed, done)
	if err == nil && sum().ops() == a.ops() {
		// Nothing completed in the window (a stall, or a machine busy
		// with other work): extend it until something does, up to ten
		// times its length, so that a slow cell reports a rate.
		for end := t0.Add(10 * dur); err == nil && sum().ops() == a.ops() && time.Now().Before(end); {
			err = sleepCtx(ctx, time.Millisecond, failed, done)
		}
	}
	if err != nil && err != errWorkDone {
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

// errWorkerFailed and errWorkDone are returned by sleepCtx when a
// worker failed, or when one found the work used up (errLoopDone).
var (
	errWorkerFailed = errors.New("a worker failed")
	errWorkDone     = errors.New("the work is done")
)

// sleepCtx sleeps for d, or until ctx ends or failed or done is closed.
func sleepCtx(ctx context.Context, d time.Duration, failed, done <-chan struct{}) error {
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
	case <-done:
		return errWorkDone
	}
}
