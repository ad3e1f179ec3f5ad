package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
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
	switch {
	case j.rw == "append":
		s += " (each goroutine its own fd opened O_WRONLY|O_APPEND, write(2) of tagged records, until size or runtime; then verified)"
	case j.fresh:
		s += " fresh=fallocate(fd,0,0,size) (each write in a file-system block not written before)"
	}
	return s
}

func (g goRunner) run(ctx context.Context, j sysJob) (sysResult, error) {
	res := sysResult{cmdline: g.describe(j)}
	if j.rw == "append" {
		return g.appends(ctx, j, res)
	}
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
	if j.fresh {
		flags |= unix.O_CREAT
	}
	fd, err := unix.Open(j.path, flags, 0o644)
	if err != nil {
		return res, &os.PathError{Op: "open", Path: j.path, Err: err}
	}
	defer unix.Close(fd)
	if j.rw == "write" {
		return g.seqWrite(ctx, fd, j, res)
	}
	// A fresh file: fallocated, never written, and each random write in
	// a file-system block of its own, taken in a random order.
	var fresh []int32
	var fsBlock int64
	var next atomic.Int64
	if j.fresh {
		if err := unix.Fallocate(fd, 0, 0, j.size); err != nil {
			return res, &os.PathError{Op: "fallocate", Path: j.path, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return res, &os.PathError{Op: "fstat", Path: j.path, Err: err}
		}
		fsBlock = max(int64(st.Blksize), int64(j.bs))
		fresh = freshBlockOrder(j.size/fsBlock, j.randseed+1)
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
			if fresh != nil {
				i := next.Add(1) - 1
				if i >= int64(len(fresh)) {
					return true, 0, errLoopDone
				}
				off = int64(fresh[i])*fsBlock + rng.Int64N(fsBlock/int64(j.bs))*int64(j.bs)
			}
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

// appends is A1's peer workload: numjobs goroutines, each with its own
// descriptor of j.path opened O_WRONLY|O_APPEND (O_DIRECT if j.direct),
// as numjobs processes would have, append j.bs-byte tagged records with
// write(2) for j.ramp, then j.runtime, measured, or until the records
// fill j.size. The file is made empty first; afterwards it is checked
// (verifyRecords) and removed, and a failed check is the cell's error.
func (goRunner) appends(ctx context.Context, j sysJob, res sysResult) (sysResult, error) {
	n := max(j.numjobs, 1)
	if err := os.WriteFile(j.path, nil, 0o644); err != nil {
		return res, err
	}
	defer os.Remove(j.path)
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CLOEXEC
	if j.direct {
		flags |= unix.O_DIRECT
	}
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	bufs := make([][]byte, n)
	for g := range bufs {
		fd, err := unix.Open(j.path, flags, 0)
		if err != nil {
			return res, &os.PathError{Op: "open", Path: j.path, Err: err}
		}
		fds = append(fds, fd)
		bufs[g] = device.AlignedBuf(j.bs)
		fillRecordBody(bufs[g], g)
	}
	seq := make([]int64, n)
	maxRecs := j.size / int64(j.bs)
	var claimed atomic.Int64
	op := func(g int, _ *rand.Rand) (bool, int, error) {
		if claimed.Add(1) > maxRecs {
			return true, 0, errLoopDone
		}
		tagRecord(bufs[g], g, seq[g])
		m, err := unix.Write(fds[g], bufs[g])
		if err != nil {
			return true, 0, &os.PathError{Op: "write", Path: j.path, Err: err}
		}
		if m != j.bs {
			return true, m, fmt.Errorf("%s: append of %d B wrote %d", j.path, j.bs, m)
		}
		seq[g]++
		return true, m, nil
	}
	l, err := measureLoop(ctx, n, j.ramp, j.runtime, 5, op, nil, nil)
	if err == nil && l.ops() == 0 {
		err = fmt.Errorf("%s: no append completed in the measured window", j.path)
	}
	if err != nil {
		return res, err
	}
	res.writeIOs, res.writeBytes = l.writes, l.writeBytes
	res.elapsed, res.cpu, res.switches = l.elapsed, l.use.CPU, l.use.Switches
	f, err := os.Open(j.path)
	if err != nil {
		return res, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	if err := verifyRecords(f, st.Size(), j.bs, seq); err != nil {
		return res, fmt.Errorf("%s: %w", j.path, err)
	}
	return res, nil
}
