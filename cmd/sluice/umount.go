package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicefs/sluice/fusefs"
)

func newUmountCommand() *cobra.Command {
	var f umountFlags
	cmd := &cobra.Command{
		Use:   "umount DIR [--lazy] [--force] [--timeout 60s]",
		Short: "unmount a sluice mount (and clear a stale one)",
		Long: `Unmount the sluice mount on DIR and wait (up to --timeout) for its sluice mount
process to write the volume back and close it. A stale mount, whose process died
(the mount point answers ENOTCONN), is detached lazily, which always works; the
next sluice mount recovers the volume. Works for the user who mounted through
fusermount3 as well as for root.`,
		Args: wantArgs(1, "one DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUmount(args[0], &f, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.lazy, "lazy", false, "detach now; the mount ends when the last open file is closed (umount -l)")
	fl.BoolVar(&f.force, "force", false, "abort the FUSE connection: open files fail with ENOTCONN (umount -f)")
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long to wait (`DURATION`) for the sluice mount process to close the volume")
	return cmd
}

// umountFlags are the flags of umount.
type umountFlags struct {
	lazy, force bool
	timeout     time.Duration
}

// runUmount unmounts DIR and waits for its daemon to finish writing the
// volume back. A stale mount (its daemon died: ENOTCONN) is detached
// lazily, which always works.
func runUmount(dir string, f *umountFlags, stdout io.Writer) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); fusefs.ConnectionGone(err) {
		if err := fusefs.Unmount(dir, fusefs.UnmountOptions{Lazy: true}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "cleared the stale mount on %s (its daemon had died); the next sluice mount recovers the volume\n", dir)
		return nil
	}
	m, ok := fusefs.FindMount(dir)
	if !ok {
		return fmt.Errorf("%s is not mounted", dir)
	}
	if !strings.HasPrefix(m.FSType, "fuse") {
		return fmt.Errorf("%s is a %s mount, not a sluice one", dir, m.FSType)
	}
	pid := daemonPid(m.Source)
	if err := fusefs.Unmount(dir, fusefs.UnmountOptions{Lazy: f.lazy, Force: f.force}); err != nil {
		return err
	}
	if f.lazy && !f.force {
		fmt.Fprintf(stdout, "detached %s; it ends when its last open file is closed\n", dir)
		return nil
	}
	if pid > 0 {
		if !waitExit(pid, f.timeout) {
			return fmt.Errorf("unmounted %s, but sluice (pid %d) has not closed volume %s after %v", dir, pid, m.Source, f.timeout)
		}
		fmt.Fprintf(stdout, "unmounted %s; sluice (pid %d) closed volume %s\n", dir, pid, m.Source)
		return nil
	}
	fmt.Fprintf(stdout, "unmounted %s\n", dir)
	return nil
}

// daemonPid reads the pid of the process holding volume dir from its lock
// file (0 if unknown). `sluice mount` records the volume as the mount's
// source.
func daemonPid(volDir string) int {
	b, err := os.ReadFile(filepath.Join(volDir, "lock"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return 0
	}
	return pid
}

// waitExit waits until process pid is gone (or a zombie) or the timeout
// passes.
func waitExit(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			// "pid (comm) S ...": a zombie has let go of the volume.
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
