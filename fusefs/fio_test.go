package fusefs

import (
	"fmt"
	"os/exec"
	"testing"
)

// runFio runs fio with the given job options and fails the test if fio
// reports an error (a verify failure included).
func runFio(t *testing.T, dir string, args ...string) {
	t.Helper()
	fio, err := exec.LookPath("fio")
	if err != nil {
		t.Skip("fio is not installed")
	}
	all := append([]string{"--name=verify", "--directory=" + dir, "--output-format=terse", "--minimal", "--verify_state_save=0"}, args...)
	out, err := exec.Command(fio, all...).CombinedOutput()
	if err != nil {
		t.Fatalf("fio %v: %v\n%s", args, err, out)
	}
}

// TestFioVerify writes random 4 KiB blocks from 4 jobs, to one shared file
// (each job its own quarter) and to separate files, buffered and O_DIRECT,
// then has fio verify every block (crc32c), in both cache modes.
func TestFioVerify(t *testing.T) {
	for _, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: cc.opts})
			common := []string{"--rw=randwrite", "--bs=4k", "--size=2m", "--numjobs=4", "--verify=crc32c",
				"--do_verify=1", "--verify_fatal=1", "--group_reporting"}
			for _, direct := range []int{0, 1} {
				engine := []string{"--ioengine=psync"}
				if direct == 1 {
					engine = []string{"--ioengine=libaio", "--iodepth=16"}
				}
				t.Run(fmt.Sprintf("direct=%d/shared", direct), func(t *testing.T) {
					args := append(append([]string{fmt.Sprintf("--direct=%d", direct), "--filename=shared", "--offset_increment=2m"}, engine...), common...)
					runFio(t, e.dir, args...)
				})
				t.Run(fmt.Sprintf("direct=%d/separate", direct), func(t *testing.T) {
					args := append(append([]string{fmt.Sprintf("--direct=%d", direct)}, engine...), common...)
					runFio(t, e.dir, args...)
				})
			}
			e.checkClean()
		})
	}
}
