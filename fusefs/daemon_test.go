package fusefs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/volume"
)

// Tests of the `sluice mount` daemon as a separate process: kill -9 and
// recovery, SIGTERM under load, stale mounts.

var (
	sluiceBinOnce sync.Once
	sluiceBin     string
	sluiceBinErr  error
	sluiceBinDir  string
)

// buildSluice builds cmd/sluice once per test binary run.
func buildSluice(t *testing.T) string {
	t.Helper()
	sluiceBinOnce.Do(func() {
		sluiceBinDir, sluiceBinErr = os.MkdirTemp("", "fusefs-sluice-bin")
		if sluiceBinErr != nil {
			return
		}
		sluiceBin = filepath.Join(sluiceBinDir, "sluice")
		out, err := exec.Command("go", "build", "-o", sluiceBin, "github.com/sluicefs/sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			sluiceBinErr = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if sluiceBinErr != nil {
		t.Fatal(sluiceBinErr)
	}
	return sluiceBin
}

// daemon is a `sluice mount` process.
type daemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	exited chan struct{}
	err    error // exit status, valid after exited is closed
}

// startDaemon runs sluice mount VOL MNT args... and waits until the mount
// is up.
func startDaemon(t *testing.T, vol, mnt string, args ...string) *daemon {
	t.Helper()
	return startDaemonAs(t, nil, vol, mnt, args...)
}

// startDaemonAs is startDaemon with the daemon running as cred (nil: as
// this process).
func startDaemonAs(t *testing.T, cred *syscall.Credential, vol, mnt string, args ...string) *daemon {
	t.Helper()
	bin := buildSluice(t)
	if tr := os.Getenv("SLUICE_FUSE_TRANSPORT"); tr != "" {
		args = append(args, "--transport", tr) // CI runs the suite once per transport
	}
	d := &daemon{t: t, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append([]string{"mount", vol, mnt, "--size", "1G"}, args...)...)
	if cred != nil {
		d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	d.cmd.Stderr = d.stderr
	pr, pw := io.Pipe()
	d.cmd.Stdout = pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mounted := make(chan struct{})
	scanned := make(chan struct{}) // every line of stdout is in d.stdout
	go func() {
		defer close(scanned)
		s := bufio.NewScanner(pr)
		once := sync.Once{}
		for s.Scan() {
			d.stdout.Write(append(s.Bytes(), '\n'))
			if strings.HasPrefix(s.Text(), "mounted ") {
				once.Do(func() { close(mounted) })
			}
		}
	}()
	go func() {
		d.err = d.cmd.Wait()
		pw.Close()
		<-scanned // the daemon's last lines, before anyone reads them
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			d.cmd.Process.Kill()
			<-d.exited
		}
		_ = Unmount(mnt, UnmountOptions{Force: true})
	})
	select {
	case <-mounted:
	case <-d.exited:
		t.Fatalf("sluice mount exited: %v\nstdout:\n%s\nstderr:\n%s", d.err, d.stdout, d.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("sluice mount did not mount in 30s\nstdout:\n%s\nstderr:\n%s", d.stdout, d.stderr)
	}
	return d
}

// wait waits for the daemon to exit and returns its exit code.
func (d *daemon) wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.exited:
	case <-time.After(timeout):
		d.t.Fatalf("sluice mount did not exit in %v\nstdout:\n%s\nstderr:\n%s", timeout, d.stdout, d.stderr)
	}
	var ee *exec.ExitError
	if errors.As(d.err, &ee) {
		return ee.ExitCode()
	}
	if d.err != nil {
		d.t.Fatal(d.err)
	}
	return 0
}

// volumeAndMountpoint returns, in a fresh temporary directory, a volume
// path (not yet created) and a mount point (created).
func volumeAndMountpoint(t *testing.T) (vol, mnt string) {
	t.Helper()
	tmp := t.TempDir()
	vol, mnt = filepath.Join(tmp, "vol"), filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return vol, mnt
}

// umount runs sluice umount on mnt, which must succeed, and returns the
// daemon's exit code.
func (d *daemon) umount(mnt string) int {
	d.t.Helper()
	if code, out := sluiceCmd(d.t, "umount", mnt); code != 0 {
		d.t.Fatalf("umount: exit %d: %s", code, out)
	}
	return d.wait(30 * time.Second)
}

