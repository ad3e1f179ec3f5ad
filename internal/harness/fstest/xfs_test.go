package fstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The host oracle of the reflink calls is XFS: ext4, the file system of
// the host's temporary directory, has none of them. When the tests run as
// root and mkfs.xfs is installed (as in CI), each XFS the package needs is
// made once per run, on first use: a sparse image, mkfs.xfs -m reflink=1
// with the block size the engine uses, a loop device, a mount under a
// temporary directory (fstest-xfs*). TestMain tears them down at the end;
// a run that is killed (or times out) leaves them mounted.
//
// XFS_IOC_EXCHANGE_RANGE needs the superblock's EXCHRANGE incompat bit,
// which xfsprogs 6.1 (this machine's) cannot set: mkfs.xfs -i
// exchange=1 came with 6.10. Then the bit is set with xfs_db on the image
// before the mount. The kernel (6.10 and later) implements the feature
// whole: the bit only allows it, and names no structure that mkfs would
// have had to make, so the calls run the kernel's real code. Only after a
// probe exchange succeeds on the mount is the exchange used as an oracle;
// if the mount or the probe fails, the file system is made again without
// the bit and exchanges are compared with the model only.
//
// Untorn writes (RWF_ATOMIC) need no feature bit: XFS does them in
// software, by copy-on-write, on any file system with reflink (Linux
// 6.16), and statx's STATX_WRITE_ATOMIC reports a block to 1 MiB on these
// images, sluice's limits. A probe checks the limits and one write
// (probeAtomic); where it fails, atomic writes are compared with the
// model only.

// xfsImageBytes is the size of a sparse XFS image. mkfs.xfs 6.1 refuses
// file systems under 300 MB.
const xfsImageBytes = 512 << 20

// xfsVolume is a mounted XFS with reflink. Its fields are set by xfsFor
// (and cleared by tearDownXFS) under xfsVolumes' lock, and only read in
// between, but for seq.
type xfsVolume struct {
	blockSize int64
	dir       string // temporary directory: the image and the mount point
	mnt       string // mount point
	loop      string // loop device
	// exchange says XFS_IOC_EXCHANGE_RANGE works.
	exchange bool
	// atomicWhy says why RWF_ATOMIC cannot serve as an oracle (not
	// supported, or other limits than sluice's), or is empty.
	atomicWhy string
	// why says why the volume is not there (mnt is empty) or what it
	// lacks.
	why string
	// seq numbers the tests' directories.
	seq atomic.Int64
}

var xfsVolumes struct {
	sync.Mutex
	byBlockSize map[int64]*xfsVolume // protected by the mutex
}

// xfsFor returns the XFS with the given block size, made on first use,
// or a volume whose mnt is empty and whose why says why there is none.
func xfsFor(blockSize int64) *xfsVolume {
	xfsVolumes.Lock()
	defer xfsVolumes.Unlock()
	if v, ok := xfsVolumes.byBlockSize[blockSize]; ok {
		return v
	}
	if xfsVolumes.byBlockSize == nil {
		xfsVolumes.byBlockSize = map[int64]*xfsVolume{}
	}
	v := &xfsVolume{blockSize: blockSize}
	if err := v.setUp(); err != nil {
		v.why = err.Error()
		v.tearDown()
	} else if err := probeAtomic(v.mnt, blockSize); err != nil {
		v.atomicWhy = err.Error()
	}
	xfsVolumes.byBlockSize[blockSize] = v
	return v
}

