package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// engineRead reads name from the engine directly, bypassing the mount.
func engineRead(t *testing.T, e *mountEnv, name string) []byte {
	t.Helper()
	f, err := e.eng.OpenFile(name, sluice.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, a.Size)
	if n, err := f.Pread(b, 0, 0); err != nil || n != len(b) {
		t.Fatalf("engine read: %d %v", n, err)
	}
	return b
}

// TestMmapShared: a shared writable mapping's stores reach the volume at
// msync and fsync, in both cache modes, opened buffered and O_DIRECT.
//
// The mapping is touched by a child process: a Go program must not fault
// on a mapping of a FUSE file it serves itself, because a page fault is
// not a system call to the Go runtime, and a stop-the-world while one
// thread waits in a fault for the daemon's goroutines never ends.
func TestMmapShared(t *testing.T) {
	for _, cc := range cacheConfigs {
		for _, direct := range []bool{false, true} {
			name := cc.name + "/buffered"
			if direct {
				name = cc.name + "/odirect"
			}
			t.Run(name, func(t *testing.T) {
				e := newMountEnv(t, envOpts{fuse: cc.opts})
				const size = 64 << 10
				if err := os.WriteFile(e.path("m"), make([]byte, size), 0o644); err != nil {
					t.Fatal(err)
				}
				want := pattern(size, 9)
				runHelper(t, "mmap", e.path("m"), fmt.Sprint(direct), "0", fmt.Sprint(size/2), "msync")
				got := engineRead(t, e, "m")
				if !bytes.Equal(got[:size/2], want[:size/2]) {
					t.Fatal("stores before msync did not reach the engine")
				}
				runHelper(t, "mmap", e.path("m"), fmt.Sprint(direct), fmt.Sprint(size/2), fmt.Sprint(size), "fsync")
				if got := engineRead(t, e, "m"); !bytes.Equal(got, want) {
					t.Fatal("stores before fsync did not reach the engine")
				}
				if got, err := os.ReadFile(e.path("m")); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("read after msync: %v", err)
				}
			})
		}
	}
}

// helperMmap maps path shared, stores pattern(_, 9) into [lo, hi) and
// makes it reach the file system with msync or fsync.
func helperMmap(args []string) error {
	path, direct, how := args[0], args[1] == "true", args[4]
	lo, _ := strconv.Atoi(args[2])
	hi, _ := strconv.Atoi(args[3])
	flags := syscall.O_RDWR
	if direct {
		flags |= syscall.O_DIRECT
	}
	fd, err := syscall.Open(path, flags, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	m, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	want := pattern(int(st.Size), 9)
	copy(m[lo:hi], want[lo:hi])
	switch how {
	case "msync":
		err = unix.Msync(m, unix.MS_SYNC)
	case "fsync":
		err = syscall.Fsync(fd)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", how, err)
	}
	return syscall.Munmap(m)
}

// TestLocks: POSIX, OFD and flock locks work through the mount. sluice
// does not negotiate the FUSE lock capabilities: the kernel's own lock
// manager (fs/locks.c) serves them, which is exact for a volume that only
// one mount can serve (the volume lock).
func TestLocks(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	f1, err := os.Create(e.path("l"))
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := os.OpenFile(e.path("l"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock: %v", err)
	}
	if err := unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Fatalf("second flock: %v, want EWOULDBLOCK", err)
	}
	if err := unix.Flock(int(f1.Fd()), unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 100}
	if err := unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("OFD lock: %v", err)
	}
	lk2 := unix.Flock_t{Type: unix.F_WRLCK, Start: 50, Len: 10}
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &lk2); err != unix.EAGAIN {
		t.Fatalf("conflicting OFD lock: %v, want EAGAIN", err)
	}
	get := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 0}
	if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_GETLK, &get); err != nil || get.Type != unix.F_WRLCK || get.Len != 100 {
		t.Fatalf("OFD getlk: %+v %v", get, err)
	}
	plk := unix.Flock_t{Type: unix.F_WRLCK, Start: 200, Len: 10}
	if err := unix.FcntlFlock(f1.Fd(), unix.F_SETLK, &plk); err != nil {
		t.Fatalf("POSIX lock: %v", err)
	}
}

