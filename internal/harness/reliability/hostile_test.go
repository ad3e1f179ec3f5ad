package reliability

import (
	"fmt"
	"io"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// Part 5: hostile input at the API. Each call gets the errno Linux gives
// for the same call (checked against the kernel on tmpfs, which has the
// same maximum file size, 2^63-1, as sluice; see hostileCases) and changes
// nothing: a snapshot of the whole tree (types, modes, links, sizes,
// blocks, mtimes, ctimes, symlink targets, xattrs, file contents) is the
// same before and after.

// hostileEnv is a tree and open handles to aim the calls at.
type hostileEnv struct {
	*env
	rw, direct, rdonly, wronly, closed, dir *sluice.File
}

func newHostileEnv(t *testing.T) *hostileEnv {
	e := newEnv(t, envConfig{})
	h := &hostileEnv{env: e}
	for _, d := range []string{"/dir", "/dir/sub", "/empty", "/x"} {
		if err := e.fs.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/file", "/dir/sub/file"} {
		f := e.create(p, 0)
		if _, err := f.WriteAt(pattern(10000, 1), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := e.fs.Setxattr("/file", "user.a", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	// A file of the largest size.
	if f, err := e.fs.Create("/x/big"); err != nil {
		t.Fatal(err)
	} else {
		if err := f.Truncate(math.MaxInt64); err != nil {
			t.Fatalf("truncate to 2^63-1: %v", err)
		}
		f.Close()
	}
	links := [][2]string{{"l2", "/l1"}, {"l1", "/l2"}, {"self", "/self"}, {"file", "/fl"}, {"nowhere", "/dangling"}}
	// A chain of 41 symlinks ending at /file: /c0 needs 41 follows (one
	// too many), /c1 needs 40 (Linux's MAXSYMLINKS, allowed).
	for i := range 41 {
		target := "c" + itoa(i+1)
		if i == 40 {
			target = "file"
		}
		links = append(links, [2]string{target, "/c" + itoa(i)})
	}
	for _, l := range links {
		if err := e.fs.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	open := func(p string, flags int) *sluice.File {
		f, e2 := e.fs.OpenFile(p, flags, 0)
		if e2 != nil {
			t.Fatal(e2)
		}
		return f
	}
	h.rw = open("/file", sluice.O_RDWR)
	h.direct = open("/file", sluice.O_RDWR|sluice.O_DIRECT)
	h.rdonly = open("/file", sluice.O_RDONLY)
	h.wronly = open("/file", sluice.O_WRONLY)
	h.dir = open("/dir", sluice.O_RDONLY|sluice.O_DIRECTORY)
	h.closed = open("/file", sluice.O_RDWR)
	if err = h.closed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	return h
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

type hostileCase struct {
	name string
	want syscall.Errno // 0: must succeed (and may change the tree)
	// ignoreTimes: Linux itself may update mtime/ctime before failing
	// (a write or fallocate that finds no space).
	ignoreTimes bool
	fn          func(h *hostileEnv) error
}

// inodeAPICases are the cases that call the inode API (what the FUSE
// adapter calls), whose errors are bare errnos.
var inodeAPICases = map[string]bool{
	"create a name with /": true, "mkdir a name with /": true, "symlink a name with /": true,
	"link to a name with /": true, "rename to a name with /": true, "mknod a name with /": true,
	"create with the inode API, 256 bytes": true, "lookup of 256 bytes": true,
}

func hostileCases() []hostileCase {
	long := strings.Repeat("n", 256)
	name255 := strings.Repeat("m", 255)
	longPath := "/" + strings.Repeat("p/", 2049)
	buf := func(n int) []byte { return device.AlignedBuf(n) }
	pread := func(f func(h *hostileEnv) *sluice.File, p []byte, off int64) func(h *hostileEnv) error {
		return func(h *hostileEnv) error { _, err := f(h).Pread(p, off, 0); return err }
	}
	pwrite := func(f func(h *hostileEnv) *sluice.File, p []byte, off int64) func(h *hostileEnv) error {
		return func(h *hostileEnv) error { _, err := f(h).Pwrite(p, off, 0); return err }
	}
	rw := func(h *hostileEnv) *sluice.File { return h.rw }
	direct := func(h *hostileEnv) *sluice.File { return h.direct }
	closed := func(h *hostileEnv) *sluice.File { return h.closed }
	misaligned := buf(4096 + 512)[1 : 4096+1]
	inoOf := func(h *hostileEnv, p string) sluice.Ino {
		a, err := h.fs.Lstat(p)
		if err != nil {
			h.t.Fatal(err)
		}
		return a.Ino
	}
	owner := sluice.Owner{}
	return []hostileCase{
		// Offsets and lengths (rw_verify_area, generic_write_checks,
		// vfs_fallocate, do_sys_ftruncate).
		{"pread at -1", syscall.EINVAL, false, pread(rw, buf(10), -1)},
		{"direct pread at -512", syscall.EINVAL, false, pread(direct, buf(512), -512)},
		{"pwrite at -1", syscall.EINVAL, false, pwrite(rw, buf(10), -1)},
		{"direct pwrite at -512", syscall.EINVAL, false, pwrite(direct, buf(512), -512)},
		{"pread whose end overflows", syscall.EINVAL, false, pread(rw, buf(4096), math.MaxInt64-2)},
		{"pwrite whose end overflows", syscall.EINVAL, false, pwrite(rw, buf(4096), math.MaxInt64-2)},
		{"pwrite of 1 byte at 2^63-1", syscall.EINVAL, false, pwrite(rw, buf(1), math.MaxInt64)},
		{"direct pwrite whose end overflows", syscall.EINVAL, false, pwrite(direct, buf(4096), math.MaxInt64-4095)},
		{"ftruncate to -1", syscall.EINVAL, false, func(h *hostileEnv) error { return h.rw.Truncate(-1) }},
		{"truncate to -1", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Truncate("/file", -1) }},
		{"fallocate at -1", syscall.EINVAL, false, func(h *hostileEnv) error { return h.rw.Fallocate(0, -1, 100) }},
		{"fallocate of 0 bytes", syscall.EINVAL, false, func(h *hostileEnv) error { return h.rw.Fallocate(0, 0, 0) }},
		{"fallocate of -1 bytes", syscall.EINVAL, false, func(h *hostileEnv) error { return h.rw.Fallocate(0, 0, -1) }},
		{"fallocate whose end overflows", syscall.EFBIG, false, func(h *hostileEnv) error { return h.rw.Fallocate(0, math.MaxInt64-10, 100) }},
		{"fallocate of 2^62 at 2^62", syscall.EFBIG, false, func(h *hostileEnv) error { return h.rw.Fallocate(0, 1<<62, 1<<62) }},
		{"fallocate punch without keep-size", syscall.EOPNOTSUPP, false, func(h *hostileEnv) error { return h.rw.Fallocate(sluice.FallocPunchHole, 0, 4096) }},
		{"fallocate unknown mode", syscall.EOPNOTSUPP, false, func(h *hostileEnv) error { return h.rw.Fallocate(0x100, 0, 4096) }},
		{"fallocate of 1 TiB", syscall.ENOSPC, true, func(h *hostileEnv) error { return h.rw.Fallocate(0, 0, 1<<40) }},
		{"fallocate keep-size of 1 TiB", syscall.ENOSPC, true, func(h *hostileEnv) error { return h.rw.Fallocate(sluice.FallocKeepSize, 4096, 1<<40) }},
		{"direct pwrite of 1 TiB worth of holes", syscall.ENOSPC, true, func(h *hostileEnv) error {
			// A 64 MiB buffer would not fit: a large offset gap is not
			// allocated; what the write covers is. Use 48 MiB, more
			// than the 32 MiB device.
			_, err := h.direct.WriteAt(buf(48<<20), 1<<30)
			return err
		}},
		{"seek to -1", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.rw.Seek(-1, io.SeekStart); return err }},
		{"seek with whence 7", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.rw.Seek(0, 7); return err }},
		{"SEEK_DATA past EOF", syscall.ENXIO, false, func(h *hostileEnv) error { _, err := h.rw.Seek(1<<20, sluice.SeekData); return err }},

		// O_DIRECT alignment.
		{"direct pread into a misaligned buffer", syscall.EINVAL, false, pread(direct, misaligned, 0)},
		{"direct pwrite from a misaligned buffer", syscall.EINVAL, false, pwrite(direct, misaligned, 0)},
		{"direct pread at a misaligned offset", syscall.EINVAL, false, pread(direct, buf(4096), 100)},
		{"direct pwrite at a misaligned offset", syscall.EINVAL, false, pwrite(direct, buf(4096), 100)},
		{"direct pread of a misaligned length", syscall.EINVAL, false, pread(direct, buf(100), 0)},
		{"direct pwrite of a misaligned length", syscall.EINVAL, false, pwrite(direct, buf(100), 0)},

		// Names with '/' (only the inode API can carry one) and NUL
		// (what Go's syscall wrappers return for a string with a NUL).
		{"create a name with /", syscall.EINVAL, false, func(h *hostileEnv) error {
			_, _, err := h.fs.CreateIno(sluice.RootIno, "a/b", sluice.O_RDWR, 0o644, owner)
			return err
		}},
		{"mkdir a name with /", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.MkdirIno(sluice.RootIno, "a/b", 0o755, owner); return err }},
		{"symlink a name with /", syscall.EINVAL, false, func(h *hostileEnv) error {
			_, err := h.fs.SymlinkIno(sluice.RootIno, "a/b", "file", owner)
			return err
		}},
		{"link to a name with /", syscall.EINVAL, false, func(h *hostileEnv) error {
			_, err := h.fs.LinkIno(inoOf(h, "/file"), sluice.RootIno, "a/b")
			return err
		}},
		{"rename to a name with /", syscall.EINVAL, false, func(h *hostileEnv) error {
			return h.fs.RenameIno(sluice.RootIno, "file", sluice.RootIno, "x/y", 0)
		}},
		{"mknod a name with /", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.Mknod(sluice.RootIno, "a/b", 0o644, 0, owner); return err }},
		{"create a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.Create("/a\x00b"); return err }},
		{"mkdir a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Mkdir("/a\x00b", 0o755) }},
		{"symlink a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Symlink("file", "/a\x00b") }},
		{"symlink to a target with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Symlink("fi\x00le", "/nul") }},
		{"rename to a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/a\x00b", 0) }},
		{"link to a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Link("/file", "/a\x00b") }},
		{"stat a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/fi\x00le"); return err }},
		{"open a path with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.OpenFile("/file\x00/x", sluice.O_RDONLY, 0); return err }},
		{"setxattr a name with NUL", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.a\x00b", []byte("v"), 0) }},

		// Long names and paths.
		{"create a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { _, err := h.fs.Create("/" + long); return err }},
		{"mkdir a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { return h.fs.Mkdir("/dir/"+long, 0o755) }},
		{"symlink a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { return h.fs.Symlink("file", "/"+long) }},
		{"link to a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { return h.fs.Link("/file", "/"+long) }},
		{"rename to a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/"+long, 0) }},
		{"stat a 256-byte name", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/" + long); return err }},
		{"stat a 256-byte directory component", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/" + long + "/x"); return err }},
		{"create with the inode API, 256 bytes", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error {
			_, _, err := h.fs.CreateIno(sluice.RootIno, long, sluice.O_RDWR, 0o644, owner)
			return err
		}},
		{"lookup of 256 bytes", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { _, err := h.fs.Lookup(sluice.RootIno, long); return err }},
		{"a path of 4099 bytes", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { _, err := h.fs.Stat(longPath); return err }},
		{"symlink to a 4096-byte target", syscall.ENAMETOOLONG, false, func(h *hostileEnv) error { return h.fs.Symlink(strings.Repeat("t", 4096), "/longtarget") }},
		{"symlink to an empty target", syscall.ENOENT, false, func(h *hostileEnv) error { return h.fs.Symlink("", "/emptytarget") }},
		{"create a 255-byte name", 0, false, func(h *hostileEnv) error {
			f, err := h.fs.Create("/" + name255)
			if err == nil {
				f.Close()
				err = h.fs.Unlink("/" + name255)
			}
			return err
		}},

		// Extended attributes (setxattr(2) and friends).
		{"setxattr a value of 64 KiB + 1", syscall.E2BIG, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.big", make([]byte, 64<<10+1), 0) }},
		{"setxattr a 256-byte name", syscall.ERANGE, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user."+long[:251], []byte("v"), 0) }},
		{"setxattr an empty name", syscall.ERANGE, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "", []byte("v"), 0) }},
		{"getxattr an empty name", syscall.ERANGE, false, func(h *hostileEnv) error { _, err := h.fs.Getxattr("/file", ""); return err }},
		{"removexattr an empty name", syscall.ERANGE, false, func(h *hostileEnv) error { return h.fs.Removexattr("/file", "") }},
		{"setxattr the name user.", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.", []byte("v"), 0) }},
		{"setxattr without a namespace", syscall.EOPNOTSUPP, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "foo", []byte("v"), 0) }},
		{"setxattr create of an existing one", syscall.EEXIST, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.a", []byte("w"), sluice.XattrCreate) }},
		{"setxattr replace of a missing one", syscall.ENODATA, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.b", []byte("w"), sluice.XattrReplace) }},
		{"setxattr unknown flags", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Setxattr("/file", "user.a", []byte("w"), 4) }},
		{"setxattr a value of exactly 64 KiB", 0, false, func(h *hostileEnv) error {
			if err := h.fs.Setxattr("/file", "user.max", make([]byte, 64<<10), 0); err != nil {
				return err
			}
			return h.fs.Removexattr("/file", "user.max")
		}},

		// Symlink loops (MAXSYMLINKS = 40).
		{"stat a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/l1"); return err }},
		{"stat through a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/l1/x"); return err }},
		{"stat a self loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/self"); return err }},
		{"stat a chain of 41 symlinks", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/c0"); return err }},
		{"stat a chain of 40 symlinks", 0, false, func(h *hostileEnv) error { _, err := h.fs.Stat("/c1"); return err }},
		{"open a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.OpenFile("/l1", sluice.O_RDONLY, 0); return err }},
		{"create through a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/l1", sluice.O_RDWR|sluice.O_CREAT, 0o644)
			return err
		}},
		{"create under a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.Create("/l1/x"); return err }},
		{"open a symlink O_NOFOLLOW", syscall.ELOOP, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/fl", sluice.O_RDONLY|sluice.O_NOFOLLOW, 0)
			return err
		}},
		{"mkdir over a symlink loop", syscall.EEXIST, false, func(h *hostileEnv) error { return h.fs.Mkdir("/l1", 0o755) }},
		{"truncate a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { return h.fs.Truncate("/l1", 0) }},
		{"chmod a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { return h.fs.Chmod("/l1", 0o600) }},
		{"setxattr a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { return h.fs.Setxattr("/l1", "user.x", []byte("v"), 0) }},
		{"readdir a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { _, err := h.fs.ReadDir("/l1"); return err }},
		{"rename from under a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { return h.fs.Rename("/l1/x", "/y", 0) }},
		{"link from under a symlink loop", syscall.ELOOP, false, func(h *hostileEnv) error { return h.fs.Link("/l1/x", "/y") }},
		{"readlink of a file", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.Readlink("/file"); return err }},

		// Closed handles.
		{"ReadAt on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.ReadAt(buf(10), 0); return err }},
		{"WriteAt on a closed file", syscall.EBADF, false, pwrite(closed, buf(10), 0)},
		{"Read on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.Read(buf(10)); return err }},
		{"Write on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.Write(buf(10)); return err }},
		{"Seek on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.Seek(0, io.SeekStart); return err }},
		{"Fsync on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { return h.closed.Fsync() }},
		{"Fdatasync on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { return h.closed.Fdatasync() }},
		{"Truncate on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { return h.closed.Truncate(0) }},
		{"Fallocate on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { return h.closed.Fallocate(0, 0, 4096) }},
		{"Stat on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.Stat(); return err }},
		{"ReadDir on a closed file", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.closed.ReadDir(); return err }},
		{"ReadAsync on a closed file", syscall.EBADF, false, func(h *hostileEnv) error {
			_, err := h.closed.ReadAsync(buf(10), 0, 0, nil, func(int, error) {})
			return err
		}},
		{"WriteAsync on a closed file", syscall.EBADF, false, func(h *hostileEnv) error {
			_, err := h.closed.WriteAsync(buf(10), 0, 0, func(int, error) {})
			return err
		}},
		{"Close twice", syscall.EBADF, false, func(h *hostileEnv) error { return h.closed.Close() }},

		// Access modes.
		{"read on O_WRONLY", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.wronly.ReadAt(buf(10), 0); return err }},
		{"write on O_RDONLY", syscall.EBADF, false, func(h *hostileEnv) error { _, err := h.rdonly.WriteAt(buf(10), 0); return err }},
		{"ftruncate on O_RDONLY", syscall.EINVAL, false, func(h *hostileEnv) error { return h.rdonly.Truncate(0) }},
		{"fallocate on O_RDONLY", syscall.EBADF, false, func(h *hostileEnv) error { return h.rdonly.Fallocate(0, 0, 4096) }},
		{"read a directory", syscall.EISDIR, false, func(h *hostileEnv) error { _, err := h.dir.ReadAt(buf(10), 0); return err }},
		{"open with access mode 3", syscall.EINVAL, false, func(h *hostileEnv) error { _, err := h.fs.OpenFile("/file", 3, 0); return err }},
		{"open O_CREAT|O_DIRECTORY", syscall.EINVAL, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/newdir", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECTORY, 0o755)
			return err
		}},
		{"open file/", syscall.ENOTDIR, false, func(h *hostileEnv) error { _, err := h.fs.OpenFile("/file/", sluice.O_RDONLY, 0); return err }},
		{"open a directory for writing", syscall.EISDIR, false, func(h *hostileEnv) error { _, err := h.fs.OpenFile("/dir", sluice.O_RDWR, 0); return err }},
		{"open a file O_DIRECTORY", syscall.ENOTDIR, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/file", sluice.O_RDONLY|sluice.O_DIRECTORY, 0)
			return err
		}},
		{"create O_EXCL of an existing file", syscall.EEXIST, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/file", sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
			return err
		}},
		{"create O_EXCL of a dangling symlink", syscall.EEXIST, false, func(h *hostileEnv) error {
			_, err := h.fs.OpenFile("/dangling", sluice.O_RDWR|sluice.O_CREAT|sluice.O_EXCL, 0o644)
			return err
		}},
		{"truncate a directory", syscall.EISDIR, false, func(h *hostileEnv) error { return h.fs.Truncate("/dir", 0) }},

		// Renames, removals and links that the tree forbids.
		{"rename a directory into its own subtree", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/dir", "/dir/sub/x", 0) }},
		{"rename a directory into itself", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/dir", "/dir/x", 0) }},
		{"exchange a directory with its child", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/dir", "/dir/sub", sluice.RenameExchange) }},
		{"exchange a directory with its parent", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/dir/sub", "/dir", sluice.RenameExchange) }},
		{"rename a child over its parent", syscall.ENOTEMPTY, false, func(h *hostileEnv) error { return h.fs.Rename("/dir/sub", "/dir", 0) }},
		{"rename over a non-empty directory", syscall.ENOTEMPTY, false, func(h *hostileEnv) error { return h.fs.Rename("/empty", "/dir", 0) }},
		{"rename a directory over a file", syscall.ENOTDIR, false, func(h *hostileEnv) error { return h.fs.Rename("/empty", "/file", 0) }},
		{"rename a file over a directory", syscall.EISDIR, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/empty", 0) }},
		{"rename NOREPLACE over a file", syscall.EEXIST, false, func(h *hostileEnv) error { return h.fs.Rename("/dir/sub/file", "/file", sluice.RenameNoReplace) }},
		{"rename EXCHANGE with nothing", syscall.ENOENT, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/nothing", sluice.RenameExchange) }},
		{"rename NOREPLACE|EXCHANGE", syscall.EINVAL, false, func(h *hostileEnv) error {
			return h.fs.Rename("/file", "/dir/sub/file", sluice.RenameNoReplace|sluice.RenameExchange)
		}},
		{"rename with unknown flags", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/y", 8) }},
		{"rename dir/.", syscall.EBUSY, false, func(h *hostileEnv) error { return h.fs.Rename("/dir/.", "/q", 0) }},
		{"rename to dir/..", syscall.EBUSY, false, func(h *hostileEnv) error { return h.fs.Rename("/file", "/dir/..", 0) }},
		{"rmdir a non-empty directory", syscall.ENOTEMPTY, false, func(h *hostileEnv) error { return h.fs.Rmdir("/dir") }},
		{"rmdir dir/.", syscall.EINVAL, false, func(h *hostileEnv) error { return h.fs.Rmdir("/dir/.") }},
		{"rmdir dir/..", syscall.ENOTEMPTY, false, func(h *hostileEnv) error { return h.fs.Rmdir("/dir/..") }},
		{"rmdir /", syscall.EBUSY, false, func(h *hostileEnv) error { return h.fs.Rmdir("/") }},
		{"rmdir a file", syscall.ENOTDIR, false, func(h *hostileEnv) error { return h.fs.Rmdir("/file") }},
		{"unlink a directory", syscall.EISDIR, false, func(h *hostileEnv) error { return h.fs.Unlink("/empty") }},
		{"unlink dir/..", syscall.EISDIR, false, func(h *hostileEnv) error { return h.fs.Unlink("/dir/..") }},
		{"mkdir dir/.", syscall.EEXIST, false, func(h *hostileEnv) error { return h.fs.Mkdir("/dir/.", 0o755) }},
		{"link a directory", syscall.EPERM, false, func(h *hostileEnv) error { return h.fs.Link("/dir", "/dirlink") }},
		{"link over an existing name", syscall.EEXIST, false, func(h *hostileEnv) error { return h.fs.Link("/file", "/dir/sub/file") }},
		{"mkdir under a file", syscall.ENOTDIR, false, func(h *hostileEnv) error { return h.fs.Mkdir("/file/d", 0o755) }},

		// Sizes at the limit (2^63-1 bytes, as tmpfs and XFS).
		{"O_APPEND write to a file of 2^63-1 bytes", syscall.EFBIG, false, func(h *hostileEnv) error {
			f, err := h.fs.OpenFile("/x/big", sluice.O_WRONLY|sluice.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("z"))
			return err
		}},
		{"write of 1 byte at 2^63-2 of that file", 0, false, func(h *hostileEnv) error {
			f, err := h.fs.OpenFile("/x/big", sluice.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("z"), math.MaxInt64-1); err != nil {
				return err
			}
			b := make([]byte, 2)
			if n, err := f.Pread(b, math.MaxInt64-2, 0); err != nil || n != 2 || b[1] != 'z' {
				return fmt.Errorf("read back: %d %q %v", n, b, err)
			}
			return nil
		}},
	}
}

// TestHostileInput runs every case against one tree: each returns Linux's
// errno, inside an *os.PathError or *os.LinkError, and changes nothing.
func TestHostileInput(t *testing.T) {
	h := newHostileEnv(t)
	// known maps a case whose errno or effect still differs from Linux to
	// its engine bug (knownFailure). Empty: every divergence this test has
	// found is fixed.
	known := map[string]string{}
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, h.fs)
			var err error
			if !withTimeout(t, 20*time.Second, c.name, func() { err = c.fn(h) }) {
				t.FailNow()
			}
			if c.want == 0 {
				// Success expected; such a case may change the tree.
				if err != nil {
					t.Errorf("%v, want success", err)
				}
				return
			}
			if got := errnoOf(err); got != c.want {
				if id, ok := known[c.name]; ok {
					knownFailure(t, id, c.name)
				}
			}
			if inodeAPICases[c.name] {
				// The inode API (what the FUSE adapter calls) returns
				// bare errnos.
				if got := errnoOf(err); got != c.want {
					t.Errorf("%v (errno %d), want %v", err, int(got), c.want)
				}
			} else {
				wantErrno(t, c.name, err, c.want)
			}
			after := snapshot(t, h.fs)
			if id, ok := known[c.name]; ok && before.diff(after) != "" {
				knownFailure(t, id, c.name)
			}
			if c.ignoreTimes {
				before, after = before.withoutTimes(), after.withoutTimes()
			}
			if d := before.diff(after); d != "" {
				t.Errorf("the call changed the tree: %s", d)
			}
		})
	}
	checkClean(t, h.fs)
}
