// Package fio is sluice's one fio runner: it turns a Job into fio's command
// line, runs fio, and parses its JSON report into a Result per job group.
// `sluice bench` (its fio peers), the engine's, directdev's and fusefs'
// benchmarks and tests all run fio through it; nothing else in the tree
// builds an fio command line or reads fio's output.
//
// It imports nothing of sluice, so that any package's tests can use it
// without an import cycle (the engine's in-package tests included).
//
// # Jobs and command lines
//
// A Job names fio's options one field each. A zero field is left out of the
// command line (fio's default applies), except Direct, which is always
// written (--direct=0 or --direct=1). Every run adds --group_reporting and
// --output-format=json: a job's numjobs processes are reported as one
// group, and Run returns that group's figures. The command line is exactly
// what Runner.Cmdline shows, so a report can record what it ran.
//
// # Results
//
// Result holds fio's counts per direction (I/Os, bytes, IOPS, bandwidth,
// run time, latency) and the job's own CPU time: fio measures each job
// process's getrusage (its io_uring workers are threads of it) after the
// ramp, as a percentage of the job's run time; fio's own start-up (about
// 0.15 s of CPU) is not in it.
//
// # Errors
//
// A run fails if fio cannot run, exits non-zero, or reports an error in a
// job (a verify mismatch included); the error is an *Error carrying fio's
// whole standard error. A job that reports no run time is an error too.
//
// A Runner is a value and safe for concurrent use: each Run is its own fio
// process.
package fio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/internal/harness/cmdout"
)

// Job is one fio job. The field comments give fio's option.
type Job struct {
	// Name is the job's name (--name). It must be set, and unique within
	// a batch.
	Name string
	// Directory is where fio puts the job's files (--directory): one per
	// job process, unless Filename names the one they share (--filename;
	// relative to Directory if that is set).
	Directory string
	Filename  string
	// RW is the I/O pattern (--rw): read, write, randread, randwrite,
	// randrw, ...
	RW string
	// BS is the block size in bytes (--bs).
	BS int
	// Direct opens the file O_DIRECT (--direct=1); it is always written.
	Direct bool
	// IOEngine is fio's engine (--ioengine): psync, libaio, io_uring, ...
	IOEngine string
	// ForceAsync sets IOSQE_ASYNC on every io_uring request
	// (--force_async=1).
	ForceAsync bool
	// IODepth is the queue depth of each job process (--iodepth).
	IODepth int
	// NumJobs is the number of job processes (--numjobs).
	NumJobs int
	// Size is the bytes each job process covers (--size), from Offset
	// (--offset) plus OffsetIncrement times the process's number
	// (--offset_increment).
	Size            int64
	Offset          int64
	OffsetIncrement int64
	// Runtime bounds the job (--runtime, in ms); with TimeBased
	// (--time_based) the job repeats its range until Runtime instead of
	// stopping at its end.
	Runtime   time.Duration
	TimeBased bool
	// Ramp is run before the measurement starts (--ramp_time, in ms).
	Ramp time.Duration
	// Sync opens the file O_SYNC (--sync=1).
	Sync bool
	// EndFsync fsyncs the file at the end of the job, timed
	// (--end_fsync=1).
	EndFsync bool
	// NoRandomMap lets random I/O pick blocks without tracking which
	// were done (--norandommap); NoRandRepeat seeds the generator afresh
	// on each run (--randrepeat=0); RandSeed seeds it (--randseed).
	NoRandomMap  bool
	NoRandRepeat bool
	RandSeed     uint64
	// NoFileCreate forbids fio to create the file (--allow_file_create=0);
	// Fallocate is how fio lays it out (--fallocate: none, posix, ...).
	NoFileCreate bool
	Fallocate    string
	// Invalidate drops the file's cached pages at the job's start
	// (--invalidate=1, fio's default, spelled out).
	Invalidate bool
	// Verify is the checksum of a verifying job (--verify: crc32c, md5,
	// ...): fio writes, reads every block back and fails at the first
	// mismatch (--do_verify=1 --verify_fatal=1), saving no state file
	// (--verify_state_save=0).
	Verify string
}

