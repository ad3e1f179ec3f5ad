package sluice

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device/faultdev"
)

// Tests of issue 20's calls ("the rest of the Linux file API"): chown that
// changes nothing, renameat2's RENAME_WHITEOUT, and RWF_DONTCACHE.

// capV2 is a security.capability value (VFS_CAP_REVISION_2, no
// capabilities): what setcap writes.
var capV2 = []byte{0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// TestChownUnchanged: chown(f, -1, -1) is a chown as on XFS and ext4
// (checked against the host in fusefs's TestChownUnchanged): ctime moves,
// mtime does not; on a non-directory set-user-ID, set-group-ID with group
// execute and security.capability go; set-group-ID without group execute
// and a directory's bits stay.
func TestChownUnchanged(t *testing.T) {
	e := newEnv(t, envConfig{})
	fs := e.fs
	cases := []struct {
		name      string
		dir       bool
		mode      uint32
		want      uint32
		capsAfter bool
	}{
		{"setuid+setgid, group exec", false, 0o6755, 0o755, false},
		{"setgid without group exec", false, 0o6744, 0o2744, false},
		{"plain", false, 0o644, 0o644, false},
		{"directory", true, 0o6755, 0o6755, true},
	}
	for _, c := range cases {
		p := "/" + c.name
		if c.dir {
			if err := fs.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			e.mustCreate(p, 0).Close()
		}
		if err := fs.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := fs.Setxattr(p, "security.capability", capV2, 0); err != nil {
			t.Fatal(err)
		}
		before, _ := fs.Stat(p)
		time.Sleep(2 * time.Millisecond) // ctime must be able to move
		if err := fs.Chown(p, -1, -1); err != nil {
			t.Fatalf("%s: chown(-1, -1): %v", c.name, err)
		}
		after, _ := fs.Stat(p)
		if !after.Ctime.After(before.Ctime) || !after.Mtime.Equal(before.Mtime) {
			t.Errorf("%s: ctime %v -> %v, mtime %v -> %v: want ctime moved, mtime kept", c.name, before.Ctime, after.Ctime, before.Mtime, after.Mtime)
		}
		if after.Mode&0o7777 != c.want || after.Uid != before.Uid || after.Gid != before.Gid {
			t.Errorf("%s: mode %o uid %d gid %d after chown(-1, -1), want mode %o and the owner kept", c.name, after.Mode&0o7777, after.Uid, after.Gid, c.want)
		}
		if _, err := fs.Getxattr(p, "security.capability"); (err == nil) != c.capsAfter {
			t.Errorf("%s: security.capability after chown(-1, -1): %v, want kept=%v", c.name, err, c.capsAfter)
		}
	}
	// The inode API says the same with SetAttr.Chown.
	e.mustCreate("/ino", 0).Close()
	if err := fs.Chmod("/ino", 0o4755); err != nil {
		t.Fatal(err)
	}
	before, _ := fs.Stat("/ino")
	time.Sleep(2 * time.Millisecond)
	after, err := fs.Setattr(before.Ino, SetAttr{Chown: true})
	if err != nil || after.Mode&0o7777 != 0o755 || !after.Ctime.After(before.Ctime) {
		t.Fatalf("Setattr(Chown): mode %o ctime %v -> %v, %v", after.Mode&0o7777, before.Ctime, after.Ctime, err)
	}
	// An empty SetAttr still changes nothing.
	same, err := fs.Setattr(before.Ino, SetAttr{})
	if err != nil || !same.Ctime.Equal(after.Ctime) {
		t.Fatalf("empty Setattr moved ctime: %v -> %v, %v", after.Ctime, same.Ctime, err)
	}
	checkClean(t, fs)
}

// wantWhiteout checks that path is a whiteout owned by own.
func wantWhiteout(t *testing.T, fs *FS, path string, own Owner) {
	t.Helper()
	a, err := fs.Lstat(path)
	if err != nil {
		t.Fatalf("whiteout %s: %v", path, err)
	}
	if a.Mode != syscall.S_IFCHR || a.Rdev != 0 || a.Nlink != 1 || a.Uid != own.Uid || a.Gid != own.Gid {
		t.Fatalf("whiteout %s: mode %o rdev %d nlink %d owner %d:%d, want a 0:0 character device with mode 0 owned by %d:%d",
			path, a.Mode, a.Rdev, a.Nlink, a.Uid, a.Gid, own.Uid, own.Gid)
	}
}

// TestRenameWhiteout: renameat2's RENAME_WHITEOUT as xfs_rename does it.
func TestRenameWhiteout(t *testing.T) {
	e := newEnv(t, envConfig{})
	fs := e.fs
	own := Owner{Uid: 1234, Gid: 5678}
	rename := func(from, to string, flags uint32) error {
		ow, err := fs.walk(from)
		if err != nil {
			return err
		}
		nw, err := fs.walk(to)
		if err != nil {
			return err
		}
		return fs.RenameInoAs(ow.dir, ow.name, nw.dir, nw.name, flags, own)
	}
	mk := func(p string, data string) Ino {
		f := e.mustCreate(p, 0)
		defer f.Close()
		if _, err := f.WriteAt([]byte(data), 0); err != nil {
			t.Fatal(err)
		}
		return f.Ino()
	}

	// A file to a new name: the source name becomes the whiteout.
	a := mk("/a", "A")
	rootBefore, _ := fs.Stat("/")
	if err := rename("/a", "/b", RenameWhiteout); err != nil {
		t.Fatal(err)
	}
	wantWhiteout(t, fs, "/a", own)
	if st, err := fs.Stat("/b"); err != nil || st.Ino != a {
		t.Fatalf("/b after the rename: %+v %v, want inode %d", st, err, a)
	}
	if rootAfter, _ := fs.Stat("/"); rootAfter.Nlink != rootBefore.Nlink {
		t.Fatalf("root nlink %d -> %d", rootBefore.Nlink, rootAfter.Nlink)
	}
	ents, err := fs.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		if d.Name == "a" && d.Type != syscall.S_IFCHR {
			t.Fatalf("readdir type of the whiteout: %o", d.Type)
		}
	}

	// With RENAME_NOREPLACE: allowed, and EEXIST leaves everything as it was.
	mk("/c", "C")
	if err := rename("/c", "/b", RenameWhiteout|RenameNoReplace); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("WHITEOUT|NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	if st, err := fs.Lstat("/c"); err != nil || !st.IsRegular() {
		t.Fatalf("/c after a refused rename: %+v %v", st, err)
	}
	if err := rename("/c", "/d", RenameWhiteout|RenameNoReplace); err != nil {
		t.Fatal(err)
	}
	wantWhiteout(t, fs, "/c", own)

	// With RENAME_EXCHANGE: EINVAL, before anything is looked up.
	if err := rename("/b", "/d", RenameWhiteout|RenameExchange); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("WHITEOUT|EXCHANGE: %v, want EINVAL", err)
	}
	if err := rename("/b", "/d", 1<<3); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("unknown flag: %v, want EINVAL", err)
	}

	// Over an existing file: the target goes, as in a plain rename.
	d, _ := fs.Stat("/d")
	f, err := fs.OpenFile("/d", O_RDONLY, 0) // keeps the replaced inode alive
	if err != nil {
		t.Fatal(err)
	}
	if err := rename("/b", "/d", RenameWhiteout); err != nil {
		t.Fatal(err)
	}
	wantWhiteout(t, fs, "/b", own)
	if st, _ := f.Stat(); st.Nlink != 0 || st.Ino != d.Ino {
		t.Fatalf("replaced target: nlink %d", st.Nlink)
	}
	f.Close()

	// A directory, out of a set-group-ID directory: the whiteout takes that
	// directory's group (inode_init_owner) and is no directory link.
	if err := fs.Mkdir("/sg", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fs.Chown("/sg", -1, 4321); err != nil {
		t.Fatal(err)
	}
	if err := fs.Chmod("/sg", 0o2755); err != nil {
		t.Fatal(err)
	}
	if err := fs.Mkdir("/sg/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	sgBefore, _ := fs.Stat("/sg")
	if err := rename("/sg/dir", "/moved", RenameWhiteout); err != nil {
		t.Fatal(err)
	}
	wantWhiteout(t, fs, "/sg/dir", Owner{Uid: own.Uid, Gid: 4321})
	if sgAfter, _ := fs.Stat("/sg"); sgAfter.Nlink != sgBefore.Nlink-1 {
		t.Fatalf("nlink of the directory the subdirectory left: %d -> %d", sgBefore.Nlink, sgAfter.Nlink)
	}
	if st, err := fs.Stat("/moved"); err != nil || !st.IsDir() || st.Parent != RootIno {
		t.Fatalf("/moved: %+v %v", st, err)
	}
	// The whiteout is an ordinary inode: it can be removed (overlayfs
	// does when the name is created again).
	if err := fs.Unlink("/sg/dir"); err != nil {
		t.Fatal(err)
	}
	checkClean(t, fs)
	if got := fs.Counters()["RenameWhiteouts"]; got != 4 {
		t.Fatalf("RenameWhiteouts = %d, want 4", got)
	}
}

// TestRenameWhiteoutCrash: the rename and its whiteout are one metadata
// transaction: after a crash, with none to all of the unsynced metadata
// kept, either both happened or neither (both after a sync), and the
// volume checks clean.
func TestRenameWhiteoutCrash(t *testing.T) {
	seen := map[bool]bool{}
	for seed := uint64(1); seed <= 12; seed++ {
		e := newEnv(t, envConfig{})
		f := e.mustCreate("/a", 0)
		src := f.Ino()
		f.Close()
		if err := e.fs.SyncAll(); err != nil {
			t.Fatal(err)
		}
		if err := e.fs.RenameInoAs(RootIno, "a", RootIno, "b", RenameWhiteout, Owner{Uid: 7, Gid: 8}); err != nil {
			t.Fatal(err)
		}
		synced := seed%3 == 0
		if synced {
			if err := e.fs.SyncAll(); err != nil {
				t.Fatal(err)
			}
		}
		// Keep from none to all of the unsynced metadata.
		c := openEnv(t, e.disks.CrashWith(nil, seed, int(seed-1)*100/11), e.opts)
		b, errB := c.fs.Lstat("/b")
		a, errA := c.fs.Lstat("/a")
		switch {
		case errA == nil && errB == nil: // renamed
			wantWhiteout(t, c.fs, "/a", Owner{Uid: 7, Gid: 8})
			if b.Ino != src {
				t.Fatalf("seed %d: /b is inode %d, want %d", seed, b.Ino, src)
			}
			seen[true] = true
		case errA == nil && errors.Is(errB, syscall.ENOENT) && !synced: // not
			if a.Ino != src || !a.IsRegular() {
				t.Fatalf("seed %d: /a is %+v, want the original file", seed, a)
			}
			seen[false] = true
		default:
			t.Fatalf("seed %d: half a rename: /a %+v %v, /b %+v %v", seed, a, errA, b, errB)
		}
		checkClean(t, c.fs)
		c.close()
		e.close()
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("outcomes seen (renamed: true): %v, want both", seen)
	}
}

// TestDontCacheRead: an uncached read reads through the page cache and
// leaves no page it brought in (so the same read again goes to the
// device), reads nothing ahead, and leaves pages that were cached before.
func TestDontCacheRead(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	data := pattern(256<<10, 3)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e = e.reopen() // a cold cache
	f, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &e.fs.counters
	buf := make([]byte, 16<<10)
	for i := 0; i < 2; i++ {
		reads := c.DeviceReads.Load()
		if n, err := f.Pread(buf, 8<<10, RWFDontCache); err != nil || n != len(buf) || !bytes.Equal(buf, data[8<<10:24<<10]) {
			t.Fatalf("uncached read %d: %d %v, or wrong bytes", i, n, err)
		}
		if got := f.in.pages.Len(); got != 0 {
			t.Fatalf("uncached read %d left %d pages cached", i, got)
		}
		if c.DeviceReads.Load() == reads {
			t.Fatalf("uncached read %d did not go to the device", i)
		}
	}
	if got := c.DontCacheDropped.Load(); got != 8 || c.ReadaheadPages.Load() != 0 {
		t.Fatalf("DontCacheDropped %d ReadaheadPages %d, want 8 and 0", got, c.ReadaheadPages.Load())
	}
	// Pages cached by a cached read stay through an uncached one, which
	// is then served from the cache.
	if _, err := f.Pread(buf, 64<<10, 0); err != nil {
		t.Fatal(err)
	}
	cached := f.in.pages.Len()
	reads := c.DeviceReads.Load()
	if n, err := f.Pread(buf, 64<<10, RWFDontCache); err != nil || n != len(buf) || !bytes.Equal(buf, data[64<<10:80<<10]) {
		t.Fatalf("uncached read of cached pages: %d %v", n, err)
	}
	if f.in.pages.Len() != cached || c.DeviceReads.Load() != reads {
		t.Fatalf("uncached read of cached pages: %d pages (had %d), %d device reads", f.in.pages.Len(), cached, c.DeviceReads.Load()-reads)
	}
	// A page both reads touch: the uncached one takes only what it brought.
	if n, err := f.Pread(buf, 56<<10, RWFDontCache); err != nil || n != len(buf) || !bytes.Equal(buf, data[56<<10:72<<10]) {
		t.Fatalf("uncached read across cached pages: %d %v", n, err)
	}
	if f.in.pages.Len() != cached {
		t.Fatalf("uncached read across cached pages: %d pages cached, want %d", f.in.pages.Len(), cached)
	}
}

// TestDontCacheWrite: an uncached write dirties pages like any buffered
// write, starts their writeback at once, and its pages go when the
// writeback ends; pages cached before stay, clean.
func TestDontCacheWrite(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	c := &e.fs.counters
	data := pattern(64<<10, 5)
	for _, flags := range []RWFlags{RWFDontCache, RWFDontCache | RWFNoWait, RWFDontCache | RWFDsync} {
		if n, err := f.Pwrite(data[:32<<10], 0, flags); err != nil || n != 32<<10 {
			t.Fatalf("flags %#x: uncached write: %d %v", flags, n, err)
		}
		switch {
		case flags&RWFNoWait != 0:
			// A NOWAIT write leaves its pages to the flusher; any
			// writeback of them drops them.
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
		case flags&RWFDsync == 0:
			e.fs.writebacks.wait() // the writeback it started
		}
		if got := f.in.pages.Len(); got != 0 || f.in.pages.DirtyCount() != 0 {
			t.Fatalf("flags %#x: %d pages (%d dirty) after the uncached write's writeback", flags, got, f.in.pages.DirtyCount())
		}
		reads := c.DeviceReads.Load()
		got := make([]byte, 32<<10)
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data[:32<<10]) {
			t.Fatalf("flags %#x: read back: %v", flags, err)
		}
		if c.DeviceReads.Load() == reads {
			t.Fatalf("flags %#x: read back after an uncached write did not go to the device", flags)
		}
		// Drop what the cached read brought in, for the next round.
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		for _, p := range f.in.pages.Range(0, ^uint64(0)) {
			p.Lock()
			f.in.pages.Remove(p)
			p.Unlock()
			f.in.pages.Release(p)
		}
	}
	if got := c.DontCacheDropped.Load(); got != 24 {
		t.Fatalf("DontCacheDropped %d, want 24", got)
	}
	// A page cached (and dirty) before: the uncached write writes it back
	// and leaves it cached, clean.
	if _, err := f.Pwrite(data[:4096], 40<<10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Pwrite(data[4096:8192], 40<<10, RWFDontCache); err != nil {
		t.Fatal(err)
	}
	e.fs.writebacks.wait()
	if f.in.pages.Len() != 1 || f.in.pages.DirtyCount() != 0 {
		t.Fatalf("page cached before: %d pages, %d dirty; want 1 clean", f.in.pages.Len(), f.in.pages.DirtyCount())
	}
	// Direct I/O ignores the flag.
	d, err := e.fs.OpenFile("/f", O_RDWR|O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n, err := d.Pwrite(data[:4096], 0, RWFDontCache); err != nil || n != 4096 {
		t.Fatalf("direct write with RWFDontCache: %d %v", n, err)
	}
	checkClean(t, e.fs)
}

// TestDontCacheNoWaitSyncAll: a NOWAIT uncached write starts nothing that
// SyncAll would wait for. With its writeback on a goroutine counted in
// fs.writebacks (held here at a gate on device writes), a steady stream of
// such writes kept SyncAll and the background syncer waiting forever.
func TestDontCacheNoWaitSyncAll(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	data := pattern(16<<10, 6)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	g := e.fault.NewGate(faultdev.Writes)
	if _, err := f.Pwrite(data[:4096], 0, RWFDontCache|RWFNoWait); err != nil {
		g.Remove()
		t.Fatal(err)
	}
	e.fs.writebacks.mu.Lock()
	n := e.fs.writebacks.n
	e.fs.writebacks.mu.Unlock()
	g.Remove()
	if n != 0 {
		t.Fatalf("a NOWAIT uncached write left %d writebacks for SyncAll to wait for", n)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
}
