package fusefs

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// helpers are routines a test runs in a child process (the test binary
// started again with SLUICE_FUSEFS_HELPER set): work that must not run in
// the process that serves the mount.
var helpers = map[string]func(args []string) error{
	"mmap": helperMmap,
	"perm": helperPerm,
}

func TestMain(m *testing.M) {
	if name := os.Getenv("SLUICE_FUSEFS_HELPER"); name != "" {
		if err := helpers[name](os.Args[len(os.Args)-5:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, dir := range []string{sluiceBinDir, publicBinDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// runHelper runs helper name in a child process with exactly five args.
func runHelper(t testing.TB, name string, args ...string) {
	t.Helper()
	for len(args) < 5 {
		args = append(args, "")
	}
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_FUSEFS_HELPER="+name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper %s %v: %v\n%s", name, args, err, out)
	}
}
