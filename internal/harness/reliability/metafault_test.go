package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta"
)

// Part 2, the metadata failure path: the engine shuts itself down when a
// metadata commit or sync fails. The failing call returns EIO; every later
// change fails with an error wrapping ErrShutdown that is also EIO;
// nothing panics or hangs; the volume on disk (for any crash) is
// consistent and keeps what was fsynced before the failure.

// metaOp is one step of the metadata workload.
type metaOp struct {
	name   string
	change bool // changes the file system (must fail after a shutdown)
	fn     func(e *env) error
}

// metaSetup makes what the workload works on, so that each step's
// preconditions hold whatever the steps before it did.
func metaSetup(e *env) []byte {
	base, _ := e.writeDurable("/base", 16<<10, 9)
	for _, p := range []string{"/f1", "/h", "/r", "/l", "/t", "/fa", "/x"} {
		f := e.create(p, 0)
		if _, err := f.WriteAt(pattern(8192, 1), 0); err != nil {
			e.t.Fatal(err)
		}
		f.Close()
	}
	for _, d := range []string{"/d1", "/e"} {
		if err := e.fs.Mkdir(d, 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.fs.SyncAll(); err != nil {
		e.t.Fatal(err)
	}
	return base
}

func metaWorkload() []metaOp {
	write := func(path string, flags int, off int64, n int, seed uint64) func(e *env) error {
		return func(e *env) error {
			f, err := e.fs.OpenFile(path, sluice.O_RDWR|flags, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(pattern(n, seed), off)
			return err
		}
	}
	withFile := func(path string, fn func(f *sluice.File) error) func(e *env) error {
		return func(e *env) error {
			f, err := e.fs.OpenFile(path, sluice.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return fn(f)
		}
	}
	return []metaOp{
		{"create", true, func(e *env) error {
			f, err := e.fs.Create("/new")
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"buffered write", true, write("/f1", 0, 8192, 8192, 2)},
		{"fsync", true, withFile("/f1", func(f *sluice.File) error { return f.Fsync() })},
		{"mkdir", true, func(e *env) error { return e.fs.Mkdir("/d2", 0o755) }},
		{"rename", true, func(e *env) error { return e.fs.Rename("/r", "/d1/r", 0) }},
		{"link", true, func(e *env) error { return e.fs.Link("/l", "/d1/l") }},
		{"stat", false, func(e *env) error { _, err := e.fs.Stat("/base"); return err }},
		{"direct write", true, write("/h", sluice.O_DIRECT, 64<<10, 16384, 3)},
		{"fallocate", true, withFile("/fa", func(f *sluice.File) error { return f.Fallocate(0, 64<<10, 64<<10) })},
		{"truncate", true, withFile("/t", func(f *sluice.File) error { return f.Truncate(1000) })},
		{"setxattr", true, func(e *env) error { return e.fs.Setxattr("/d1", "user.x", []byte("v"), 0) }},
		{"symlink", true, func(e *env) error { return e.fs.Symlink("f1", "/s") }},
		{"read", false, func(e *env) error { _, err := readFile(e.fs, "/base"); return err }},
		{"unlink", true, func(e *env) error { return e.fs.Unlink("/x") }},
		{"rmdir", true, func(e *env) error { return e.fs.Rmdir("/e") }},
		{"chmod", true, func(e *env) error { return e.fs.Chmod("/f1", 0o600) }},
		{"buffered write 2", true, write("/f1", 0, 20000, 5000, 4)},
		{"syncall", true, func(e *env) error { return e.fs.SyncAll() }},
	}
}

// checkShutdownErr checks the error of a change made after a shutdown.
func checkShutdownErr(t *testing.T, what string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s after a shutdown succeeded", what)
	case !errors.Is(err, sluice.ErrShutdown):
		t.Errorf("%s after a shutdown: %v, want ErrShutdown", what, err)
	case !isEIO(err) || errnoOf(err) != syscall.EIO:
		t.Errorf("%s after a shutdown: %v (errno %v), want EIO", what, err, errnoOf(err))
	}
}

// TestMetadataCommitFailureShutsDown fails the kth metadata commit of a
// workload, for every k the workload reaches.
func TestMetadataCommitFailureShutsDown(t *testing.T) {
	ops := metaWorkload()
	// Dry run: how many commits does the workload make?
	e := newEnv(t, envConfig{})
	metaSetup(e)
	c0 := e.kv.commits.Load()
	for _, op := range ops {
		if err := op.fn(e); err != nil {
			t.Fatalf("dry run: %s: %v", op.name, err)
		}
	}
	total := e.kv.commits.Load() - c0
	e.abandon()
	if total < 10 {
		t.Fatalf("the workload made only %d commits", total)
	}
	for k := int64(0); k < total; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			runMetaFailure(t, ops, func(e *env) { e.kv.FailCommitsAfter(k) })
		})
	}
}

// TestMetadataSyncFailureShutsDown fails the first metadata sync (that of
// the workload's fsync).
func TestMetadataSyncFailureShutsDown(t *testing.T) {
	for k := int64(0); k < 2; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			runMetaFailure(t, metaWorkload(), func(e *env) { e.kv.FailSyncsAfter(k) })
		})
	}
}

