package fuseuring

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// Paths of the kernel knobs this package reads. Variables so that tests
// can point them elsewhere.
var (
	enableURingPath  = "/sys/module/fuse/parameters/enable_uring"
	fuseModulePath   = "/sys/module/fuse"
	possibleCPUsPath = "/sys/devices/system/cpu/possible"
)

// Supported returns nil if the running kernel has FUSE over io_uring: the
// fuse module's enable_uring parameter exists (CONFIG_FUSE_IO_URING,
// Linux 6.14 and later). Otherwise it says why. It does not say whether the
// parameter is on; see Enable.
func Supported() error {
	_, err := os.Stat(enableURingPath)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, merr := os.Stat(fuseModulePath); merr != nil {
			return fmt.Errorf("fuseuring: the fuse module is not loaded (no %s)", fuseModulePath)
		}
		return fmt.Errorf("fuseuring: kernel built without CONFIG_FUSE_IO_URING (no %s)", enableURingPath)
	}
	return fmt.Errorf("fuseuring: %w", err)
}

// Enabled reports whether enable_uring is on. While it is off the kernel
// neither offers FUSE_OVER_IO_URING in INIT nor accepts a REGISTER on a
// connection that was not INITialised with it (EOPNOTSUPP).
func Enabled() (bool, error) {
	b, err := os.ReadFile(enableURingPath)
	if err != nil {
		return false, fmt.Errorf("fuseuring: %w", err)
	}
	return bytes.HasPrefix(bytes.TrimSpace(b), []byte("Y")), nil
}

// Enable turns enable_uring on (root only) and reports whether it was off.
// It is system-wide and must happen before the mount whose connection is
// to use io_uring: the kernel decides at INIT whether to offer
// FUSE_OVER_IO_URING (fuse_send_init) and whether to accept it in the
// reply (process_init_reply).
func Enable() (changed bool, err error) {
	return setEnabled(true)
}

// Disable turns enable_uring off and reports whether it was on. A
// connection that was INITialised with io_uring keeps it.
func Disable() (changed bool, err error) {
	return setEnabled(false)
}

func setEnabled(on bool) (bool, error) {
	if err := Supported(); err != nil {
		return false, err
	}
	cur, err := Enabled()
	if err != nil {
		return false, err
	}
	if cur == on {
		return false, nil
	}
	v := "N"
	if on {
		v = "Y"
	}
	if err := os.WriteFile(enableURingPath, []byte(v), 0); err != nil {
		return false, fmt.Errorf("fuseuring: setting enable_uring to %s: %w", v, err)
	}
	return true, nil
}

// PossibleCPUs returns the number of possible CPUs
// (/sys/devices/system/cpu/possible, a list like "0-3" or "0-3,8-11"),
// which is num_possible_cpus(): the kernel makes one ring queue per
// possible CPU (fuse_uring_create) and sends each request to the queue of
// the CPU the requesting task runs on (fuse_uring_task_to_queue).
func PossibleCPUs() (int, error) {
	b, err := os.ReadFile(possibleCPUsPath)
	if err != nil {
		return 0, fmt.Errorf("fuseuring: %w", err)
	}
	n, err := parseCPUList(string(b))
	if err != nil {
		return 0, fmt.Errorf("fuseuring: %s: %w", possibleCPUsPath, err)
	}
	return n, nil
}

// parseCPUList counts the CPUs in a kernel CPU list ("0-3,5,7-8").
func parseCPUList(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty CPU list")
	}
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("bad CPU list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}
