package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Issue 20's calls through the mount, each compared with the host kernel on
// a temporary directory: chown(f, -1, -1), renameat2's RENAME_WHITEOUT (and
// overlayfs using the mount as its upper layer), RWF_DONTCACHE.

// capV2 is a security.capability value (VFS_CAP_REVISION_2, no
// capabilities): what setcap writes.
var capV2 = []byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// chownResult is what chown(f, -1, -1) did to a file.
type chownResult struct {
	mode         uint32
	ctimeMoved   bool
	mtimeMoved   bool
	capsKept     bool
	uidGidIntact bool
}

func (r chownResult) String() string {
	return fmt.Sprintf("{mode %o, ctime moved %v, mtime moved %v, capability kept %v, owner intact %v}",
		r.mode, r.ctimeMoved, r.mtimeMoved, r.capsKept, r.uidGidIntact)
}

// chownUnchanged makes dir/name (a directory with isDir) with mode and a
// capability, runs chown(-1, -1) on it and reports the effect.
func chownUnchanged(t *testing.T, dir, name string, isDir bool, mode uint32) chownResult {
	t.Helper()
	p := filepath.Join(dir, name)
	var err error
	if isDir {
		err = os.Mkdir(p, 0o755)
	} else {
		err = os.WriteFile(p, nil, 0o644)
	}
	if err == nil {
		err = unix.Chmod(p, mode)
	}
	if err == nil {
		err = unix.Setxattr(p, "security.capability", capV2, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	var before, after unix.Stat_t
	if err := unix.Stat(p, &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the host's timestamp granularity
	if err := unix.Chown(p, -1, -1); err != nil {
		t.Fatalf("chown(%s, -1, -1): %v", p, err)
	}
	if err := unix.Stat(p, &after); err != nil {
		t.Fatal(err)
	}
	_, xerr := unix.Getxattr(p, "security.capability", make([]byte, 64))
	return chownResult{
		mode:         after.Mode & 0o7777,
		ctimeMoved:   after.Ctim != before.Ctim,
		mtimeMoved:   after.Mtim != before.Mtim,
		capsKept:     xerr == nil,
		uidGidIntact: after.Uid == before.Uid && after.Gid == before.Gid,
	}
}

// TestChownUnchanged: chown(f, -1, -1) through the mount does what the host
// kernel does on its own file system: ctime moves, and on non-directories
// the set-ID bits (set-group-ID only with group execute) and the
// capability go. The kernel sends it as a SETATTR with no attribute bit.
func TestChownUnchanged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: setting security.capability needs root")
	}
	e := newMountEnv(t, envOpts{})
	host := t.TempDir()
	for _, c := range []struct {
		name  string
		dir   bool
		mode  uint32
		wantM uint32 // what ext4 and XFS give; checked against the host too
	}{
		{"suid-sgid-gx", false, 0o6755, 0o755},
		{"sgid-no-gx", false, 0o6744, 0o2744},
		{"plain", false, 0o644, 0o644},
		{"dir", true, 0o6755, 0o6755},
	} {
		want := chownUnchanged(t, host, c.name, c.dir, c.mode)
		got := chownUnchanged(t, e.dir, c.name, c.dir, c.mode)
		if got != want {
			t.Errorf("%s: chown(-1, -1) on the mount %v, on the host %v", c.name, got, want)
		}
		if !got.ctimeMoved || got.mtimeMoved || got.mode != c.wantM || !got.uidGidIntact {
			t.Errorf("%s: chown(-1, -1) on the mount %v, want ctime moved, mode %o", c.name, got, c.wantM)
		}
	}
	// The adapter reads a SETATTR without attribute bits as that chown;
	// utimensat with both times UTIME_OMIT must not become one (the
	// kernel sends nothing for it).
	p := e.path("omit")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, 0o6755); err != nil {
		t.Fatal(err)
	}
	var before, after unix.Stat_t
	if err := unix.Stat(p, &before); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	omit := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, omit, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p, &after); err != nil || after.Mode&0o7777 != 0o6755 || after.Ctim != before.Ctim {
		t.Fatalf("utimensat(UTIME_OMIT, UTIME_OMIT): mode %o ctime moved %v, %v; want nothing changed", after.Mode&0o7777, after.Ctim != before.Ctim, err)
	}
	e.checkClean()
}

