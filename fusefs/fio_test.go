package fusefs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicefs/sluice/internal/harness/fio"
)

// runFio runs fio job j (named "verify", its files in dir) and fails the
// test if fio reports an error (a verify failure included), with fio's
// messages.
func runFio(t *testing.T, dir string, j fio.Job) {
	t.Helper()
	if !fio.Available() {
		t.Skip("fio is not installed")
	}
	j.Name, j.Directory = "verify", dir
	if _, err := fio.Run(context.Background(), j); err != nil {
		var fe *fio.Error
		if errors.As(err, &fe) {
			t.Fatalf("%s: %v\n%s", fe.Cmdline, fe.Err, fe.Stderr)
		}
		t.Fatal(err)
	}
}

// TestFioVerify writes random 4 KiB blocks from 4 jobs, to one shared file
// (each job its own quarter) and to separate files, buffered and O_DIRECT,
// then has fio verify every block (crc32c), in both cache modes.
func TestFioVerify(t *testing.T) {
	for _, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: cc.opts})
			for _, direct := range []bool{false, true} {
				j := fio.Job{Direct: direct, IOEngine: "psync", RW: "randwrite", BS: 4096, Size: 2 << 20, NumJobs: 4, Verify: "crc32c"}
				if direct {
					j.IOEngine, j.IODepth = "libaio", 16
				}
				t.Run(fmt.Sprintf("direct=%d/shared", b2i(direct)), func(t *testing.T) {
					shared := j
					shared.Filename, shared.OffsetIncrement = "shared", 2<<20
					runFio(t, e.dir, shared)
				})
				t.Run(fmt.Sprintf("direct=%d/separate", b2i(direct)), func(t *testing.T) {
					runFio(t, e.dir, j)
				})
			}
			e.checkClean()
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