// Args returns the job's options, from its --name.
func (j Job) Args() []string {
	a := []string{"--name=" + j.Name}
	str := func(opt, v string) {
		if v != "" {
			a = append(a, "--"+opt+"="+v)
		}
	}
	num := func(opt string, v int64) {
		if v > 0 {
			a = append(a, "--"+opt+"="+strconv.FormatInt(v, 10))
		}
	}
	dur := func(opt string, d time.Duration) {
		if d > 0 {
			a = append(a, "--"+opt+"="+strconv.FormatInt(d.Milliseconds(), 10)+"ms")
		}
	}
	flag := func(b bool, opt string) {
		if b {
			a = append(a, opt)
		}
	}
	// fio resolves a relative --filename against the --directory given
	// before it.
	str("directory", j.Directory)
	str("filename", j.Filename)
	str("rw", j.RW)
	num("bs", int64(j.BS))
	if j.Direct {
		a = append(a, "--direct=1")
	} else {
		a = append(a, "--direct=0")
	}
	str("ioengine", j.IOEngine)
	flag(j.ForceAsync, "--force_async=1")
	num("iodepth", int64(j.IODepth))
	num("numjobs", int64(j.NumJobs))
	num("size", j.Size)
	num("offset", j.Offset)
	num("offset_increment", j.OffsetIncrement)
	dur("runtime", j.Runtime)
	flag(j.TimeBased, "--time_based")
	dur("ramp_time", j.Ramp)
	flag(j.Sync, "--sync=1")
	flag(j.EndFsync, "--end_fsync=1")
	flag(j.NoRandomMap, "--norandommap")
	flag(j.NoRandRepeat, "--randrepeat=0")
	if j.RandSeed != 0 {
		a = append(a, "--randseed="+strconv.FormatUint(j.RandSeed, 10))
	}
	flag(j.NoFileCreate, "--allow_file_create=0")
	str("fallocate", j.Fallocate)
	flag(j.Invalidate, "--invalidate=1")
	if j.Verify != "" {
		a = append(a, "--verify="+j.Verify, "--do_verify=1", "--verify_fatal=1", "--verify_state_save=0")
	}
	return a
}

// globalArgs are the options of every fio run.
var globalArgs = []string{"--group_reporting", "--output-format=json"}

// Runner runs fio from Path.
type Runner struct {
	// Path is the fio binary.
	Path string
}

// Args returns fio's arguments for j alone.
func (r Runner) Args(j Job) []string {
	return append(j.Args(), globalArgs...)
}

// BatchArgs returns fio's arguments for js run one after the other, each
// in its own reporting group.
func (r Runner) BatchArgs(js []Job) []string {
	a := append([]string{}, globalArgs...)
	for _, j := range js {
		a = append(a, j.Args()...)
		a = append(a, "--stonewall", "--new_group")
	}
	return a
}

// Cmdline renders the command line of j as a shell would take it.
func (r Runner) Cmdline(j Job) string {
	return r.Path + " " + strings.Join(r.Args(j), " ")
}

// Run runs j and returns its group's figures. Result.Cmdline is set even
// when Run fails. If ctx ends first, fio is killed and Run returns
// ctx.Err().
func (r Runner) Run(ctx context.Context, j Job) (Result, error) {
	args := r.Args(j)
	res := Result{Cmdline: r.Path + " " + strings.Join(args, " ")}
	out, stderr, err := r.exec(ctx, args)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err != nil {
		return res, &Error{Cmdline: res.Cmdline, Err: err, Stderr: stderr, Stdout: out}
	}
	groups, err := Parse(out)
	if err != nil {
		return res, &Error{Cmdline: res.Cmdline, Err: err, Stderr: stderr}
	}
	res, err = groups[0].result(res.Cmdline)
	if err != nil {
		return res, &Error{Cmdline: res.Cmdline, Err: err, Stderr: stderr}
	}
	return res, nil
}

// RunBatch runs js in one fio invocation, to pay fio's start-up (0.5-1 s
// on a small machine) once: each job stonewalled (it starts when the
// previous one ended) in its own reporting group. A job's error is in its
// slot of errs; err is for the batch as a whole. Every result's Cmdline is
// the whole invocation, with its job named.
func (r Runner) RunBatch(ctx context.Context, js []Job) (res []Result, errs []error, err error) {
	args := r.BatchArgs(js)
	cmdline := r.Path + " " + strings.Join(args, " ")
	out, stderr, runErr := r.exec(ctx, args)
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	// fio reports every job even when one failed (and then exits 1).
	groups, err := Parse(out)
	if err != nil {
		if runErr != nil {
			err = runErr
		}
		return nil, nil, &Error{Cmdline: cmdline, Err: err, Stderr: stderr, Stdout: out}
	}
	byName := map[string]Group{}
	for _, g := range groups {
		byName[g.JobName] = g
	}
	res, errs = make([]Result, len(js)), make([]error, len(js))
	for i, j := range js {
		res[i].Cmdline = cmdline + "   # job " + j.Name
		g, ok := byName[j.Name]
		if !ok {
			errs[i] = &Error{Cmdline: res[i].Cmdline, Err: fmt.Errorf("no report of job %s", j.Name), Stderr: stderr}
			continue
		}
		if res[i], err = g.result(res[i].Cmdline); err != nil {
			errs[i] = &Error{Cmdline: res[i].Cmdline, Err: err, Stderr: stderr}
		}
	}
	return res, errs, nil
}

// exec runs fio with args and returns its standard output and error.
func (r Runner) exec(ctx context.Context, args []string) (stdout []byte, stderr string, err error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, r.Path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.String(), err
}