// whiteoutOf reports the stat of the name a RENAME_WHITEOUT left.
func whiteoutOf(t *testing.T, dir string) unix.Stat_t {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "src"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "src"), unix.AT_FDCWD, filepath.Join(dir, "dst"), unix.RENAME_WHITEOUT); err != nil {
		t.Fatalf("renameat2(RENAME_WHITEOUT) in %s: %v", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, "src"), &st); err != nil {
		t.Fatalf("the whiteout in %s: %v", dir, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dst")); err != nil || string(b) != "x" {
		t.Fatalf("the renamed file in %s: %q %v", dir, b, err)
	}
	return st
}

// TestRenameWhiteout: renameat2(RENAME_WHITEOUT) through the mount (the
// kernel sends FUSE_RENAME2 with the flag) leaves the same whiteout as the
// host's file system: a 0:0 character device, mode 0, the caller's.
func TestRenameWhiteout(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: RENAME_WHITEOUT needs CAP_MKNOD")
	}
	e := newMountEnv(t, envOpts{})
	want := whiteoutOf(t, t.TempDir())
	got := whiteoutOf(t, e.dir)
	if got.Mode != want.Mode || got.Rdev != want.Rdev || got.Uid != want.Uid || got.Gid != want.Gid || got.Nlink != want.Nlink {
		t.Fatalf("whiteout on the mount: mode %o rdev %d owner %d:%d nlink %d; on the host: mode %o rdev %d owner %d:%d nlink %d",
			got.Mode, got.Rdev, got.Uid, got.Gid, got.Nlink, want.Mode, want.Rdev, want.Uid, want.Gid, want.Nlink)
	}
	if got.Mode != unix.S_IFCHR || got.Rdev != 0 {
		t.Fatalf("whiteout mode %o rdev %d", got.Mode, got.Rdev)
	}
	p := e.path
	if err := os.WriteFile(p("a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("dst"), unix.RENAME_WHITEOUT|unix.RENAME_EXCHANGE); err != unix.EINVAL {
		t.Fatalf("WHITEOUT|EXCHANGE: %v, want EINVAL", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("dst"), unix.RENAME_WHITEOUT|unix.RENAME_NOREPLACE); err != unix.EEXIST {
		t.Fatalf("WHITEOUT|NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("b"), unix.RENAME_WHITEOUT|unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("WHITEOUT|NOREPLACE: %v", err)
	}
	if err := unix.Lstat(p("a"), &got); err != nil || got.Mode != unix.S_IFCHR {
		t.Fatalf("whiteout after WHITEOUT|NOREPLACE: %o %v", got.Mode, err)
	}
	e.checkClean()
}

// TestOverlayUpper: overlayfs takes a directory of the mount as its upper
// layer (with its work directory beside it): deleting a lower file leaves
// a whiteout in the upper layer and hides the file, and a directory made
// again over a deleted lower one is marked opaque with a trusted.* xattr.
func TestOverlayUpper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting overlayfs needs root")
	}
	if p, err := exec.LookPath("modprobe"); err == nil {
		_ = exec.Command(p, "overlay").Run()
	}
	e := newMountEnv(t, envOpts{})
	lower := t.TempDir()
	for _, p := range []string{"f", "d/x"} {
		if err := os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lower, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	upper, work, merged := e.path("upper"), e.path("work"), filepath.Join(t.TempDir(), "merged")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		t.Skipf("skipping: overlayfs cannot be mounted here (mount -t overlay -o %s: %v; is the overlay module loaded? the kernel log says why)", opts, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(merged, 0); err != nil {
			t.Errorf("unmounting the overlay: %v", err)
		}
	})
	if b, err := os.ReadFile(filepath.Join(merged, "f")); err != nil || string(b) != "f" {
		t.Fatalf("lower file through the overlay: %q %v", b, err)
	}
	if err := os.Remove(filepath.Join(merged, "f")); err != nil {
		t.Fatalf("deleting a lower file through the overlay: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(merged, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("deleted lower file still visible: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "f"), &st); err != nil || st.Mode != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout in the upper layer: mode %o rdev %d %v", st.Mode, st.Rdev, err)
	}
	// A lower directory removed and made again: opaque in the upper layer.
	if err := os.RemoveAll(filepath.Join(merged, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(merged, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(filepath.Join(merged, "d")); err != nil || len(ents) != 0 {
		t.Fatalf("directory made again over a deleted lower one: %v %v", ents, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Getxattr(filepath.Join(upper, "d"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("trusted.overlay.opaque on the upper directory: %q %v", buf[:n], err)
	}
	// Copy-up of a lower file that is written.
	if err := os.WriteFile(filepath.Join(merged, "new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "new")); err != nil || string(b) != "n" {
		t.Fatalf("new file in the upper layer: %q %v", b, err)
	}
}

// TestDontCacheKernel records what the kernel does with RWF_DONTCACHE on a
// FUSE file: on 6.18 its VFS refuses the flag with EOPNOTSUPP before any
// request is sent (FUSE's file operations do not declare FOP_DONTCACHE,
// and FUSE_READ and FUSE_WRITE have no field for it), while the host's
// ext4 takes it. The engine's RWFDontCache is for library and ring users.
func TestDontCacheKernel(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	try := func(dir string) (data []byte, werr, rerr error) {
		p := filepath.Join(dir, "dc")
		if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		want := pattern(4096, 7)
		_, werr = unix.Pwritev2(int(f.Fd()), [][]byte{want}, 4096, unix.RWF_DONTCACHE)
		got := make([]byte, 4096)
		_, rerr = unix.Preadv2(int(f.Fd()), [][]byte{got}, 4096, unix.RWF_DONTCACHE)
		return got, werr, rerr
	}
	_, hw, hr := try(t.TempDir())
	if hw != nil || hr != nil {
		t.Logf("the host file system refuses RWF_DONTCACHE too (write %v, read %v): kernel before 6.14, or no FOP_DONTCACHE there", hw, hr)
	}
	got, mw, mr := try(e.dir)
	switch {
	case errors.Is(mw, unix.EOPNOTSUPP) && errors.Is(mr, unix.EOPNOTSUPP):
		t.Logf("RWF_DONTCACHE on the mount: EOPNOTSUPP from the kernel, as on 6.18")
	case mw == nil && mr == nil:
		t.Logf("this kernel takes RWF_DONTCACHE on FUSE files (it decides; sluice is not told)")
		if want := pattern(4096, 7); string(got) != string(want) {
			t.Fatal("RWF_DONTCACHE read on the mount returned other bytes than the RWF_DONTCACHE write wrote")
		}
	default:
		t.Fatalf("RWF_DONTCACHE on the mount: write %v, read %v", mw, mr)
	}
	e.checkClean()
}

// fiemapIoctl issues FS_IOC_FIEMAP with room for no extents (only the
// count comes back), as `filefrag` does first.
func fiemapIoctl(f *os.File) (mapped uint32, err error) {
	// struct fiemap: fm_start, fm_length u64; fm_flags, fm_mapped_extents,
	// fm_extent_count, fm_reserved u32.
	var fm [32]byte
	binary.NativeEndian.PutUint64(fm[8:], ^uint64(0))
	const fsIocFiemap = 0xc020660b // _IOWR('f', 11, struct fiemap)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&fm[0]))); e != 0 {
		return 0, e
	}
	return binary.NativeEndian.Uint32(fm[20:]), nil
}

// TestLinuxAPIKernelRefusals records what the kernel does, on the host file
// system and on the mount, with the calls of issue 20 that FUSE does not
// forward: FS_IOC_FIEMAP (do_vfs_ioctl -> ioctl_fiemap answers EOPNOTSUPP
// itself, as FUSE has no fiemap inode operation) and fallocate's
// COLLAPSE_RANGE and INSERT_RANGE (fuse_file_fallocate refuses every mode
// but KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE with EOPNOTSUPP). Neither
// reaches sluice; the engine serves them on the library and the ring.
func TestLinuxAPIKernelRefusals(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	try := func(dir string) (fiemapErr, collapseErr, insertErr error) {
		p := filepath.Join(dir, "fm")
		if err := os.WriteFile(p, make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		_, fiemapErr = fiemapIoctl(f)
		collapseErr = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096)
		insertErr = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_INSERT_RANGE, 0, 4096)
		return
	}
	hf, hc, hi := try(t.TempDir())
	t.Logf("host: FIEMAP %v, COLLAPSE_RANGE %v, INSERT_RANGE %v", hf, hc, hi)
	mf, mc, mi := try(e.dir)
	for _, c := range []struct {
		name string
		err  error
	}{{"FS_IOC_FIEMAP", mf}, {"FALLOC_FL_COLLAPSE_RANGE", mc}, {"FALLOC_FL_INSERT_RANGE", mi}} {
		switch {
		case errors.Is(c.err, unix.EOPNOTSUPP):
			t.Logf("%s on the mount: EOPNOTSUPP from the kernel, as on 6.18", c.name)
		case c.err == nil:
			t.Logf("this kernel passes %s to FUSE servers, and sluice served it", c.name)
		default:
			t.Errorf("%s on the mount: %v", c.name, c.err)
		}
	}
	e.checkClean()
}