// tearDownXFS unmounts and removes every volume xfsFor made.
func tearDownXFS() {
	xfsVolumes.Lock()
	defer xfsVolumes.Unlock()
	for _, v := range xfsVolumes.byBlockSize {
		v.tearDown()
	}
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func (v *xfsVolume) setUp() error {
	switch {
	case os.Geteuid() != 0:
		return fmt.Errorf("not root: no loop device")
	case !haveCommand("mkfs.xfs") || !haveCommand("losetup") || !haveCommand("mount"):
		return fmt.Errorf("mkfs.xfs, losetup or mount not installed")
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("fstest-xfs%d-", v.blockSize))
	if err != nil {
		return err
	}
	v.dir = dir
	img := filepath.Join(dir, "image")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	wantExchange := true
	for {
		if err := v.format(img, wantExchange); err != nil {
			if !wantExchange {
				return err
			}
			v.why = "exchange-range: " + err.Error()
			wantExchange = false
			continue
		}
		err := v.mount(img, mnt)
		if err == nil && wantExchange {
			if err = probeExchange(mnt, v.blockSize); err == nil {
				v.exchange = true
				return nil
			}
			v.unmount()
		}
		if !wantExchange {
			return err
		}
		v.why = "exchange-range: " + err.Error()
		wantExchange = false
	}
}

func haveCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// format makes the file system on img, with the EXCHRANGE bit if
// exchange is set.
func (v *xfsVolume) format(img string, exchange bool) error {
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(img, xfsImageBytes); err != nil {
		return err
	}
	args := []string{"-q", "-f", "-m", "reflink=1", "-b", "size=" + strconv.FormatInt(v.blockSize, 10)}
	if !exchange {
		_, err := run("mkfs.xfs", append(args, img)...)
		return err
	}
	if _, err := run("mkfs.xfs", append(args, "-i", "exchange=1", img)...); err == nil {
		return nil
	}
	if _, err := run("mkfs.xfs", append(args, img)...); err != nil {
		return err
	}
	if !haveCommand("xfs_db") {
		return fmt.Errorf("mkfs.xfs cannot set it and xfs_db is not installed")
	}
	out, err := run("xfs_db", "-c", "sb 0", "-c", "print features_incompat", img)
	if err != nil {
		return err
	}
	_, val, ok := strings.Cut(strings.TrimSpace(out), " = ")
	incompat, perr := strconv.ParseUint(val, 0, 32)
	if !ok || perr != nil {
		return fmt.Errorf("xfs_db: unexpected output %q", out)
	}
	const exchrange = 0x40 // XFS_SB_FEAT_INCOMPAT_EXCHRANGE
	_, err = run("xfs_db", "-x", "-c", "sb 0", "-c", fmt.Sprintf("write -d features_incompat %#x", incompat|exchrange), img)
	return err
}

func (v *xfsVolume) mount(img, mnt string) error {
	out, err := run("losetup", "--find", "--show", img)
	if err != nil {
		return err
	}
	v.loop = strings.TrimSpace(out)
	if _, err := run("mount", "-t", "xfs", v.loop, mnt); err != nil {
		v.unmount()
		return err
	}
	v.mnt = mnt
	return os.Chmod(mnt, 0o755)
}

// unmount unmounts v and detaches its loop device. A mount still busy
// (a descriptor a failed test left open) is detached lazily: the kernel
// unmounts it when the last descriptor goes.
func (v *xfsVolume) unmount() {
	if v.mnt != "" {
		if _, err := run("umount", v.mnt); err != nil {
			if _, err := run("umount", "-l", v.mnt); err != nil {
				fmt.Fprintf(os.Stderr, "fstest: %v\n", err)
			}
		}
		v.mnt = ""
	}
	if v.loop != "" {
		if _, err := run("losetup", "-d", v.loop); err != nil {
			fmt.Fprintf(os.Stderr, "fstest: %v\n", err)
		}
		v.loop = ""
	}
}

func (v *xfsVolume) tearDown() {
	v.unmount()
	if v.dir != "" {
		os.RemoveAll(v.dir)
		v.dir = ""
	}
}

// probeExchange exchanges the first blocks of two new files in dir and
// checks that they changed places.
func probeExchange(dir string, bs int64) error {
	h, err := NewHost(dir)
	if err != nil {
		return err
	}
	defer h.Close()
	r := NewRunner(h)
	defer r.CloseAll()
	for _, op := range seq(openOp(0, ".probe1", rdwr|creat), pwriteOp(0, 0, bs, 1), openOp(1, ".probe2", rdwr|creat), pwriteOp(1, 0, bs, 2),
		exchangeOp(1, 0, 0, 0, bs, 0)) {
		if res := r.Apply(op); res.Errno != 0 {
			return fmt.Errorf("probe %v: %v", op, res)
		}
	}
	got := r.Apply(preadOp(0, 0, bs))
	r.CloseAll()
	h.Unlink(".probe1")
	h.Unlink(".probe2")
	if !bytes.Equal(got.Data, Pattern(int(bs), 2, 0)) {
		return fmt.Errorf("probe: the blocks did not change places")
	}
	return nil
}

// probeAtomic checks that RWF_ATOMIC works in dir as it does on sluice:
// statx reports sluice's limits for a file of a file system with
// blockSize-byte blocks (AtomicWriteLimits: a block to max(a block,
// 1 MiB), one segment), and an O_DIRECT atomic write of the largest unit
// succeeds.
func probeAtomic(dir string, blockSize int64) error {
	p := filepath.Join(dir, ".probe-atomic")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer os.Remove(p)
	defer unix.Close(fd)
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_WRITE_ATOMIC, &st); err != nil {
		return fmt.Errorf("probe: statx: %w", err)
	}
	wantMax := max(blockSize, atomicWriteMax)
	if st.Mask&unix.STATX_WRITE_ATOMIC == 0 || int64(st.Atomic_write_unit_min) != blockSize ||
		int64(st.Atomic_write_unit_max) != wantMax || st.Atomic_write_segments_max < 1 {
		return fmt.Errorf("probe: statx reports atomic writes of %d to %d bytes (%d segments), sluice takes %d to %d",
			st.Atomic_write_unit_min, st.Atomic_write_unit_max, st.Atomic_write_segments_max, blockSize, wantMax)
	}
	if _, err := unix.Pwritev2(fd, [][]byte{Pattern(int(wantMax), 1, 0)}, 0, unix.RWF_ATOMIC); err != nil {
		return fmt.Errorf("probe: an RWF_ATOMIC write of %d bytes: %w", wantMax, err)
	}
	return nil
}

