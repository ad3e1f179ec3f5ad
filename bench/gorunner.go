package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/sys/rusage"
)

// goRunner imitates fio's jobs with goroutines and pread/pwrite, for
// machines without fio. Every engine is psync: an iodepth of N is N
// goroutines (numjobs x iodepth in all), each with one I/O in flight, as
// fio's psync jobs would be; io_uring's punting (force_async) has no
// equivalent.
type goRunner struct{}

func (goRunner) name() string { return "go" }

// describe is the Go runner's equivalent of a command line.
func (goRunner) describe(j sysJob) string {
	s := fmt.Sprintf("go-runner rw=%s path=%s bs=%d direct=%t goroutines=%d (numjobs=%d x iodepth=%d, psync) size=%d",
		j.rw, j.path, j.bs, j.direct, max(j.numjobs, 1)*max(j.iodepth, 1), max(j.numjobs, 1), max(j.iodepth, 1), j.size)
	if j.offsetInc > 0 {
		s += fmt.Sprintf(" offset_increment=%d", j.offsetInc)
	}
	s += fmt.Sprintf(" runtime=%v ramp=%v time_based=%t sync=%t end_fsync=%t", j.runtime, j.ramp, j.timeBased, j.sync, j.endFsync)
	return s
}

func (g goRunner) run(ctx context.Context, j sysJob) (sysResult, error) {
	res := sysResult{cmdline: g.describe(j)}
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if j.rw == "read" || j.rw == "randread" {
		flags = unix.O_RDONLY | unix.O_CLOEXEC
	}
	if j.direct {
		flags |= unix.O_DIRECT
	}
	if j.sync {
		flags |= unix.O_SYNC
	}
	fd, err := unix.Open(j.path, flags, 0)
	if err != nil {
		return res, &os.PathError{Op: "open", Path: j.path, Err: err}
	}
	defer unix.Close(fd)
	if j.rw == "write" {
		return g.seqWrite(ctx, fd, j, res)
	}
	n := max(j.numjobs, 1) * max(j.iodepth, 1)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = device.AlignedBuf(j.bs)
		for k := range bufs[i] {
			bufs[i][k] = byte(i + k)
		}
	}
	blocks := j.size / int64(j.bs)
	if blocks < 1 {
		return res, fmt.Errorf("%s: size %d is smaller than one %d B block", j.path, j.size, j.bs)
	}
	// Sequential readers: one per job, each in its own region.
	cursor := make([]int64, n)
	op := func(gi int, rng *rand.Rand) (bool, int, error) {
		buf := bufs[gi]
		var off int64
		write := false
		switch j.rw {
		case "read":
			job := gi / max(j.iodepth, 1)
			off = int64(job)*j.offsetInc + cursor[gi]
			cursor[gi] += int64(j.bs)
			if cursor[gi]+int64(j.bs) > j.size {
				cursor[gi] = 0
			}
		case "randread":
			off = rng.Int64N(blocks) * int64(j.bs)
		case "randwrite":
			off, write = rng.Int64N(blocks)*int64(j.bs), true
		case "randrw":
			off, write = rng.Int64N(blocks)*int64(j.bs), rng.IntN(2) == 0
		default:
			return false, 0, fmt.Errorf("go runner: rw=%s is not supported", j.rw)
		}
		var m int
		var err error
		if write {
			m, err = unix.Pwrite(fd, buf, off)
		} else {
			m, err = unix.Pread(fd, buf, off)
		}
		if err != nil {
			return write, 0, &os.PathError{Op: map[bool]string{true: "pwrite", false: "pread"}[write], Path: j.path, Err: err}
		}
		return write, m, nil
	}
	seed := j.randseed
	if seed == 0 {
		seed = 1
	}
	l, err := measureLoop(ctx, n, j.ramp, j.runtime, seed, op, nil, nil)
	if err != nil {
		return res, err
	}
	res.readIOs, res.writeIOs, res.readBytes, res.writeBytes = l.reads, l.writes, l.readBytes, l.writeBytes
	res.elapsed, res.cpu, res.switches = l.elapsed, l.use.CPU, l.use.Switches
	return res, nil
}

// seqWrite writes j.bs at a time from offset 0 until j.size or j.runtime,
// then fsyncs if asked; the time includes the fsync, as fio's does with
// end_fsync.
func (goRunner) seqWrite(ctx context.Context, fd int, j sysJob, res sysResult) (sysResult, error) {
	buf := device.AlignedBuf(j.bs)
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	ru0, t0 := rusage.Self(), time.Now()
	deadline := t0.Add(j.runtime)
	var off int64
	for off+int64(j.bs) <= j.size && time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n, err := unix.Pwrite(fd, buf, off)
		if err != nil {
			return res, &os.PathError{Op: "pwrite", Path: j.path, Err: err}
		}
		off += int64(n)
		res.writeIOs++
	}
	if j.endFsync {
		if err := unix.Fsync(fd); err != nil {
			return res, &os.PathError{Op: "fsync", Path: j.path, Err: err}
		}
	}
	res.writeBytes = off
	res.elapsed = time.Since(t0)
	u := rusage.Self().Sub(ru0)
	res.cpu, res.switches = u.CPU, u.Switches
	return res, nil
}