// Error is a failed fio run.
type Error struct {
	// Cmdline is the command that ran.
	Cmdline string
	// Err is what failed: fio's exit, its report, or a job's error.
	Err error
	// Stderr is fio's whole standard error (a verify failure says there
	// which block mismatched); Stdout its standard output when it could
	// not be parsed.
	Stderr string
	Stdout []byte
}

// Error gives the failure and the first lines of fio's standard error
// (or of its output, if it wrote nothing there).
func (e *Error) Error() string {
	msg := "fio: " + e.Err.Error()
	l := cmdout.FirstLines(e.Stderr, 3)
	if l == "" {
		l = cmdout.FirstLines(string(e.Stdout), 3)
	}
	if l != "" {
		msg += ": " + l
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Result is one job group's figures.
type Result struct {
	// Cmdline is fio's command line.
	Cmdline string
	// Read and Write are the figures of each direction.
	Read, Write DirStats
	// Elapsed is the measured window: the longer of the two directions'
	// run times (ramp excluded).
	Elapsed time.Duration
	// CPU is the job processes' user and system time (usr_cpu+sys_cpu of
	// job_runtime); Switches their context switches (ctx).
	CPU      time.Duration
	Switches int64
}

// DirStats are fio's figures for one direction.
type DirStats struct {
	IOs     int64         // total_ios
	Bytes   int64         // io_bytes
	IOPS    float64       // iops
	BW      float64       // bw_bytes: bytes per second
	Runtime time.Duration // runtime (fio: ms)
	// LatMean and LatMax are the submission-to-completion latency
	// (lat_ns).
	LatMean, LatMax time.Duration
}

// Group is the part of fio's JSON report of one job group that this
// package reads.
type Group struct {
	JobName string  `json:"jobname"`
	Error   int     `json:"error"`
	Read    dirJSON `json:"read"`
	Write   dirJSON `json:"write"`
	// UsrCPU and SysCPU are percentages of JobRuntime (ms, summed over
	// the group's jobs); Ctx counts context switches.
	UsrCPU     float64 `json:"usr_cpu"`
	SysCPU     float64 `json:"sys_cpu"`
	JobRuntime int64   `json:"job_runtime"`
	Ctx        int64   `json:"ctx"`
}

type dirJSON struct {
	IOBytes  int64   `json:"io_bytes"`
	TotalIOs int64   `json:"total_ios"`
	Runtime  int64   `json:"runtime"` // ms
	IOPS     float64 `json:"iops"`
	BWBytes  float64 `json:"bw_bytes"`
	Lat      struct {
		Mean float64 `json:"mean"`
		Max  float64 `json:"max"`
	} `json:"lat_ns"`
}

func (d dirJSON) stats() DirStats {
	return DirStats{IOs: d.TotalIOs, Bytes: d.IOBytes, IOPS: d.IOPS, BW: d.BWBytes,
		Runtime: time.Duration(d.Runtime) * time.Millisecond,
		LatMean: time.Duration(d.Lat.Mean), LatMax: time.Duration(d.Lat.Max)}
}

// Result returns the group's figures, or the error it reports.
func (g Group) Result() (Result, error) { return g.result("") }

func (g Group) result(cmdline string) (Result, error) {
	res := Result{Cmdline: cmdline}
	if g.Error != 0 {
		return res, fmt.Errorf("job %s: error %d (%s)", g.JobName, g.Error, syscall.Errno(g.Error))
	}
	res.CPU = time.Duration((g.UsrCPU + g.SysCPU) / 100 * float64(g.JobRuntime) * float64(time.Millisecond))
	res.Switches = g.Ctx
	res.Read, res.Write = g.Read.stats(), g.Write.stats()
	res.Elapsed = max(res.Read.Runtime, res.Write.Runtime)
	if res.Elapsed <= 0 {
		return res, fmt.Errorf("job %s reported no run time", g.JobName)
	}
	return res, nil
}

// Parse reads fio's --output-format=json (after any notices fio printed
// first) and returns its job groups' reports.
func Parse(out []byte) ([]Group, error) {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var rep struct {
		Jobs []Group `json:"jobs"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("parsing fio's JSON: %v", err)
	}
	if len(rep.Jobs) == 0 {
		return nil, fmt.Errorf("fio's JSON has no jobs")
	}
	return rep.Jobs, nil
}

var lookPath = sync.OnceValues(func() (string, error) { return exec.LookPath("fio") })

// LookPath returns the path of fio in PATH (looked up once).
func LookPath() (string, error) { return lookPath() }

// Available reports whether fio is in PATH.
func Available() bool {
	_, err := LookPath()
	return err == nil
}

// Run runs j with fio from PATH (see Runner.Run).
func Run(ctx context.Context, j Job) (Result, error) {
	path, err := LookPath()
	if err != nil {
		return Result{}, err
	}
	return Runner{Path: path}.Run(ctx, j)
}

// Version returns "PATH (fio-3.33)", or "" if the fio at path does not
// run.
func Version(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return ""
	}
	return path + " (" + strings.TrimSpace(string(out)) + ")"
}
