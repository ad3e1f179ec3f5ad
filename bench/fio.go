package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicefs/sluice/internal/harness/fio"
	"github.com/sluicefs/sluice/internal/sys/rusage"
)

// sysJob is one peer workload, in fio's terms: the fio runner passes it
// to fio as is, the Go runner imitates it with goroutines.
type sysJob struct {
	name string
	// rw is read, randrw, randwrite, randread, write, or append (A1:
	// the Go runner only, see goRunner.appends; fio has no O_APPEND).
	rw       string
	path     string
	direct   bool
	ioengine string // psync, libaio, io_uring
	bs       int
	numjobs  int
	iodepth  int
	// size is the bytes each job covers, from offsetInc*job.
	size      int64
	offsetInc int64
	runtime   time.Duration
	ramp      time.Duration
	// timeBased repeats the range until runtime; without it the job
	// stops at the end of its range or at runtime, whichever is first.
	timeBased  bool
	sync       bool // O_SYNC
	endFsync   bool // fsync at the end, timed
	forceAsync bool // io_uring: IOSQE_ASYNC on every request
	randseed   uint64
	// fresh has the runner make the file, fallocated (mode 0) to size
	// and never written (fio --fallocate=native, the file created by
	// fio); the caller removes any old one first. Random writes then
	// cover each place at most once (fio's random map: each bs-sized
	// block; the Go runner: each file-system block), so that they land
	// in unwritten extents.
	fresh bool
}

// sysResult is what a sysRunner measured.
type sysResult struct {
	readIOs, writeIOs     int64
	readBytes, writeBytes int64
	elapsed               time.Duration // the measured window
	// cpu and switches are the workload's: fio's jobs (fio.Result.CPU,
	// start-up excluded), or this process's over the measured window for
	// the Go runner.
	cpu      time.Duration
	switches int64
	// cmdline is the fio command line, or the Go runner's description.
	cmdline string
}

func (r sysResult) metrics(both bool) map[string]float64 {
	l := loopResult{reads: r.readIOs, writes: r.writeIOs, readBytes: r.readBytes, writeBytes: r.writeBytes,
		elapsed: r.elapsed, use: rusage.Usage{CPU: r.cpu, Switches: r.switches}}
	m := l.metrics(both)
	if r.writeBytes > 0 {
		m["bytes_written"] = float64(r.writeBytes)
	}
	return m
}

// sysRunner runs sysJobs through system calls.
type sysRunner interface {
	name() string
	run(ctx context.Context, j sysJob) (sysResult, error)
}

// batchRunner runs several jobs one after the other in one go (fio: one
// invocation, each job its own stonewalled group), to pay the runner's
// start-up once. A job's error is in its slot of errs; err is for the
// batch as a whole.
type batchRunner interface {
	runBatch(ctx context.Context, js []sysJob) (res []sysResult, errs []error, err error)
}

// fioRunner runs jobs with fio, through the tree's one fio runner
// (internal/harness/fio).
type fioRunner struct{ path string }

func (f fioRunner) name() string { return "fio" }

// runner is the fio runner of f's binary.
func (f fioRunner) runner() fio.Runner { return fio.Runner{Path: f.path} }

// fioJob returns j in fio's terms.
func fioJob(j sysJob) fio.Job {
	fj := fio.Job{
		Name: j.name, Filename: j.path, RW: j.rw, BS: j.bs, Direct: j.direct, IOEngine: j.ioengine,
		ForceAsync: j.forceAsync, IODepth: max(j.iodepth, 1), NumJobs: max(j.numjobs, 1), Size: j.size,
		OffsetIncrement: j.offsetInc, Runtime: j.runtime, TimeBased: j.timeBased, Ramp: j.ramp,
		Sync: j.sync, EndFsync: j.endFsync,
		// The files are prepared (fully written) beforehand: fio must
		// neither create nor lay out nor preallocate them. invalidate=1
		// (fio's default, spelled out) drops the file's cached pages at
		// the job's start.
		NoFileCreate: true, Fallocate: "none", Invalidate: true,
	}
	if strings.HasPrefix(j.rw, "rand") {
		fj.NoRandomMap, fj.NoRandRepeat, fj.RandSeed = true, true, j.randseed
	}
	if j.fresh {
		// fio creates the file and fallocates it (fallocate(fd, 0, 0,
		// size)); a write job without overwrite=1 does not lay it out,
		// so nothing is written before the job's own writes. The random
		// map stays on: no block is written twice.
		fj.NoFileCreate, fj.Fallocate, fj.NoRandomMap = false, "native", false
	}
	return fj
}

// batchArgs returns fio's arguments for js run one after the other,
// each in its own reporting group.
func (f fioRunner) batchArgs(js []sysJob) []string {
	return f.runner().BatchArgs(fioJobs(js))
}

func fioJobs(js []sysJob) []fio.Job {
	fjs := make([]fio.Job, len(js))
	for i, j := range js {
		fjs[i] = fioJob(j)
	}
	return fjs
}

// cmdline renders the command line as a shell would take it.
func (f fioRunner) cmdline(j sysJob) string {
	return f.runner().Cmdline(fioJob(j))
}

func (f fioRunner) run(ctx context.Context, j sysJob) (sysResult, error) {
	if j.rw == "append" {
		return sysResult{}, fmt.Errorf("fio cannot run %s: it has no O_APPEND writes (--file_append=1 only starts each job's offset at the end of the file)", j.name)
	}
	r, err := f.runner().Run(ctx, fioJob(j))
	return fioResult(r), err
}

// fioResult converts fio's figures of one job group.
func fioResult(r fio.Result) sysResult {
	return sysResult{readIOs: r.Read.IOs, writeIOs: r.Write.IOs, readBytes: r.Read.Bytes, writeBytes: r.Write.Bytes,
		elapsed: r.Elapsed, cpu: r.CPU, switches: r.Switches, cmdline: r.Cmdline}
}

// runBatch runs js in one fio invocation: each job stonewalled (it
// starts when the previous one ended) in its own reporting group. Every
// result's command line is the whole invocation, with its job named.
func (f fioRunner) runBatch(ctx context.Context, js []sysJob) ([]sysResult, []error, error) {
	rs, errs, err := f.runner().RunBatch(ctx, fioJobs(js))
	if err != nil {
		return nil, nil, err
	}
	res := make([]sysResult, len(rs))
	for i, r := range rs {
		res[i] = fioResult(r)
	}
	return res, errs, nil
}
