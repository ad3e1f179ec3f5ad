package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/internal/sys/rusage"
)

// sysJob is one peer workload, in fio's terms: the fio runner passes it
// to fio as is, the Go runner imitates it with goroutines.
type sysJob struct {
	name     string
	rw       string // read, randrw, randwrite, randread, write
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
}

// sysResult is what a sysRunner measured.
type sysResult struct {
	readIOs, writeIOs     int64
	readBytes, writeBytes int64
	elapsed               time.Duration // the measured window
	// cpu and switches are the workload's: fio's jobs (usr_cpu+sys_cpu
	// of job_runtime, start-up excluded), or this process's over the
	// measured window for the Go runner.
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

// fioRunner runs jobs with fio and parses its JSON output.
type fioRunner struct{ path string }

func (f fioRunner) name() string { return "fio" }

// fioDur renders a duration for fio ("250ms").
func fioDur(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// globalArgs are the options of every fio run.
var fioGlobalArgs = []string{"--group_reporting", "--output-format=json"}

// args returns fio's arguments for j alone.
func (f fioRunner) args(j sysJob) []string {
	return append(f.jobArgs(j), fioGlobalArgs...)
}

// batchArgs returns fio's arguments for js run one after the other,
// each in its own reporting group.
func (f fioRunner) batchArgs(js []sysJob) []string {
	a := append([]string{}, fioGlobalArgs...)
	for _, j := range js {
		a = append(a, f.jobArgs(j)...)
		a = append(a, "--stonewall", "--new_group")
	}
	return a
}

// jobArgs returns the options of job j, from its --name.
func (f fioRunner) jobArgs(j sysJob) []string {
	b2i := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	a := []string{
		"--name=" + j.name, "--filename=" + j.path,
		"--rw=" + j.rw, "--bs=" + strconv.Itoa(j.bs), "--direct=" + b2i(j.direct),
		"--ioengine=" + j.ioengine,
	}
	if j.forceAsync {
		a = append(a, "--force_async=1")
	}
	a = append(a, "--iodepth="+strconv.Itoa(max(j.iodepth, 1)), "--numjobs="+strconv.Itoa(max(j.numjobs, 1)),
		"--size="+strconv.FormatInt(j.size, 10))
	if j.offsetInc > 0 {
		a = append(a, "--offset_increment="+strconv.FormatInt(j.offsetInc, 10))
	}
	a = append(a, "--runtime="+fioDur(j.runtime))
	if j.timeBased {
		a = append(a, "--time_based")
	}
	if j.ramp > 0 {
		a = append(a, "--ramp_time="+fioDur(j.ramp))
	}
	if j.sync {
		a = append(a, "--sync=1")
	}
	if j.endFsync {
		a = append(a, "--end_fsync=1")
	}
	if strings.HasPrefix(j.rw, "rand") {
		a = append(a, "--norandommap", "--randrepeat=0")
		if j.randseed != 0 {
			a = append(a, "--randseed="+strconv.FormatUint(j.randseed, 10))
		}
	}
	// The files are prepared (fully written) beforehand: fio must
	// neither create nor lay out nor preallocate them. invalidate=1
	// (fio's default, spelled out) drops the file's cached pages at the
	// job's start.
	a = append(a, "--allow_file_create=0", "--fallocate=none", "--invalidate=1")
	return a
}

// cmdline renders the command line as a shell would take it.
func (f fioRunner) cmdline(j sysJob) string {
	return f.path + " " + strings.Join(f.args(j), " ")
}

func (f fioRunner) run(ctx context.Context, j sysJob) (sysResult, error) {
	res := sysResult{cmdline: f.cmdline(j)}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, f.path, f.args(j)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		return res, fmt.Errorf("fio: %v: %s", err, firstLines(stderr.String()+out.String(), 3))
	}
	jobs, err := parseFio(out.Bytes())
	if err != nil {
		return res, fmt.Errorf("fio: %v: %s", err, firstLines(stderr.String(), 3))
	}
	return fioResult(jobs[0], res)
}

// fioResult fills res from fio's report of one job group.
func fioResult(p fioJob, res sysResult) (sysResult, error) {
	if p.Error != 0 {
		return res, fmt.Errorf("fio job %s: error %d (%s)", p.JobName, p.Error, syscall.Errno(p.Error))
	}
	// The jobs' own CPU time: fio measures each job process's getrusage
	// (its io_uring workers are threads of it) after the ramp, as a
	// percentage of the job's run time; job_runtime sums the jobs'.
	// fio's own start-up (about 0.15 s of CPU here) is not in it.
	res.cpu = time.Duration((p.UsrCPU + p.SysCPU) / 100 * float64(p.JobRuntime) * float64(time.Millisecond))
	res.switches = p.Ctx
	res.readIOs, res.writeIOs = p.Read.TotalIOs, p.Write.TotalIOs
	res.readBytes, res.writeBytes = p.Read.IOBytes, p.Write.IOBytes
	ms := max(p.Read.Runtime, p.Write.Runtime)
	res.elapsed = time.Duration(ms) * time.Millisecond
	if res.elapsed <= 0 {
		return res, fmt.Errorf("fio job %s reported no run time", p.JobName)
	}
	return res, nil
}

// runBatch runs js in one fio invocation: each job stonewalled (it
// starts when the previous one ended) in its own reporting group. Every
// result's command line is the whole invocation, with its job named.
func (f fioRunner) runBatch(ctx context.Context, js []sysJob) ([]sysResult, []error, error) {
	args := f.batchArgs(js)
	cmdline := f.path + " " + strings.Join(args, " ")
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, f.path, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	// fio reports every job even when one failed (and then exits 1).
	jobs, err := parseFio(out.Bytes())
	if err != nil {
		if runErr != nil {
			err = runErr
		}
		return nil, nil, fmt.Errorf("fio: %v: %s", err, firstLines(stderr.String()+out.String(), 3))
	}
	byName := map[string]fioJob{}
	for _, j := range jobs {
		byName[j.JobName] = j
	}
	res, errs := make([]sysResult, len(js)), make([]error, len(js))
	for i, j := range js {
		res[i].cmdline = cmdline + "   # job " + j.name
		p, ok := byName[j.name]
		if !ok {
			errs[i] = fmt.Errorf("fio did not report job %s: %s", j.name, firstLines(stderr.String(), 2))
			continue
		}
		res[i], errs[i] = fioResult(p, res[i])
	}
	return res, errs, nil
}

// fioJob is the part of fio's JSON job report that bench reads.
type fioJob struct {
	JobName string     `json:"jobname"`
	Error   int        `json:"error"`
	Read    fioDirStat `json:"read"`
	Write   fioDirStat `json:"write"`
	// UsrCPU and SysCPU are percentages of JobRuntime (ms, summed over
	// the group's jobs); Ctx counts context switches.
	UsrCPU     float64 `json:"usr_cpu"`
	SysCPU     float64 `json:"sys_cpu"`
	JobRuntime int64   `json:"job_runtime"`
	Ctx        int64   `json:"ctx"`
}

type fioDirStat struct {
	IOBytes  int64   `json:"io_bytes"`
	TotalIOs int64   `json:"total_ios"`
	Runtime  int64   `json:"runtime"` // ms
	IOPS     float64 `json:"iops"`
}

// parseFio reads fio's --output-format=json (after any notices it
// printed first) and returns its job groups' reports.
func parseFio(out []byte) ([]fioJob, error) {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var rep struct {
		Jobs []fioJob `json:"jobs"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("parsing fio's JSON: %v", err)
	}
	if len(rep.Jobs) == 0 {
		return nil, fmt.Errorf("fio's JSON has no jobs")
	}
	return rep.Jobs, nil
}

// firstLines returns the first n non-empty lines of s, joined.
func firstLines(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
			if len(out) == n {
				break
			}
		}
	}
	return strings.Join(out, " / ")
}