// sluiceCmd runs the sluice binary and returns its exit code and output.
func sluiceCmd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(buildSluice(t), args...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// checkVolume opens the unmounted volume vol read-only and fails the test
// if the consistency check finds problems or orphans left.
func checkVolume(t *testing.T, vol string) {
	t.Helper()
	v, err := volume.Open(vol, volume.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r, err := sluice.CheckVolume(v)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() || len(r.Orphans) > 0 {
		t.Fatalf("fsck: problems %v, orphans %v", r.Problems, r.Orphans)
	}
}

// syncedWrite writes data to path (O_DIRECT when direct) and fsyncs it.
func syncedWrite(t *testing.T, path string, data []byte, direct bool) {
	t.Helper()
	flags := syscall.O_CREAT | syscall.O_TRUNC | syscall.O_WRONLY
	if direct {
		flags |= syscall.O_DIRECT
	}
	fd, err := syscall.Open(path, flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if n, err := syscall.Pwrite(fd, data, 0); err != nil || n != len(data) {
		t.Fatalf("write %s: %d %v", path, n, err)
	}
	if err := syscall.Fsync(fd); err != nil {
		t.Fatal(err)
	}
}

// TestKill9Recovery: files written and fsynced through the mount survive a
// kill -9 of the daemon; the dead mount is reported as stale with the
// command that clears it; that command clears it; the next mount frees the
// orphan left by an unlinked open file; fsck is clean.
func TestKill9Recovery(t *testing.T) {
	requireFUSE(t)
	vol, mnt := volumeAndMountpoint(t)
	d := startDaemon(t, vol, mnt)
	if !strings.Contains(d.stdout.String(), "created volume") {
		t.Errorf("the daemon did not say it created the volume:\n%s", d.stdout)
	}
	want := map[string][]byte{}
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("f%d", i)
		data := alignedBuf((i + 1) * 12288)
		copy(data, pattern(len(data), byte(i)))
		syncedWrite(t, filepath.Join(mnt, name), data, i%2 == 0)
		want[name] = data
	}
	if err := os.Mkdir(filepath.Join(mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncedWrite(t, filepath.Join(mnt, "dir", "inner"), []byte("inner"), false)
	want["dir/inner"] = []byte("inner")
	// An unlinked file held open: an orphan at the crash.
	orphan, err := os.Create(filepath.Join(mnt, "orphan"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := orphan.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := orphan.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "orphan")); err != nil {
		t.Fatal(err)
	}
	// Unsynced writes in flight at the crash.
	if err := os.WriteFile(filepath.Join(mnt, "unsynced"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.wait(10 * time.Second)
	orphan.Close()
	// ENOTCONN; ECONNABORTED while the kernel tears an io_uring
	// connection down (the rings hold it a moment after the daemon died).
	if _, err := os.Stat(mnt); !ConnectionGone(err) {
		t.Fatalf("stat of the dead mount: %v, want ENOTCONN or ECONNABORTED", err)
	}
	code, out := sluiceCmd(t, "mount", vol, mnt)
	if code == 0 || !strings.Contains(out, "stale mount") || !strings.Contains(out, "sluice umount "+mnt) {
		t.Fatalf("mount on a stale mount point: exit %d, output %q; want an explanation naming sluice umount", code, out)
	}
	if code, out := sluiceCmd(t, "umount", mnt); code != 0 || !strings.Contains(out, "stale") {
		t.Fatalf("umount of the stale mount: exit %d: %s", code, out)
	}

	d2 := startDaemon(t, vol, mnt)
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: fsynced data lost or changed after kill -9 (%d bytes, want %d)", name, len(got), len(data))
		}
	}
	if code := d2.umount(mnt); code != 0 {
		t.Fatalf("daemon exit %d after umount\n%s", code, d2.stderr)
	}
	checkVolume(t, vol)
}

// TestSIGTERMUnderLoad: SIGTERM while writers write and fsync makes the
// daemon sync, wait for the open files, unmount and exit 0; every fsynced
// block is there at the next mount and fsck is clean. A second run keeps a
// file open past the grace period: the daemon aborts the connection and
// still exits 0 with the volume clean.
func TestSIGTERMUnderLoad(t *testing.T) {
	requireFUSE(t)
	vol, mnt := volumeAndMountpoint(t)
	d := startDaemon(t, vol, mnt, "--grace", "20s")
	const workers, block = 4, 4096
	var stop atomic.Bool
	synced := make([]atomic.Int64, workers) // blocks fsynced per worker
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			flags := syscall.O_CREAT | syscall.O_RDWR
			if w%2 == 1 {
				flags |= syscall.O_DIRECT
			}
			fd, err := syscall.Open(filepath.Join(mnt, fmt.Sprintf("w%d", w)), flags, 0o644)
			if err != nil {
				errs <- err
				return
			}
			defer syscall.Close(fd)
			buf := alignedBuf(block)
			for i := int64(0); !stop.Load(); i++ {
				copy(buf, pattern(block, byte(w*31+int(i))))
				if _, err := syscall.Pwrite(fd, buf, i*block); err != nil {
					errs <- fmt.Errorf("worker %d write %d: %w", w, i, err)
					return
				}
				if err := syscall.Fsync(fd); err != nil {
					errs <- fmt.Errorf("worker %d fsync %d: %w", w, i, err)
					return
				}
				synced[w].Store(i + 1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the workers go on while the daemon syncs and waits
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("workload failed before it was stopped: %v", err)
	}
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\nstdout:\n%s\nstderr:\n%s", code, d.stdout, d.stderr)
	}
	if !strings.Contains(d.stdout.String(), "closed cleanly") {
		t.Errorf("no clean close reported:\n%s", d.stdout)
	}
	if _, ok := FindMount(mnt); ok {
		t.Fatal("still mounted after SIGTERM")
	}
	checkVolume(t, vol)

	// Remount: every fsynced block is there. Then a file held open past
	// the grace period.
	d2 := startDaemon(t, vol, mnt, "--grace", "300ms")
	for w := 0; w < workers; w++ {
		got, err := os.ReadFile(filepath.Join(mnt, fmt.Sprintf("w%d", w)))
		if err != nil {
			t.Fatal(err)
		}
		n := synced[w].Load()
		if n == 0 {
			t.Errorf("worker %d fsynced nothing", w)
		}
		if int64(len(got)) < n*block {
			t.Fatalf("worker %d: %d bytes after restart, %d fsynced", w, len(got), n*block)
		}
		for i := int64(0); i < n; i++ {
			if !bytes.Equal(got[i*block:(i+1)*block], pattern(block, byte(w*31+int(i)))) {
				t.Fatalf("worker %d block %d: fsynced data lost", w, i)
			}
		}
	}
	held, err := os.OpenFile(filepath.Join(mnt, "w0"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := d2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d2.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM with a file held open\nstderr:\n%s", code, d2.stderr)
	}
	if !strings.Contains(d2.stderr.String(), "aborting the FUSE connection") {
		t.Errorf("the abort after the grace period was not logged:\n%s", d2.stderr)
	}
	// With the writeback cache (the default) the write may land in the
	// kernel's page cache; its fsync cannot succeed.
	_, werr := held.Write([]byte("x"))
	if serr := held.Sync(); werr == nil && serr == nil {
		t.Error("a write and its fsync on the aborted mount succeeded")
	}
	held.Close()
	checkVolume(t, vol)
}

// TestUnprivilegedMount: a user who is not root mounts through
// fusermount3 (the mount is owned by that user), uses the mount, and
// unmounts it with sluice umount; the daemon exits 0 and the volume is
// clean. Run by root, it switches to the nobody user (65534) for the
// daemon and for every access to the mount (without allow_other, not even
// root may enter another user's FUSE mount).
func TestUnprivilegedMount(t *testing.T) {
	requireFUSE(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run the daemon as another user")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusermount3 is not installed (Debian: apt-get install fuse3)")
	}
	if st, err := os.Stat("/dev/fuse"); err != nil || st.Mode().Perm()&0o006 != 0o006 {
		t.Skip("/dev/fuse is not open to every user")
	}
	const nobody = 65534
	cred := &syscall.Credential{Uid: nobody, Gid: nobody, NoSetGroups: true}
	bin := buildSluice(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil { // MkdirTemp makes it 0700
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "sluice-unprivileged")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	vol, mnt, work := filepath.Join(tmp, "vol"), filepath.Join(tmp, "mnt"), filepath.Join(tmp, "work")
	for _, dir := range []string{mnt, work} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	// The volume directory must be the user's: mount creates it.
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	d := startDaemonAs(t, cred, vol, mnt, "-o", "noexec,noatime")
	if m, ok := FindMount(mnt); !ok {
		t.Fatalf("%s is not a mount point", mnt)
	} else {
		if uid, _ := m.Option("user_id"); uid != "65534" {
			t.Errorf("the mount is not the user's (fusermount3 was not used?): %+v", m)
		}
		// FUSE's default for a user's mount: that user only.
		if m.HasOption("allow_other") {
			t.Errorf("a user's mount is open to every user without -o allow_other: %+v", m)
		}
		for _, o := range []string{"default_permissions", "nosuid", "nodev", "noexec", "noatime"} {
			if !m.HasOption(o) {
				t.Errorf("option %s missing from the user's mount: %+v", o, m)
			}
		}
	}
	as := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	f := filepath.Join(mnt, "f")
	if out, err := as("sh", "-c", "echo hello > "+f+" && sync "+f+" && cat "+f); err != nil || out != "hello\n" {
		t.Fatalf("write and read as the user: %v: %q", err, out)
	}
	if out, err := as(bin, "umount", mnt); err != nil {
		t.Fatalf("sluice umount as the user: %v: %s", err, out)
	}
	if code := d.wait(30 * time.Second); code != 0 {
		t.Fatalf("daemon exit %d\nstderr:\n%s", code, d.stderr)
	}
	checkVolume(t, vol)
}

// TestUnprivilegedAllowOtherRefused: a user other than root who asks for
// -o allow_other while /etc/fuse.conf lacks user_allow_other is told so,
// before fusermount3 runs, and nothing is mounted.
func TestUnprivilegedAllowOtherRefused(t *testing.T) {
	requireFUSE(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run the daemon as another user")
	}
	if ok, err := userAllowOther(fuseConfPath); err != nil || ok {
		t.Skipf("%s has user_allow_other (or cannot be read: %v)", fuseConfPath, err)
	}
	const nobody = 65534
	bin := buildSluice(t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "sluice-allow-other")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mnt, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mount", filepath.Join(tmp, "vol"), mnt, "--size", "1G", "-o", "allow_other")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, NoSetGroups: true}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		_ = Unmount(mnt, UnmountOptions{Force: true})
		t.Fatalf("mount -o allow_other by a user succeeded without user_allow_other:\n%s", out)
	}
	if !strings.Contains(string(out), "user_allow_other") || !strings.Contains(string(out), fuseConfPath) || strings.Contains(string(out), "fusermount") {
		t.Errorf("refusal does not explain itself (or fusermount3 ran): %s", out)
	}
	if _, ok := FindMount(mnt); ok {
		t.Error("mounted anyway")
	}
}

// TestMountRefusals: a missing mount point, a file as mount point, and a
// volume in use are refused with a message that says what to do.
func TestMountRefusals(t *testing.T) {
	requireFUSE(t)
	tmp := t.TempDir()
	vol, mnt := filepath.Join(tmp, "vol"), filepath.Join(tmp, "mnt")
	if code, out := sluiceCmd(t, "mount", vol, mnt); code == 0 || !strings.Contains(out, "does not exist") || !strings.Contains(out, "mkdir -p") {
		t.Errorf("missing mount point: exit %d: %s", code, out)
	}
	if _, err := os.Stat(vol); err == nil {
		t.Error("a refused mount created the volume")
	}
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o644)
	if code, out := sluiceCmd(t, "mount", vol, file); code == 0 || !strings.Contains(out, "not a directory") {
		t.Errorf("file as mount point: exit %d: %s", code, out)
	}
	os.Mkdir(mnt, 0o755)
	d := startDaemon(t, vol, mnt)
	mnt2 := filepath.Join(tmp, "mnt2")
	os.Mkdir(mnt2, 0o755)
	if code, out := sluiceCmd(t, "mount", vol, mnt2); code == 0 || !strings.Contains(out, "in use by pid") {
		t.Errorf("volume in use: exit %d: %s", code, out)
	}
	if code, out := sluiceCmd(t, "umount", mnt2); code == 0 || !strings.Contains(out, "not mounted") {
		t.Errorf("umount of a directory that is not mounted: exit %d: %s", code, out)
	}
	if code := d.umount(mnt); code != 0 {
		t.Fatalf("daemon exit %d", code)
	}
}

// TestReadOnlyMount: -o ro serves the volume read-only: reads work,
// writes fail with EROFS, and the volume is not changed. The options reach
// the kernel's mount, with root's defaults.
func TestReadOnlyMount(t *testing.T) {
	requireFUSE(t)
	vol, mnt := volumeAndMountpoint(t)
	d := startDaemon(t, vol, mnt)
	syncedWrite(t, filepath.Join(mnt, "f"), []byte("read only"), false)
	d.umount(mnt)
	d2 := startDaemon(t, vol, mnt, "-o", "ro,noatime")
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "read only" {
		t.Fatalf("read on a read-only mount: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("create on a read-only mount: %v, want EROFS", err)
	}
	if m, ok := FindMount(mnt); !ok || m.Source != vol {
		t.Errorf("mount source %q, want the volume %q", m.Source, vol)
	} else if os.Geteuid() == 0 {
		// sluice mount passes -o through, and a mount by root is open
		// to every user.
		for _, o := range []string{"ro", "noatime", "allow_other", "default_permissions", "nosuid", "nodev"} {
			if !m.HasOption(o) {
				t.Errorf("option %s missing: %s / %s", o, m.Options, m.SuperOptions)
			}
		}
	}
	if code := d2.umount(mnt); code != 0 {
		t.Fatalf("read-only daemon exit %d\n%s", code, d2.stderr)
	}
	checkVolume(t, vol)
}

// TestSyncThenFsyncRootSurvivesKill9: files written buffered and never
// fsynced, a new directory and a rename survive a kill -9 of the daemon
// right after `sync; sync MOUNTPOINT` (sync(2), then fsync of the mount's
// root, which sluice answers with a sync point of the whole volume). The
// control runs sync(2) alone: Linux does not send SYNCFS to a /dev/fuse or
// io_uring daemon, so the files reach sluice but not its metadata's
// stable storage, and the kill loses them. The background sync is held
// off (--sync-interval 1h) so that only the syncs under test sync.
func TestSyncThenFsyncRootSurvivesKill9(t *testing.T) {
	requireFUSE(t)
	for _, c := range []struct {
		name      string
		fsyncRoot bool
	}{{"sync-and-fsync-root", true}, {"sync-only", false}} {
		t.Run(c.name, func(t *testing.T) {
			vol, mnt := volumeAndMountpoint(t)
			d := startDaemon(t, vol, mnt, "--sync-interval", "1h")
			want := map[string][]byte{}
			if err := os.Mkdir(filepath.Join(mnt, "dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				name := fmt.Sprintf("dir/f%d", i)
				data := pattern(5000+i*40000, byte(i+1)) // unaligned sizes
				if err := os.WriteFile(filepath.Join(mnt, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
				want[name] = data
			}
			if err := os.Rename(filepath.Join(mnt, "dir/f5"), filepath.Join(mnt, "renamed")); err != nil {
				t.Fatal(err)
			}
			want["renamed"] = want["dir/f5"]
			delete(want, "dir/f5")
			syscall.Sync()
			if c.fsyncRoot {
				root, err := os.Open(mnt)
				if err != nil {
					t.Fatal(err)
				}
				if err := root.Sync(); err != nil {
					t.Fatal(err)
				}
				root.Close()
			}
			if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			d.wait(10 * time.Second)
			if code, out := sluiceCmd(t, "umount", mnt); code != 0 {
				t.Fatalf("umount of the stale mount: exit %d: %s", code, out)
			}
			d2 := startDaemon(t, vol, mnt)
			lost := 0
			for name, data := range want {
				got, err := os.ReadFile(filepath.Join(mnt, name))
				if err != nil || !bytes.Equal(got, data) {
					lost++
					if c.fsyncRoot {
						t.Errorf("%s: lost or changed after sync, fsync of the root and kill -9 (%d bytes, want %d; %v)", name, len(got), len(data), err)
					}
				}
			}
			t.Logf("%d of %d files lost", lost, len(want))
			if !c.fsyncRoot && lost == 0 {
				t.Errorf("sync(2) alone kept every file: the kernel now reaches the daemon with SYNCFS (or the background sync ran); this control no longer shows what fsync of the root adds")
			}
			if code := d2.umount(mnt); code != 0 {
				t.Fatalf("daemon exit %d after umount\n%s", code, d2.stderr)
			}
			checkVolume(t, vol)
		})
	}
}