// TestSyncFlags: O_SYNC and O_DSYNC writes and fsync through the mount
// make the engine flush the device and sync its metadata.
func TestSyncFlags(t *testing.T) {
	for _, cc := range cacheConfigs {
		for _, flag := range []int{syscall.O_SYNC, syscall.O_DSYNC, syscall.O_SYNC | syscall.O_DIRECT, 0} {
			mode := cc.name
			e := newMountEnv(t, envOpts{fuse: cc.opts})
			fd, err := syscall.Open(e.path("s"), syscall.O_CREAT|syscall.O_RDWR|flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			e.eng.ResetCounters()
			if _, err := syscall.Pwrite(fd, alignedBuf(4096), 0); err != nil {
				t.Fatal(err)
			}
			flushes := e.eng.Counters()["DeviceFlushes"]
			if flag != 0 && flushes == 0 {
				t.Errorf("%s flags %#x: the write returned before a device flush", mode, flag)
			}
			if flag == 0 {
				if err := syscall.Fsync(fd); err != nil {
					t.Fatal(err)
				}
				if e.eng.Counters()["DeviceFlushes"] == 0 {
					t.Errorf("%s: fsync returned before a device flush", mode)
				}
			}
			syscall.Close(fd)
		}
	}
}

// TestNamespaceOps covers what posixtest does not: renameat2 flags,
// mknod, chmod/chown/utimes, statfs, setgid directories, fsync of a
// directory.
func TestNamespaceOps(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	p := e.path
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(p(n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("b"), unix.RENAME_NOREPLACE); err != unix.EEXIST {
		t.Fatalf("RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p("a"), unix.AT_FDCWD, p("b"), unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("RENAME_EXCHANGE: %v", err)
	}
	if got, _ := os.ReadFile(p("a")); string(got) != "b" {
		t.Fatalf("after exchange a holds %q", got)
	}
	if err := unix.Mkfifo(p("fifo"), 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if st, err := os.Lstat(p("fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("fifo: %v %v", st, err)
	}
	if err := unix.Chmod(p("a"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p("a"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p("a"), &st); err != nil || st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o7777 != 0o755 {
		t.Fatalf("after chmod 4755 and chown: %+v %v (chown clears set-user-ID)", st, err)
	}
	ts := []unix.Timespec{{Sec: 100, Nsec: 5}, {Sec: 200, Nsec: 7}}
	if err := unix.UtimesNano(p("a"), ts); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p("a"), &st); err != nil || st.Mtim.Sec != 200 || st.Mtim.Nsec != 7 || st.Atim.Sec != 100 {
		t.Fatalf("utimes: %+v %v", st, err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(e.dir, &sfs); err != nil || sfs.Blocks == 0 || sfs.Bsize != 4096 || sfs.Bfree > sfs.Blocks {
		t.Fatalf("statfs: %+v %v", sfs, err)
	}
	if err := os.Mkdir(p("sg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p("sg"), 0, 4321); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p("sg"), 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("sg/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(p("sg/sub"), &st); err != nil || st.Gid != 4321 || st.Mode&unix.S_ISGID == 0 {
		t.Fatalf("directory in a set-group-ID directory: gid %d mode %o %v", st.Gid, st.Mode, err)
	}
	d, err := os.Open(p("sg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of a directory: %v", err)
	}
	d.Close()
	if err := os.Truncate(p("b"), 10000); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("b")); len(got) != 10000 || got[0] != 'a' || got[9999] != 0 {
		t.Fatalf("truncate up: %d bytes", len(got))
	}
	e.checkClean()
}

// TestFallocateSeek: every fallocate mode FUSE carries, and SEEK_DATA /
// SEEK_HOLE over the holes they make.
func TestFallocateSeek(t *testing.T) {
	// Exact holes need the engine to see every write (not so with the
	// writeback cache: TestSeekDataWithDirtyPages).
	e := newMountEnv(t, envOpts{cacheSet: true})
	fd, err := syscall.Open(e.path("f"), syscall.O_CREAT|syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	const mib = 1 << 20
	data := pattern(4096, 1)
	for _, off := range []int64{0, mib} {
		if _, err := syscall.Pwrite(fd, data, off); err != nil {
			t.Fatal(err)
		}
	}
	seek := func(off int64, whence int) int64 {
		t.Helper()
		pos, err := unix.Seek(fd, off, whence)
		if err != nil {
			t.Fatalf("lseek(%d, %d): %v", off, whence, err)
		}
		return pos
	}
	if got := seek(0, unix.SEEK_HOLE); got != 4096 {
		t.Errorf("SEEK_HOLE from 0: %d, want 4096", got)
	}
	if got := seek(4096, unix.SEEK_DATA); got != mib {
		t.Errorf("SEEK_DATA from 4096: %d, want %d", got, mib)
	}
	// Allocate past EOF without changing the size.
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, mib+4096, 64<<10); err != nil {
		t.Fatalf("fallocate KEEP_SIZE: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Size != mib+4096 {
		t.Fatalf("size after KEEP_SIZE: %d %v", st.Size, err)
	}
	// Default mode extends.
	if err := unix.Fallocate(fd, 0, 2*mib, 8192); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if err := syscall.Fstat(fd, &st); err != nil || st.Size != 2*mib+8192 {
		t.Fatalf("size after fallocate: %d %v", st.Size, err)
	}
	// Punch the first block: it reads as zeros and becomes a hole.
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096); err != nil {
		t.Fatalf("punch: %v", err)
	}
	got := make([]byte, 4096)
	if _, err := syscall.Pread(fd, got, 0); err != nil || !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatalf("punched block does not read as zeros: %v", err)
	}
	if got := seek(0, unix.SEEK_DATA); got != mib {
		t.Errorf("SEEK_DATA after punch: %d, want %d", got, mib)
	}
	// Zero a range inside the second block.
	if err := unix.Fallocate(fd, unix.FALLOC_FL_ZERO_RANGE, mib+100, 200); err != nil {
		t.Fatalf("zero range: %v", err)
	}
	want := append([]byte(nil), data...)
	clear(want[100:300])
	if _, err := syscall.Pread(fd, got, mib); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("zero range: wrong contents: %v", err)
	}
	if err := unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096); err != unix.EOPNOTSUPP {
		t.Errorf("collapse range: %v, want EOPNOTSUPP", err)
	}
	e.checkClean()
}

// TestCloseSendsNoFlush: FLUSH is answered ENOSYS, so after the first
// close(2) the kernel sends none (fc->no_flush): a close costs no round
// trip, and what was written before it is still there after it.
func TestCloseSendsNoFlush(t *testing.T) {
	m := NewMetrics()
	e := newMountEnv(t, envOpts{fuse: Options{Metrics: m}})
	for i := range 4 {
		if err := os.WriteFile(e.path("f"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.ops[opFlush].count.Load(); n > 1 {
		t.Errorf("4 closes sent %d FLUSH requests, want at most 1", n)
	}
	if b, err := os.ReadFile(e.path("f")); err != nil || !bytes.Equal(b, []byte{3}) {
		t.Errorf("after the closes f holds %v (%v), want [3]", b, err)
	}
}
