package fusefs

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// statxOf answers STATX for node id (by handle when fh is not 0).
func (e *rawEnv) statxOf(id, fh uint64) (fuse.StatxOut, fuse.Status) {
	in := &fuse.StatxIn{InHeader: fuse.InHeader{NodeId: id}, SxMask: unix.STATX_BASIC_STATS | unix.STATX_BTIME}
	if fh != 0 {
		in.GetattrFlags, in.Fh = fuse.FUSE_GETATTR_FH, fh
	}
	var out fuse.StatxOut
	st := e.fs.Statx(nil, in, &out)
	return out, st
}

// checkStatxEqual fails unless sx says what attr does, field by field.
func checkStatxEqual(t *testing.T, what string, sx *fuse.Statx, a *fuse.Attr) {
	t.Helper()
	type pair struct {
		name      string
		got, want uint64
	}
	for _, p := range []pair{
		{"mask", uint64(sx.Mask), unix.STATX_BASIC_STATS},
		{"ino", sx.Ino, a.Ino},
		{"size", sx.Size, a.Size},
		{"blocks", sx.Blocks, a.Blocks},
		{"blksize", uint64(sx.Blksize), uint64(a.Blksize)},
		{"mode", uint64(sx.Mode), uint64(a.Mode)},
		{"nlink", uint64(sx.Nlink), uint64(a.Nlink)},
		{"uid", uint64(sx.Uid), uint64(a.Uid)},
		{"gid", uint64(sx.Gid), uint64(a.Gid)},
		{"rdev", unix.Mkdev(sx.RdevMajor, sx.RdevMinor), uint64(a.Rdev)},
		{"atime", sx.Atime.Sec, a.Atime}, {"atimensec", uint64(sx.Atime.Nsec), uint64(a.Atimensec)},
		{"mtime", sx.Mtime.Sec, a.Mtime}, {"mtimensec", uint64(sx.Mtime.Nsec), uint64(a.Mtimensec)},
		{"ctime", sx.Ctime.Sec, a.Ctime}, {"ctimensec", uint64(sx.Ctime.Nsec), uint64(a.Ctimensec)},
		{"btime", sx.Btime.Sec, 0}, {"attributes", sx.Attributes, 0},
	} {
		if p.got != p.want {
			t.Errorf("%s: statx %s %d, getattr %d", what, p.name, p.got, p.want)
		}
	}
}

// TestStatx: STATX reports GetAttr's attributes (basic stats, no birth
// time) for every file type, by node ID and by handle, with GetAttr's
// attribute timeout; an unknown handle is EBADF, an unknown node ENOENT.
func TestStatx(t *testing.T) {
	const attrTTL = 1500 * time.Millisecond
	e := newRawEnv(t, sluice.Options{}, Options{AttrTimeout: attrTTL})
	id, fh := e.create("f", syscall.O_RDWR, 0o4755)
	e.write(id, fh, pattern(10000, 3), 0)
	e.fsync(id, fh)
	var dir, dev, lnk fuse.EntryOut
	if st := e.fs.Mkdir(nil, &fuse.MkdirIn{InHeader: rootHeader(), Mode: 0o700}, "d", &dir); !st.Ok() {
		t.Fatal(st)
	}
	rdev := uint32(unix.Mkdev(8, 17))
	if st := e.fs.Mknod(nil, &fuse.MknodIn{InHeader: rootHeader(), Mode: syscall.S_IFCHR | 0o600, Rdev: rdev}, "c", &dev); !st.Ok() {
		t.Fatal(st)
	}
	if st := e.fs.Symlink(nil, &fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, "f", "l", &lnk); !st.Ok() {
		t.Fatal(st)
	}
	for _, c := range []struct {
		name string
		id   uint64
	}{{"file", id}, {"dir", dir.NodeId}, {"chardev", dev.NodeId}, {"symlink", lnk.NodeId}, {"root", fuse.FUSE_ROOT_ID}} {
		out, st := e.statxOf(c.id, 0)
		if !st.Ok() {
			t.Fatalf("statx %s: %v", c.name, st)
		}
		a := e.getattr(c.id)
		checkStatxEqual(t, c.name, &out.Statx, &a)
		if out.Timeout() != attrTTL {
			t.Errorf("%s: attribute timeout %v, want %v", c.name, out.Timeout(), attrTTL)
		}
	}
	out, st := e.statxOf(id, fh)
	if !st.Ok() {
		t.Fatalf("statx by handle: %v", st)
	}
	a := e.getattr(id)
	checkStatxEqual(t, "file by handle", &out.Statx, &a)
	if out.RdevMajor != 0 || a.Size != 10000 || a.Mode != syscall.S_IFREG|0o4755 {
		t.Errorf("file: rdev %d:%d size %d mode %o", out.RdevMajor, out.RdevMinor, a.Size, a.Mode)
	}
	if out, _ := e.statxOf(dev.NodeId, 0); out.RdevMajor != 8 || out.RdevMinor != 17 {
		t.Errorf("chardev: rdev %d:%d, want 8:17", out.RdevMajor, out.RdevMinor)
	}
	if _, st := e.statxOf(id, fh+100); st != fuse.EBADF {
		t.Errorf("statx by unknown handle: %v, want EBADF", st)
	}
	if _, st := e.statxOf(12345, 0); st != fuse.ENOENT {
		t.Errorf("statx of unknown node: %v, want ENOENT", st)
	}
}

// TestStatxMount: statx(2) with STATX_BTIME through the mount reaches the
// daemon as STATX (go-fuse dispatches it) and reports what stat(2) does;
// the kernel is told there is no birth time.
func TestStatxMount(t *testing.T) {
	m := NewMetrics()
	e := newMountEnv(t, envOpts{fuse: Options{Metrics: m}})
	if err := os.WriteFile(e.path("f"), pattern(12345, 2), 0o640); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(e.path("f"), &st); err != nil {
		t.Fatal(err)
	}
	before := m.ops[opStatx].count.Load()
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, e.path("f"), unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx); err != nil {
		t.Fatalf("statx: %v", err)
	}
	if m.ops[opStatx].count.Load() == before {
		t.Fatal("statx(2) did not reach the daemon as STATX")
	}
	if sx.Mask&unix.STATX_BASIC_STATS != unix.STATX_BASIC_STATS || sx.Mask&unix.STATX_BTIME != 0 {
		t.Errorf("statx mask %#x: want the basic stats and no btime", sx.Mask)
	}
	if sx.Size != 12345 || sx.Ino != st.Ino || uint32(sx.Mode) != st.Mode || uint64(sx.Nlink) != st.Nlink ||
		sx.Blocks != uint64(st.Blocks) || sx.Mtime.Sec != st.Mtim.Sec || int64(sx.Mtime.Nsec) != st.Mtim.Nsec ||
		unix.Mkdev(sx.Dev_major, sx.Dev_minor) != st.Dev {
		t.Errorf("statx %+v\nstat %+v", sx, st)
	}
}