// newXFSHost returns a Host on a fresh directory of v (mode 0755, like the
// engine's root), removed at the end of the test.
func newXFSHost(t testing.TB, v *xfsVolume) *Host {
	t.Helper()
	dir := filepath.Join(v.mnt, fmt.Sprintf("t%d", v.seq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return h
}

// needsXFS reports whether ops call what ext4 lacks (the reflink calls,
// UNSHARE_RANGE, RWF_ATOMIC without hardware support) or what sluice does
// as XFS does (COLLAPSE_RANGE, INSERT_RANGE), and whether they exchange
// ranges or write atomically.
func needsXFS(ops []Op) (xfs, exchange, atomic bool) {
	for _, op := range ops {
		switch {
		case op.Kind == OpExchangeRange:
			xfs, exchange = true, true
		case op.Kind == OpPwriteAtomic:
			xfs, atomic = true, true
		case op.Kind == OpClone, op.Kind == OpCloneRange, op.Kind == OpDedupeRange,
			op.Kind == OpFallocate && op.Flags&(0x08|0x20|0x40) != 0:
			xfs = true
		}
	}
	return xfs, exchange, atomic
}

// hostFor returns the host target for ops on an engine of block size bs:
// a temporary directory (ext4) if ops need no XFS, else a directory of the
// XFS with that block size; or nil and why there is none.
func hostFor(t testing.TB, ops []Op, bs int64) (Target, string) {
	xfs, exchange, atomic := needsXFS(ops)
	switch {
	case !xfs:
		return newTestHost(t), ""
	case bs > int64(os.Getpagesize()):
		// XFS blocks larger than pages (Linux 6.12's large block
		// sizes) are experimental, and need large folios that memory
		// fragmentation can refuse (ENOMEM): no oracle.
		return nil, fmt.Sprintf("no XFS with %d B blocks: blocks larger than pages are experimental in XFS", bs)
	}
	v := xfsFor(bs)
	switch {
	case v.mnt == "":
		return nil, fmt.Sprintf("no XFS with %d B blocks: %s", bs, v.why)
	case exchange && !v.exchange:
		return nil, fmt.Sprintf("the XFS with %d B blocks cannot exchange ranges: %s", bs, v.why)
	case atomic && v.atomicWhy != "":
		return nil, fmt.Sprintf("the XFS with %d B blocks is no oracle of RWF_ATOMIC: %s", bs, v.atomicWhy)
	}
	return newXFSHost(t, v), ""
}
