package sluice

import (
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/meta"
)

// TestSetattrDeferred: chmod, chown and utimes change the attributes
// in-core and commit no metadata transaction (delayed logging): the
// committed record keeps the old ones; fsync persists them (a crash after
// it shows them), and so do the inode's next transaction (a truncate
// commits the deferred mode with its size) and a sync point.
func TestSetattrDeferred(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	commits, deferred := e.fs.counters.MetaCommits.Load(), e.fs.counters.AttrsDeferred.Load()
	mode, uid := uint32(0o600), uint32(5)
	mtime := time.Unix(1_000_000, 7)
	for _, sa := range []SetAttr{{Mode: &mode}, {Uid: &uid}, {Atime: &mtime, Mtime: &mtime}} {
		if _, err := e.fs.Setattr(f.Ino(), sa); err != nil {
			t.Fatal(err)
		}
	}
	if d := e.fs.counters.MetaCommits.Load() - commits; d != 0 {
		t.Errorf("chmod, chown and utimes committed %d metadata transactions, want 0", d)
	}
	if d := e.fs.counters.AttrsDeferred.Load() - deferred; d != 3 {
		t.Errorf("AttrsDeferred grew by %d, want 3", d)
	}
	want := func(fs *FS, what string, newAttrs bool) {
		t.Helper()
		a, err := fs.Lstat("/f")
		if err != nil {
			t.Fatal(err)
		}
		gotNew := a.Mode&0o7777 == mode && a.Uid == uid && a.Mtime.Equal(mtime)
		gotOld := a.Mode&0o7777 == 0o644 && a.Uid == 0 && !a.Mtime.Equal(mtime)
		if newAttrs && !gotNew || !newAttrs && !gotOld {
			t.Errorf("%s: mode %o uid %d mtime %v; want the attributes from before the setattrs: %v",
				what, a.Mode&0o7777, a.Uid, a.Mtime, !newAttrs)
		}
	}
	want(e.fs, "in-core", true)
	if r := committedInode(t, e.fs, f.Ino()); r.Mode&0o7777 != 0o644 || r.Uid != 0 {
		t.Errorf("committed record after the setattrs: mode %o uid %d, want them unchanged", r.Mode&0o7777, r.Uid)
	}

	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	c := openEnv(t, e.disks.CrashWith(nil, 2, 0), e.opts)
	want(c.fs, "crash after fsync", true)
	c.close()

	// The inode's next transaction carries a deferred change.
	mode = 0o640
	if _, err := e.fs.Setattr(f.Ino(), SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if r := committedInode(t, e.fs, f.Ino()); r.Mode&0o7777 != 0o600 {
		t.Errorf("committed mode %o after a chmod to 640, want 600 (not committed)", r.Mode&0o7777)
	}
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if r := committedInode(t, e.fs, f.Ino()); r.Mode&0o7777 != 0o640 || r.Size != 4096 {
		t.Errorf("committed record after the truncate: mode %o size %d, want 640 and 4096 together", r.Mode&0o7777, r.Size)
	}

	// A sync point (syncfs, the background interval) persists it too.
	mode = 0o604
	if _, err := e.fs.Setattr(f.Ino(), SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	c = openEnv(t, e.disks.CrashWith(nil, 3, 0), e.opts)
	if a, err := c.fs.Lstat("/f"); err != nil || a.Mode&0o7777 != 0o604 {
		t.Errorf("crash after a sync point: %+v %v, want mode 604", a, err)
	}
	c.close()
	e.close()
}

// committedInode returns inode ino's record as committed to the metadata
// store (synced or not).
func committedInode(t *testing.T, fs *FS, ino Ino) *meta.Inode {
	t.Helper()
	v, err := fs.kv.Get(meta.InodeKey(ino))
	if err != nil {
		t.Fatal(err)
	}
	r, err := meta.DecodeInode(v)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestChownOfPrivilegedFileCommits: a chown that clears set-user-ID (and
// with it any security.capability xattr) commits at once, the xattr and
// the mode in one transaction, as stripping before a write does.
func TestChownOfPrivilegedFileCommits(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	mode := uint32(0o4755)
	if _, err := e.fs.Setattr(f.Ino(), SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	commits := e.fs.counters.MetaCommits.Load()
	uid := uint32(9)
	a, err := e.fs.Setattr(f.Ino(), SetAttr{Uid: &uid})
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode&syscall.S_ISUID != 0 {
		t.Fatalf("mode %o after chown, want set-user-ID cleared", a.Mode)
	}
	if d := e.fs.counters.MetaCommits.Load() - commits; d != 1 {
		t.Errorf("the chown of a set-user-ID file committed %d transactions, want 1", d)
	}
	if r := committedInode(t, e.fs, f.Ino()); r.Mode&syscall.S_ISUID != 0 || r.Uid != uid {
		t.Errorf("committed record after the chown: mode %o uid %d, want uid %d without set-user-ID", r.Mode, r.Uid, uid)
	}
	e.close()
}

// TestCreateReadsNoInode: a create keeps the record it committed as the
// in-core inode instead of reading it back from the metadata, a new
// regular file's extent map starts empty without a scan, and the directory
// stays cached between calls (read once).
func TestCreateReadsNoInode(t *testing.T) {
	e := newEnv(t, envConfig{})
	if _, err := e.fs.Lstat("/"); err != nil { // the root's first load
		t.Fatal(err)
	}
	loads := e.fs.counters.InodeLoads.Load()
	for i := range 8 {
		f := e.mustCreate("/f"+string(rune('a'+i)), 0)
		if _, err := f.Pwrite([]byte("x"), 0, 0); err != nil {
			t.Fatal(err)
		}
		if a, err := f.Stat(); err != nil || a.Size != 1 || a.Nlink != 1 {
			t.Fatalf("new file: %+v %v", a, err)
		}
		defer f.Close()
	}
	if d := e.fs.counters.InodeLoads.Load() - loads; d != 0 {
		t.Errorf("8 creates read %d inode records from the metadata, want 0", d)
	}
	checkClean(t, e.fs)
}
