package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/internal/harness/cmdout"
)

// Peer target labels other than a --target directory.
const (
	TargetEngine = "engine"
	PolicyPeer   = "kernel" // the policy of every peer row
)

// peer is a directory the workloads run on through system calls.
type peer struct {
	label string
	dir   string
	info  PeerInfo
	// data and w5 are the prepared files ("" if not needed); a1 and z1
	// the files A1's and Z1's cells make afresh.
	data, w5, a1, z1 string
	// keep leaves the files in place at the end (a kept work directory).
	keep bool
	// dev is the block device's major:minor for device counts ("" if
	// none); devExclusive says the run made that device (a kernel peer's
	// loop device), so its counts are the workload's alone.
	dev          string
	devExclusive bool
	run          sysRunner
}

// prepareFile makes path a fully written file of size bytes (sequential
// 1 MiB writes of pseudo-random data, O_DIRECT where the file system
// takes it, then fsync), so that overwrites find allocated, written
// blocks and nothing is left dirty. An existing file of that size is
// kept when reuse is set.
func prepareFile(ctx context.Context, path string, size int64, reuse bool) error {
	const chunk = 1 << 20
	if st, err := os.Stat(path); reuse && err == nil && st.Size() == size {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|unix.O_DIRECT, 0o644)
	if errors.Is(err, unix.EINVAL) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	buf := device.AlignedBuf(chunk)
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	for off := int64(0); off < size; off += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		fillRandom(buf, rng)
		if _, err := f.WriteAt(buf[:min(chunk, size-off)], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// dropCache makes path cold for the next cell: its dirty pages written
// and every cached page dropped (fadvise DONTNEED), and, as root, the
// whole page cache dropped too (drop_caches), which also empties the
// dentry and inode caches. It returns the method used.
func dropCache(path string, root bool) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return "", err
	}
	if !root {
		return "fadvise(DONTNEED) of the file (not root: drop_caches unavailable)", nil
	}
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return "fadvise(DONTNEED) of the file (drop_caches failed: " + err.Error() + ")", nil
	}
	return "fadvise(DONTNEED) of the file + sync + drop_caches=3", nil
}

// freeBytes returns the space available to this user under dir.
func freeBytes(dir string) (int64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return int64(s.Bavail) * s.Bsize, nil
}

// kernelPeer is a kernel file system on a loop device over an image file.
type kernelPeer struct {
	fstype, img, mnt, loop string
	setup                  []string
}

// makeKernelPeer makes fstype (xfs or ext4) on a direct-I/O loop device
// over a sparse image of size bytes at img, and mounts it at mnt. On
// error it undoes what it did.
func makeKernelPeer(ctx context.Context, fstype, img, mnt string, size int64) (*kernelPeer, error) {
	k := &kernelPeer{fstype: fstype, img: img, mnt: mnt}
	run := func(name string, args ...string) (string, error) {
		k.setup = append(k.setup, name+" "+strings.Join(args, " "))
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, cmdout.FirstLines(string(out), 3))
		}
		return strings.TrimSpace(string(out)), nil
	}
	f, err := os.Create(img)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size)
	f.Close()
	k.setup = append(k.setup, fmt.Sprintf("truncate -s %d %s", size, img))
	if err != nil {
		os.Remove(img)
		return nil, err
	}
	if k.loop, err = run("losetup", "--direct-io=on", "-f", "--show", img); err != nil {
		os.Remove(img)
		return nil, err
	}
	mkfs := []string{"mkfs.xfs", "-f", "-q", k.loop}
	if fstype == "ext4" {
		mkfs = []string{"mkfs.ext4", "-F", "-q", k.loop}
	}
	if _, err = run(mkfs[0], mkfs[1:]...); err == nil {
		if err = os.MkdirAll(mnt, 0o755); err == nil {
			_, err = run("mount", k.loop, mnt)
		}
	}
	if err != nil {
		k.remove()
		return nil, err
	}
	return k, nil
}

// remove unmounts, detaches and deletes everything makeKernelPeer made.
func (k *kernelPeer) remove() error {
	var errs []error
	if k.mnt != "" {
		if isMountPoint(k.mnt) {
			if out, err := exec.Command("umount", k.mnt).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("umount %s: %v: %s", k.mnt, err, cmdout.FirstLines(string(out), 2)))
			}
		}
		os.Remove(k.mnt)
	}
	if k.loop != "" {
		if out, err := exec.Command("losetup", "-d", k.loop).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup -d %s: %v: %s", k.loop, err, cmdout.FirstLines(string(out), 2)))
		}
	}
	if err := os.Remove(k.img); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// isMountPoint reports whether dir is a mount point.
func isMountPoint(dir string) bool {
	m, ok := mountOf(dir)
	abs, _ := filepath.Abs(dir)
	return ok && m.Point == abs
}

// checkKernelPeerTools returns why kernel peers cannot be made, or nil.
func checkKernelPeerTools() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("--kernel-peers needs root (losetup, mkfs, mount)")
	}
	var missing []string
	for _, t := range []string{"losetup", "mkfs.xfs", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--kernel-peers needs %s in PATH", strings.Join(missing, ", "))
	}
	return nil
}