func runMetaFailure(t *testing.T, ops []metaOp, arm func(e *env)) {
	e := newEnv(t, envConfig{})
	base := metaSetup(e)
	arm(e)
	failed := -1
	for i, op := range ops {
		var err error
		if !withTimeout(t, 10*time.Second, op.name, func() { err = op.fn(e) }) {
			return
		}
		switch {
		case failed < 0 && err != nil:
			failed = i
			if !isEIO(err) {
				t.Errorf("%s: the failing call returned %v, want EIO", op.name, err)
			}
		case failed >= 0 && op.change:
			checkShutdownErr(t, op.name, err)
		case failed >= 0 && err != nil && !isEIO(err):
			t.Errorf("%s (no change) after a shutdown: %v, want success or EIO", op.name, err)
		case failed < 0 && err != nil:
			t.Errorf("%s: %v", op.name, err)
		}
	}
	if failed < 0 {
		t.Skip("no metadata operation failed")
	}
	if e.kv.failedCommits.Load() == 0 && e.kv.failSyncFrom.Load() == 0 {
		t.Fatal("nothing was injected")
	}
	// Reads of fsynced data still work (or fail with EIO).
	if got, err := readFile(e.fs, "/base"); err == nil && !bytes.Equal(got, base) {
		t.Errorf("after the shutdown /base reads wrong data")
	}
	if err := e.fs.Close(); err != nil && !isEIO(err) {
		t.Errorf("close after a shutdown: %v", err)
	}
	for seed := uint64(1); seed <= 2; seed++ {
		d := e.disks.Crash(seed)
		r, err := checkVolume(d)
		if err != nil || !r.Clean() {
			t.Errorf("crash %d: CheckVolume before mount: %v %v", seed, err, r)
		}
		e2, err := openEnv(t, e.cfg, d)
		if err != nil {
			t.Fatalf("crash %d: reopen: %v", seed, err)
		}
		checkClean(t, e2.fs)
		if got, err := readFile(e2.fs, "/base"); err != nil || !bytes.Equal(got, base) {
			t.Errorf("crash %d: /base differs (err %v)", seed, err)
		}
		e2.abandon()
	}
}

// TestMountKeepsOrphanOnReadError: a metadata read error while the mount
// recovers orphans (files unlinked while open at a crash) must not lose
// the orphan record: it is what frees the inode and its blocks later.
func TestMountKeepsOrphanOnReadError(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.create("/o", sluice.O_DIRECT)
	if _, err := f.WriteAt(pattern(64<<10, 1), 0); err != nil {
		t.Fatal(err)
	}
	ino := f.Ino()
	if err := e.fs.Unlink("/o"); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	d := e.disks.Crash(1) // a crash while /o is open
	f.Close()
	cfg := e.cfg
	cfg.beforeMount = func(e *env) {
		e.kv.FailGets(func(k []byte) bool { return bytes.Equal(k, meta.InodeKey(ino)) })
	}
	e2, err := openEnv(t, cfg, d)
	if err != nil {
		return // refusing to mount is fine
	}
	e2.kv.FailGets(nil)
	r, err := e2.fs.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Errorf("after a mount that met a read error on an orphan: %v", r.Problems)
	}
}
