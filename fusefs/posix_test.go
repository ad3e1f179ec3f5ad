package fusefs

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/sluicefs/sluice/internal/harness/fio"
)

// posixSkip lists the posixtest cases that are not about the file system:
// FcntlFlockLocksFile expects a POSIX lock held by one descriptor to block
// another descriptor of the same process, which POSIX locks never do (it is
// disabled upstream for that reason, and fails on the host too).
var posixSkip = map[string]string{
	"FcntlFlockLocksFile": "POSIX locks are per process; the test expects a conflict within one process (disabled upstream)",
}

// oracleSkip lists the cases that only make sense on a FUSE mount:
// OpenSymlinkRace tells a FUSE server that opened /etc/passwd itself from
// a caller that did by the device number, which on a host directory is
// often /etc's own.
var oracleSkip = map[string]string{
	"OpenSymlinkRace": "tests a FUSE server; on a host directory on the same device as /etc it reports a false attack",
}

// runPosix runs go-fuse's POSIX battery with every case in its own
// subdirectory of dir, skipping the cases in skip.
func runPosix(t *testing.T, dir string, skip map[string]string) {
	names := make([]string, 0, len(posixtest.All))
	for k := range posixtest.All {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fn := posixtest.All[k]
		t.Run(k, func(t *testing.T) {
			if why, ok := posixSkip[k]; ok {
				t.Skip(why)
			}
			if why, ok := skip[k]; ok {
				t.Skip(why)
			}
			sub := filepath.Join(dir, k)
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatalf("MkdirAll: %v", err)
			}
			fn(t, sub)
			if err := os.RemoveAll(sub); err != nil {
				t.Errorf("RemoveAll: %v", err)
			}
		})
	}
}

// TestPosixOracle runs the battery on a directory of the host: what the
// kernel's own file system does is the expected behaviour.
func TestPosixOracle(t *testing.T) {
	runPosix(t, t.TempDir(), oracleSkip)
}

// nsOnly lists the cases that exercise only the namespace, the same in
// every cache configuration: they run in the default one only (the race
// detector makes OpenSymlinkRace take half a minute).
var nsOnly = map[string]string{
	"OpenSymlinkRace": "namespace only: runs in the default (kernel) configuration",
}

// TestPosix runs the battery on a sluice mount, in every cache
// configuration.
func TestPosix(t *testing.T) {
	for i, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: cc.opts})
			skip := nsOnly
			if i == 0 {
				skip = nil
			}
			runPosix(t, e.dir, skip)
			e.checkClean()
		})
	}
}

// TestBlockGranularDevice runs the data cases of the battery and fio's
// verify on a device with a 64 KiB I/O unit (the pNFS block-layout case),
// where the kernel's page-sized requests are not aligned to the unit.
func TestBlockGranularDevice(t *testing.T) {
	e := newMountEnv(t, envOpts{ioUnit: 64 << 10})
	for _, k := range []string{"AppendWrite", "DirectIO", "FileBasic", "FileLarge", "TruncateFile", "Fallocate", "LseekHoleSeeksToEOF"} {
		t.Run(k, func(t *testing.T) {
			sub := filepath.Join(e.dir, k)
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.All[k](t, sub)
		})
	}
	t.Run("fio", func(t *testing.T) {
		for _, direct := range []bool{false, true} {
			runFio(t, e.dir, fio.Job{Direct: direct, IOEngine: "psync", RW: "randwrite", BS: 4096, Size: 2 << 20, NumJobs: 2,
				Verify: "crc32c"})
		}
	})
	e.checkClean()
}
