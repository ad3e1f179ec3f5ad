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

	"github.com/sluicefs/sluice/fusefs"
)

func init() {
	register(&command{
		name:    "umount",
		usage:   "DIR [--lazy] [--force] [--timeout 60s]",
		summary: "unmount a sluice mount (and clear a stale one)",
		run:     runUmount,
	})
}

// runUmount unmounts DIR and waits for its daemon to finish writing the
// volume back. A stale mount (its daemon died: ENOTCONN) is detached
// lazily, which always works.
func runUmount(args []string, stdout io.Writer) error {
	fl := newFlags("umount")
	lazy := fl.Bool("lazy", false, "detach now; the mount ends when the last open file is closed (umount -l)")
	force := fl.Bool("force", false, "abort the FUSE connection: open files fail with ENOTCONN (umount -f)")
	timeout := fl.Duration("timeout", 60*time.Second, "how long to wait for the daemon to close the volume")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{"expected one DIR"}
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, syscall.ENOTCONN) {
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
	if err := fusefs.Unmount(dir, fusefs.UnmountOptions{Lazy: *lazy, Force: *force}); err != nil {
		return err
	}
	if *lazy && !*force {
		fmt.Fprintf(stdout, "detached %s; it ends when its last open file is closed\n", dir)
		return nil
	}
	if pid > 0 {
		if !waitExit(pid, *timeout) {
			return fmt.Errorf("unmounted %s, but sluice (pid %d) has not closed volume %s after %v", dir, pid, m.Source, *timeout)
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
