package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/mountinfo"
)

// hostEnv fills the machine's part of Env.
func hostEnv(e *Env) {
	e.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	e.CPUs = runtime.NumCPU()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		e.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	e.GoVersion = runtime.Version()
	e.SluiceVersion = sluiceVersion()
	e.Root = os.Geteuid() == 0
}

// Version, when set at link time (go build -ldflags "-X
// github.com/sluicefs/sluice/bench.Version=$(git describe --always
// --dirty)"), names the build in reports; it matters where VCS stamping
// is off (GOFLAGS=-buildvcs=false).
var Version string

// sluiceVersion names the build: Version, or the module version and,
// when the build stamped it, the commit (with "+dirty" for local
// changes).
func sluiceVersion() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
		if when != "" {
			v += " (" + when + ")"
		}
	}
	if v == "" || v == "(devel)" {
		v = "(devel, no VCS stamp)"
	}
	return v
}

// mountOf returns the mount holding path, symbolic links resolved, from
// /proc/self/mountinfo, and whether there is one.
func mountOf(path string) (mountinfo.Mount, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return mountinfo.Mount{}, false
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	t, err := mountinfo.Read()
	if err != nil {
		return mountinfo.Mount{}, false
	}
	return t.Containing(abs)
}

// blockDevOf returns the major:minor of the block device holding path, and
// whether it is one (a FUSE or tmpfs mount is not).
func blockDevOf(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false
	}
	mm := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if _, err := os.Stat("/sys/dev/block/" + mm); err != nil {
		return mm, false
	}
	return mm, true
}

// describeDevice describes the disk under path: for a partition, its
// parent disk's model and queue.
func describeDevice(path string) DeviceInfo {
	var d DeviceInfo
	if m, ok := mountOf(path); ok {
		d.MountPoint, d.MountSource, d.MountFSType, d.MountOptions = m.Point, m.Source, m.FSType, m.Options
	}
	d.FileSystem = d.MountFSType
	mm, ok := blockDevOf(path)
	d.DeviceNumbers = mm
	if !ok {
		return d
	}
	sys, err := filepath.EvalSymlinks("/sys/dev/block/" + mm)
	if err != nil {
		return d
	}
	d.Name = filepath.Base(sys)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		sys = filepath.Dir(sys) // the whole disk
	}
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(sys, p))
		return strings.TrimSpace(string(b))
	}
	d.Model = read("device/model")
	if d.Model == "" {
		if v := read("device/vendor"); v != "" {
			d.Model = "vendor " + v
			if v == "0x1af4" {
				d.Model += " (virtio)"
			}
		}
	}
	if d.Model == "" && strings.HasPrefix(filepath.Base(sys), "loop") {
		if bf := read("loop/backing_file"); bf != "" {
			d.Model = "loop over " + bf
			if read("loop/dio") == "1" {
				d.Model += " (direct I/O)"
			}
		}
	}
	if n, err := strconv.ParseInt(read("size"), 10, 64); err == nil {
		d.SizeBytes = n * 512
	}
	d.Rotational = read("queue/rotational") == "1"
	d.LogicalBlock, _ = strconv.Atoi(read("queue/logical_block_size"))
	d.Scheduler = read("queue/scheduler")
	return d
}

// diskStat is a snapshot of a block device's completed I/Os
// (/sys/dev/block/MAJ:MIN/stat).
type diskStat struct {
	ok             bool
	reads, writes  int64
	readSectors    int64
	writtenSectors int64
}

func readDiskStat(mm string) diskStat {
	if mm == "" {
		return diskStat{}
	}
	b, err := os.ReadFile("/sys/dev/block/" + mm + "/stat")
	if err != nil {
		return diskStat{}
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return diskStat{}
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	return diskStat{ok: true, reads: n(0), readSectors: n(2), writes: n(4), writtenSectors: n(6)}
}

// ownCPU is the CPU time of this process and its waited-for children
// (fio) so far.
func ownCPU() time.Duration {
	var self, kids unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &self)
	unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

// clockTicks is the unit of /proc/stat (USER_HZ), 100 on Linux.
const clockTicks = 100

// IsTerminal reports whether f is a terminal (for a live progress line).
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuTimes returns the machine's total and idle (idle + iowait) CPU
// ticks from /proc/stat.
func cpuTimes() (total, idle int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		if i >= 8 { // guest time is already in user
			break
		}
		total += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return total, idle
}
