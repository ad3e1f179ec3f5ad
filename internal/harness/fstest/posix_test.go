package fstest

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// posixCase is one row of the POSIX battery: setup steps, the call under
// test with the errno Linux returns for it, and steps that observe the
// state afterwards. The whole transcript (every step's result, then the
// tree) must be the same on the engine and on the host kernel.
type posixCase struct {
	name  string
	setup []Op
	call  Op
	want  syscall.Errno
	after []Op
	// bug names a known engine bug (an entry of
	// the issue tracker): a difference is logged, not failed, and
	// the case fails once the difference is gone, so that the mark is
	// removed with the fix.
	bug string
	// engineOnly says why the host is no oracle for this case: only the
	// engine's errno is checked against want.
	engineOnly string
}

var (
	t2001 = time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	t2002 = time.Date(2002, 3, 4, 5, 6, 7, 123456789, time.UTC)
)

var (
	name255 = strings.Repeat("n", 255)
	name256 = name255 + "x"
)

// symlinkChain makes l0 -> l1 -> ... -> l<n-1> -> f.
func symlinkChain(n int) []Op {
	var ops []Op
	for i := 0; i < n; i++ {
		tgt := fmt.Sprintf("l%d", i+1)
		if i == n-1 {
			tgt = "f"
		}
		ops = append(ops, symlinkOp(tgt, fmt.Sprintf("l%d", i)))
	}
	return ops
}

func posixCases() []posixCase {
	f := func(p string) []Op { return file(p, 100, 1) }
	cases := []posixCase{
		// ENOENT
		{name: "ENOENT/open missing file", call: openOp(0, "f", rdonly), want: syscall.ENOENT},
		{name: "ENOENT/stat missing file", call: statOp("f"), want: syscall.ENOENT},
		{name: "ENOENT/stat missing parent", call: statOp("d/f"), want: syscall.ENOENT},
		{name: "ENOENT/create in missing parent", call: openOp(0, "d/f", rdwr|creat), want: syscall.ENOENT},
		{name: "ENOENT/mkdir in missing parent", call: mkdirOp("d/e"), want: syscall.ENOENT},
		{name: "ENOENT/empty path", call: statOp(""), want: syscall.ENOENT},
		{name: "ENOENT/stat dangling symlink", setup: seq(symlinkOp("nowhere", "l")),
			call: statOp("l"), want: syscall.ENOENT, after: seq(lstatOp("l"))},
		{name: "ENOENT/open dangling symlink", setup: seq(symlinkOp("nowhere", "l")),
			call: openOp(0, "l", rdonly), want: syscall.ENOENT},
		{name: "ENOENT/path through dangling symlink", setup: seq(symlinkOp("nowhere", "l")),
			call: statOp("l/f"), want: syscall.ENOENT},
		{name: "ENOENT/unlink missing", call: unlinkOp("f"), want: syscall.ENOENT},
		{name: "ENOENT/rmdir missing", call: rmdirOp("d"), want: syscall.ENOENT},
		{name: "ENOENT/rename missing source", setup: f("g"), call: renameOp("f", "g", 0), want: syscall.ENOENT},
		{name: "ENOENT/rename into missing dir", setup: f("f"), call: renameOp("f", "d/g", 0), want: syscall.ENOENT},
		{name: "ENOTDIR/rename from path through file to missing dir", setup: seq(f("c"), mkdirOp("a")),
			call: renameOp("c/c", "a/b/a", 0), want: syscall.ENOTDIR},
		{name: "ENOENT/rename from missing dir to path through file", setup: seq(f("c"), mkdirOp("a")),
			call: renameOp("a/b/a", "c/c", 0), want: syscall.ENOENT},
		{name: "ENOTDIR/link from path through file to missing dir", setup: seq(f("c"), mkdirOp("a")),
			call: linkOp("c/c", "a/b/a"), want: syscall.ENOTDIR},
		{name: "ENOENT/RENAME_EXCHANGE with missing target", setup: f("f"),
			call: renameOp("f", "g", renameExchange), want: syscall.ENOENT},
		{name: "ENOENT/link missing source", call: linkOp("f", "g"), want: syscall.ENOENT},
		{name: "ENOENT/link into missing dir", setup: f("f"), call: linkOp("f", "d/g"), want: syscall.ENOENT},
		{name: "ENOENT/symlink with empty target", call: symlinkOp("", "l"), want: syscall.ENOENT},
		{name: "ENOENT/readlink missing", call: readlinkOp("l"), want: syscall.ENOENT},
		{name: "ENOENT/truncate missing", call: truncOp("f", 10), want: syscall.ENOENT},
		{name: "ENOENT/chmod missing", call: chmodOp("f", 0o600), want: syscall.ENOENT},
		{name: "ENOENT/readdir missing", call: readdirOp("d"), want: syscall.ENOENT},
		{name: "ENOENT/getxattr of missing file", call: getxOp("f", "user.a"), want: syscall.ENOENT},
		{name: "ENOENT/readdir of removed dir through handle", setup: seq(mkdirOp("d"), openOp(0, "d", rdonly), rmdirOp("d")),
			call: freaddirOp(0), want: syscall.ENOENT},

		// EEXIST
		{name: "EEXIST/O_CREAT|O_EXCL on file", setup: f("f"), call: openOp(0, "f", rdwr|creat|excl), want: syscall.EEXIST},
		{name: "EEXIST/O_CREAT|O_EXCL on dir", setup: seq(mkdirOp("d")), call: openOp(0, "d", rdonly|creat|excl), want: syscall.EEXIST},
		{name: "EEXIST/O_CREAT|O_EXCL on dangling symlink", setup: seq(symlinkOp("nowhere", "l")),
			call: openOp(0, "l", rdwr|creat|excl), want: syscall.EEXIST, after: seq(statOp("nowhere"))},
		{name: "EEXIST/mkdir over dir", setup: seq(mkdirOp("d")), call: mkdirOp("d"), want: syscall.EEXIST},
		{name: "EEXIST/mkdir over file", setup: f("f"), call: mkdirOp("f"), want: syscall.EEXIST},
		{name: "EEXIST/mkdir over dangling symlink", setup: seq(symlinkOp("nowhere", "l")), call: mkdirOp("l"), want: syscall.EEXIST},
		{name: "EEXIST/mkdir dotdot", setup: seq(mkdirOp("d")), call: mkdirOp("d/.."), want: syscall.EEXIST},
		{name: "EEXIST/link onto file", setup: seq(f("f"), f("g")), call: linkOp("f", "g"), want: syscall.EEXIST},
		{name: "EEXIST/link dir onto existing name", setup: seq(mkdirOp("d"), f("g")), call: linkOp("d", "g"), want: syscall.EEXIST},
		{name: "EEXIST/symlink onto file", setup: f("f"), call: symlinkOp("x", "f"), want: syscall.EEXIST},
		{name: "EEXIST/RENAME_NOREPLACE onto file", setup: seq(file("f", 10, 1), file("g", 20, 2)),
			call: renameOp("f", "g", renameNoReplace), want: syscall.EEXIST},
		{name: "EEXIST/RENAME_NOREPLACE onto itself", setup: f("f"),
			call: renameOp("f", "f", renameNoReplace), want: syscall.EEXIST},

		// ENOTDIR
		{name: "ENOTDIR/path through file", setup: f("f"), call: statOp("f/x"), want: syscall.ENOTDIR},
		{name: "ENOTDIR/create through file", setup: f("f"), call: openOp(0, "f/x", rdwr|creat), want: syscall.ENOTDIR},
		{name: "ENOTDIR/mkdir through file", setup: f("f"), call: mkdirOp("f/d"), want: syscall.ENOTDIR},
		{name: "ENOTDIR/file with trailing slash", setup: f("f"), call: openOp(0, "f/", rdonly), want: syscall.ENOTDIR},
		{name: "ENOTDIR/unlink file with trailing slash", setup: f("f"), call: unlinkOp("f/"), want: syscall.ENOTDIR},
		{name: "ENOTDIR/rmdir of file", setup: f("f"), call: rmdirOp("f"), want: syscall.ENOTDIR},
		{name: "ENOTDIR/readdir of file", setup: f("f"), call: readdirOp("f"), want: syscall.ENOTDIR},
		{name: "ENOTDIR/O_DIRECTORY on file", setup: f("f"), call: openOp(0, "f", rdonly|syscall.O_DIRECTORY), want: syscall.ENOTDIR},
		{name: "ENOTDIR/rename dir over file", setup: seq(mkdirOp("d"), f("f")), call: renameOp("d", "f", 0), want: syscall.ENOTDIR},
		{name: "ENOTDIR/rename file to missing name with trailing slash", setup: f("f"),
			call: renameOp("f", "g/", 0), want: syscall.ENOTDIR},

		// EISDIR
		{name: "EISDIR/unlink dir", setup: seq(mkdirOp("d")), call: unlinkOp("d"), want: syscall.EISDIR},
		{name: "EISDIR/open dir O_WRONLY", setup: seq(mkdirOp("d")), call: openOp(0, "d", wronly), want: syscall.EISDIR},
		{name: "EISDIR/open dir O_RDWR", setup: seq(mkdirOp("d")), call: openOp(0, "d", rdwr), want: syscall.EISDIR},
		{name: "EISDIR/open dir O_RDONLY|O_TRUNC", setup: seq(mkdirOp("d")), call: openOp(0, "d", rdonly|trunc), want: syscall.EISDIR},
		{name: "EISDIR/open dir O_RDONLY|O_CREAT", setup: seq(mkdirOp("d")), call: openOp(0, "d", rdonly|creat), want: syscall.EISDIR},
		{name: "EISDIR/create with trailing slash", call: openOp(0, "f/", rdwr|creat), want: syscall.EISDIR},
		{name: "EISDIR/rename file over dir", setup: seq(mkdirOp("d"), f("f")), call: renameOp("f", "d", 0), want: syscall.EISDIR},
		{name: "EISDIR/truncate dir", setup: seq(mkdirOp("d")), call: truncOp("d", 0), want: syscall.EISDIR},
		{name: "EISDIR/read dir handle", setup: seq(mkdirOp("d"), openOp(0, "d", rdonly)), call: preadOp(0, 0, 10), want: syscall.EISDIR},

		// ENOTEMPTY
		{name: "ENOTEMPTY/rmdir non-empty", setup: seq(mkdirOp("d"), f("d/f")), call: rmdirOp("d"), want: syscall.ENOTEMPTY},
		{name: "ENOTEMPTY/rename dir over non-empty dir", setup: seq(mkdirOp("d"), mkdirOp("e"), f("e/f")),
			call: renameOp("d", "e", 0), want: syscall.ENOTEMPTY},
		{name: "ENOTEMPTY/rmdir dotdot", setup: seq(mkdirOp("d"), mkdirOp("d/e")), call: rmdirOp("d/e/.."), want: syscall.ENOTEMPTY},
		{name: "ENOTEMPTY/rename dir over its parent", setup: seq(mkdirOp("d"), mkdirOp("d/e")),
			call: renameOp("d/e", "d", 0), want: syscall.ENOTEMPTY},
		{name: "ENOTEMPTY/rename file over its parent dir", setup: seq(mkdirOp("d"), f("d/f")),
			call: renameOp("d/f", "d", 0), want: syscall.ENOTEMPTY},

		// EINVAL
		{name: "EINVAL/rename dir into own subtree", setup: seq(mkdirOp("d"), mkdirOp("d/e")),
			call: renameOp("d", "d/e/f", 0), want: syscall.EINVAL},
		{name: "EINVAL/rename dir over own subdir", setup: seq(mkdirOp("d"), mkdirOp("d/e")),
			call: renameOp("d", "d/e", 0), want: syscall.EINVAL},
		{name: "EINVAL/RENAME_EXCHANGE dir with own subdir", setup: seq(mkdirOp("d"), mkdirOp("d/e")),
			call: renameOp("d", "d/e", renameExchange), want: syscall.EINVAL},
		{name: "EINVAL/RENAME_EXCHANGE subdir with its parent", setup: seq(mkdirOp("d"), mkdirOp("d/e")),
			call: renameOp("d/e", "d", renameExchange), want: syscall.EINVAL},
		{name: "EINVAL/rename flags NOREPLACE|EXCHANGE", setup: seq(f("f"), f("g")),
			call: renameOp("f", "g", renameNoReplace|renameExchange), want: syscall.EINVAL},
		{name: "EINVAL/rename unknown flag", setup: seq(f("f")), call: renameOp("f", "g", 1<<5), want: syscall.EINVAL},
		{name: "EINVAL/rmdir dot", setup: seq(mkdirOp("d")), call: rmdirOp("d/."), want: syscall.EINVAL},
		{name: "EINVAL/readlink of file", setup: f("f"), call: readlinkOp("f"), want: syscall.EINVAL},
		{name: "EINVAL/readlink of dir", setup: seq(mkdirOp("d")), call: readlinkOp("d"), want: syscall.EINVAL},
		{name: "EINVAL/fallocate len 0", setup: seq(f("f"), openOp(0, "f", rdwr)), call: fallocOp(0, 0, 0, 0), want: syscall.EINVAL},
		{name: "EINVAL/fallocate negative len", setup: seq(f("f"), openOp(0, "f", rdwr)), call: fallocOp(0, 0, 0, -1), want: syscall.EINVAL},
		{name: "EINVAL/fallocate negative offset", setup: seq(f("f"), openOp(0, "f", rdwr)), call: fallocOp(0, 0, -1, 10), want: syscall.EINVAL},
		{name: "EINVAL/fallocate len 0 on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)),
			call: fallocOp(0, 0, 0, 0), want: syscall.EINVAL},
		{name: "EINVAL/pread negative offset", setup: seq(f("f"), openOp(0, "f", rdwr)), call: preadOp(0, -1, 10), want: syscall.EINVAL},
		{name: "EINVAL/pwrite negative offset", setup: seq(f("f"), openOp(0, "f", rdwr)), call: pwriteOp(0, -1, 10, 1), want: syscall.EINVAL},
		{name: "EINVAL/pread negative offset on O_WRONLY", setup: seq(f("f"), openOp(0, "f", wronly)),
			call: preadOp(0, -1, 10), want: syscall.EINVAL},
		{name: "EINVAL/pread negative offset on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)),
			call: preadOp(0, -1, 10), want: syscall.EINVAL},
		{name: "EINVAL/truncate negative", setup: f("f"), call: truncOp("f", -1), want: syscall.EINVAL},
		{name: "EINVAL/truncate negative of missing file", call: truncOp("f", -1), want: syscall.EINVAL},
		{name: "EINVAL/ftruncate negative", setup: seq(f("f"), openOp(0, "f", rdwr)), call: ftruncOp(0, -1), want: syscall.EINVAL},
		{name: "EINVAL/ftruncate on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)), call: ftruncOp(0, 0), want: syscall.EINVAL},
		{name: "EINVAL/ftruncate dir handle", setup: seq(mkdirOp("d"), openOp(0, "d", rdonly)), call: ftruncOp(0, 0), want: syscall.EINVAL},
		{name: "EINVAL/seek bad whence", setup: seq(f("f"), openOp(0, "f", rdonly)), call: seekOp(0, 0, 7), want: syscall.EINVAL},
		{name: "EINVAL/seek before start", setup: seq(f("f"), openOp(0, "f", rdonly)), call: seekOp(0, -101, 2), want: syscall.EINVAL},
		{name: "EINVAL/O_DIRECT misaligned offset read", setup: seq(file("f", 8192, 1), openOp(0, "f", rdonly|direct)),
			call: preadOp(0, 100, 512), want: syscall.EINVAL},
		{name: "EINVAL/O_DIRECT misaligned length read", setup: seq(file("f", 8192, 1), openOp(0, "f", rdonly|direct)),
			call: preadOp(0, 512, 100), want: syscall.EINVAL},
		{name: "EINVAL/O_DIRECT misaligned offset write", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr|direct)),
			call: pwriteOp(0, 100, 512, 2), want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EINVAL/O_DIRECT misaligned length write", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr|direct)),
			call: pwriteOp(0, 512, 100, 2), want: syscall.EINVAL},
		{name: "EINVAL/O_DIRECT misaligned write past EOF", setup: seq(openOp(0, "f", rdwr|creat|direct)),
			call: pwriteOp(0, 20000, 100, 2), want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EINVAL/O_DIRECT append at unaligned EOF", setup: seq(file("f", 1000, 1), openOp(0, "f", wronly|appnd|direct)),
			call: writeOp(0, 512, 2), want: syscall.EINVAL, after: seq(fstatOp(0))},
		{name: "EINVAL/O_DIRECT misaligned buffer", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr|direct)),
			call: misalign(pwriteOp(0, 0, 512, 2), 8), want: syscall.EINVAL,
			engineOnly: "Linux 6.18 on virtio-blk accepts buffers misaligned within a page; the engine requires device.MemAlign"},
		{name: "EINVAL/O_DIRECT on a dir", setup: seq(mkdirOp("d")), call: openOp(0, "d", rdonly|direct), want: syscall.EINVAL},
		{name: "EINVAL/xattr name with empty suffix", setup: f("f"), call: setxOp("f", "user.", "v", 0), want: syscall.EINVAL},

		{name: "ok/O_DIRECT zero-length write at misaligned offset", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr|direct)),
			call: pwriteOp(0, 100, 0, 2)},
		{name: "ok/O_DIRECT misaligned read at EOF", setup: seq(file("f", 8192, 1), openOp(0, "f", rdonly|direct)),
			call: preadOp(0, 8192, 100)},
		{name: "ok/O_DIRECT misaligned read past EOF", setup: seq(file("f", 8192, 1), openOp(0, "f", rdonly|direct)),
			call: preadOp(0, 10000, 512)},
		{name: "ok/O_DIRECT misaligned read of a hole", setup: seq(openOp(0, "f", rdwr|creat), ftruncOp(0, 8192), openOp(1, "f", rdonly|direct)),
			call: preadOp(1, 100, 100)},
		{name: "E2BIG/xattr value over 64 KiB", setup: f("f"), call: Op{Kind: OpSetxattr, Path: "f", Name: "user.a", Value: make([]byte, 65537)}, want: syscall.E2BIG},
		{name: "ERANGE/xattr name over 255 bytes", setup: f("f"), call: setxOp("f", "user."+name255, "v", 0), want: syscall.ERANGE},
		{name: "ok/trusted xattr", setup: f("f"), call: setxOp("f", "trusted.a", "v", 0), after: seq(getxOp("f", "trusted.a"), listxOp("f"))},
		{name: "ENOENT/getxattr through dangling symlink", setup: seq(symlinkOp("nowhere", "l")), call: getxOp("l", "user.a"), want: syscall.ENOENT},

		// Dot and dotdot as last component.
		{name: "EISDIR/unlink dot", setup: seq(mkdirOp("d")), call: unlinkOp("d/."), want: syscall.EISDIR},
		{name: "EISDIR/unlink dotdot", setup: seq(mkdirOp("d")), call: unlinkOp("d/.."), want: syscall.EISDIR},
		{name: "EBUSY/rename dotdot", setup: seq(mkdirOp("d"), mkdirOp("d/e")), call: renameOp("d/e/..", "x", 0), want: syscall.EBUSY},
		{name: "EBUSY/rename onto dot", setup: seq(mkdirOp("d"), mkdirOp("e")), call: renameOp("e", "d/.", 0), want: syscall.EBUSY},
		{name: "EEXIST/mkdir dot", setup: seq(mkdirOp("d")), call: mkdirOp("d/."), want: syscall.EEXIST},
		{name: "EEXIST/link onto dot", setup: seq(mkdirOp("d"), f("f")), call: linkOp("f", "d/."), want: syscall.EEXIST},
		{name: "EEXIST/symlink onto dotdot", setup: seq(mkdirOp("d")), call: symlinkOp("x", "d/.."), want: syscall.EEXIST},
		{name: "ENOTDIR/file slash dot", setup: f("f"), call: statOp("f/."), want: syscall.ENOTDIR},
		{name: "ENOTDIR/file slash dotdot", setup: f("f"), call: statOp("f/.."), want: syscall.ENOTDIR},
		{name: "ok/open root", call: openOp(0, "/", rdonly), after: seq(fstatOp(0), openOp(1, ".", rdonly), fstatOp(1))},
		{name: "ok/truncate through symlink", setup: seq(file("f", 100, 1), symlinkOp("f", "l")), call: truncOp("l", 10), after: seq(lstatOp("l"))},

		// EBUSY
		{name: "EBUSY/rename dot", setup: seq(mkdirOp("d")), call: renameOp("d/.", "e", 0), want: syscall.EBUSY},

		// ENAMETOOLONG
		{name: "ENAMETOOLONG/create", call: openOp(0, name256, rdwr|creat), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/mkdir", call: mkdirOp(name256), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/stat", call: statOp(name256), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/intermediate component", call: statOp(name256 + "/f"), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/rename to long name", setup: f("f"), call: renameOp("f", name256, 0), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/symlink", call: symlinkOp("x", name256), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/link", setup: f("f"), call: linkOp("f", name256), want: syscall.ENAMETOOLONG},
		{name: "ok/255-byte name", call: openOp(0, name255, rdwr|creat), after: seq(statOp(name255), readdirOp("/"))},

		// ELOOP
		{name: "ELOOP/symlink loop", setup: seq(symlinkOp("b", "a"), symlinkOp("a", "b")), call: statOp("a"), want: syscall.ELOOP},
		{name: "ELOOP/open symlink loop", setup: seq(symlinkOp("b", "a"), symlinkOp("a", "b")), call: openOp(0, "a", rdonly), want: syscall.ELOOP},
		{name: "ELOOP/create through symlink loop", setup: seq(symlinkOp("b", "a"), symlinkOp("a", "b")),
			call: openOp(0, "a", rdwr|creat), want: syscall.ELOOP},
		{name: "ELOOP/self loop", setup: seq(symlinkOp("l", "l")), call: statOp("l"), want: syscall.ELOOP},
		{name: "ELOOP/path through loop", setup: seq(symlinkOp("b", "a"), symlinkOp("a", "b")), call: statOp("a/x"), want: syscall.ELOOP},
		{name: "ELOOP/O_NOFOLLOW on symlink", setup: seq(f("f"), symlinkOp("f", "l")),
			call: openOp(0, "l", rdonly|syscall.O_NOFOLLOW), want: syscall.ELOOP},
		{name: "ELOOP/O_NOFOLLOW|O_CREAT on symlink", setup: seq(f("f"), symlinkOp("f", "l")),
			call: openOp(0, "l", rdwr|creat|syscall.O_NOFOLLOW), want: syscall.ELOOP},
		{name: "ELOOP/41 symlinks", setup: seq(f("f"), symlinkChain(41)), call: statOp("l0"), want: syscall.ELOOP},
		{name: "ok/40 symlinks", setup: seq(f("f"), symlinkChain(41)), call: statOp("l1")},

		// EBADF
		{name: "EBADF/write on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)), call: pwriteOp(0, 0, 10, 2), want: syscall.EBADF},
		{name: "EBADF/sequential write on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)), call: writeOp(0, 10, 2), want: syscall.EBADF},
		{name: "EBADF/read on O_WRONLY", setup: seq(f("f"), openOp(0, "f", wronly)), call: preadOp(0, 0, 10), want: syscall.EBADF},
		{name: "EBADF/sequential read on O_WRONLY", setup: seq(f("f"), openOp(0, "f", wronly)), call: readOp(0, 10), want: syscall.EBADF},
		{name: "EBADF/fallocate on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)), call: fallocOp(0, 0, 0, 10), want: syscall.EBADF},
		{name: "EBADF/pread on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: preadOp(0, 0, 10), want: syscall.EBADF},
		{name: "EBADF/pwrite on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: pwriteOp(0, 0, 10, 2), want: syscall.EBADF},
		{name: "EBADF/fstat on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: fstatOp(0), want: syscall.EBADF},
		{name: "EBADF/fsync on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: fsyncOp(0), want: syscall.EBADF},
		{name: "EBADF/ftruncate on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: ftruncOp(0, 0), want: syscall.EBADF},
		{name: "EBADF/fallocate on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: fallocOp(0, 0, 0, 10), want: syscall.EBADF},
		{name: "EBADF/seek on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: seekOp(0, 0, 0), want: syscall.EBADF},
		{name: "EBADF/close twice", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)), call: closeOp(0), want: syscall.EBADF},
		{name: "EINVAL/ftruncate negative on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)),
			call: ftruncOp(0, -1), want: syscall.EINVAL},

		{name: "EBADF/sequential write on dir handle", setup: seq(mkdirOp("d"), f("d/f"), openOp(0, "d", rdonly)),
			call: writeOp(0, 10, 2), want: syscall.EBADF, after: seq(fstatOp(0), freaddirOp(0))},
		{name: "EINVAL/pwrite negative offset on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)),
			call: pwriteOp(0, -1, 10, 2), want: syscall.EINVAL},
		{name: "EINVAL/pwrite negative offset on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)),
			call: pwriteOp(0, -1, 10, 2), want: syscall.EINVAL},

		// EPERM
		{name: "EPERM/link a directory", setup: seq(mkdirOp("d")), call: linkOp("d", "e"), want: syscall.EPERM},

		// xattrs
		{name: "ENODATA/getxattr missing attribute", setup: f("f"), call: getxOp("f", "user.a"), want: syscall.ENODATA},
		{name: "EEXIST/setxattr XATTR_CREATE existing", setup: seq(f("f"), setxOp("f", "user.a", "1", 0)),
			call: setxOp("f", "user.a", "2", xattrCreate), want: syscall.EEXIST, after: seq(getxOp("f", "user.a"))},
		{name: "ENODATA/setxattr XATTR_REPLACE missing", setup: f("f"),
			call: setxOp("f", "user.a", "2", xattrReplace), want: syscall.ENODATA, after: seq(listxOp("f"))},
		{name: "ENODATA/removexattr missing", setup: f("f"), call: rmxOp("f", "user.a"), want: syscall.ENODATA},
		{name: "EOPNOTSUPP/setxattr without namespace", setup: f("f"), call: setxOp("f", "foo", "v", 0), want: syscall.EOPNOTSUPP},
		{name: "EOPNOTSUPP/getxattr without namespace", setup: f("f"), call: getxOp("f", "foo"), want: syscall.EOPNOTSUPP},
		{name: "ok/xattr set get list replace remove", setup: seq(f("f"), setxOp("f", "user.b", "two", 0), setxOp("f", "user.a", "one", xattrCreate)),
			call:  setxOp("f", "user.a", "uno", xattrReplace),
			after: seq(getxOp("f", "user.a"), getxOp("f", "user.b"), listxOp("f"), rmxOp("f", "user.b"), listxOp("f"), getxOp("f", "user.b"))},
		{name: "ok/xattr empty value", setup: f("f"), call: setxOp("f", "user.e", "", 0), after: seq(getxOp("f", "user.e"), listxOp("f"))},
		{name: "ok/xattr on dir", setup: seq(mkdirOp("d")), call: setxOp("d", "user.a", "v", 0), after: seq(getxOp("d", "user.a"), listxOp("d"))},
		{name: "ok/xattr through symlink", setup: seq(f("f"), symlinkOp("f", "l")), call: setxOp("l", "user.a", "v", 0),
			after: seq(getxOp("f", "user.a"), listxOp("l"))},
		{name: "ok/xattr of unlinked open file gone with it", setup: seq(f("f"), setxOp("f", "user.a", "v", 0), linkOp("f", "g"), unlinkOp("f")),
			call: getxOp("g", "user.a")},

		// EOPNOTSUPP, ENXIO
		{name: "EOPNOTSUPP/punch hole without KEEP_SIZE", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr)),
			call: fallocOp(0, punchHole, 0, 4096), want: syscall.EOPNOTSUPP, after: seq(preadOp(0, 0, 8192))},
		{name: "EOPNOTSUPP/punch hole with zero range", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr)),
			call: fallocOp(0, punchHole|zeroRange|keepSize, 0, 4096), want: syscall.EOPNOTSUPP},
		{name: "ENXIO/SEEK_DATA at EOF", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: seekOp(0, 100, seekData), want: syscall.ENXIO},
		{name: "ENXIO/SEEK_DATA past EOF", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: seekOp(0, 5000, seekData), want: syscall.ENXIO},
		{name: "ENXIO/SEEK_HOLE past EOF", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: seekOp(0, 5000, seekHole), want: syscall.ENXIO},
		{name: "ENXIO/SEEK_DATA on empty file", setup: seq(openOp(0, "f", rdwr|creat)), call: seekOp(0, 0, seekData), want: syscall.ENXIO},
		{name: "ENXIO/SEEK_DATA in trailing hole", setup: seq(file("f", 4096, 1), truncOp("f", 65536), openOp(0, "f", rdonly)),
			call: seekOp(0, 8192, seekData), want: syscall.ENXIO},
		{name: "ENXIO/SEEK_DATA negative offset", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: seekOp(0, -1, seekData), want: syscall.ENXIO},

		// Open semantics.
		{name: "ok/O_TRUNC", setup: seq(file("f", 5000, 1)), call: openOp(0, "f", rdwr|trunc), after: seq(fstatOp(0), preadOp(0, 0, 100))},
		{name: "ok/O_RDONLY|O_TRUNC truncates", setup: seq(file("f", 5000, 1)), call: openOp(0, "f", rdonly|trunc), after: seq(fstatOp(0))},
		{name: "ok/O_CREAT on existing file keeps it", setup: seq(file("f", 5000, 1)), call: openOp(0, "f", rdwr|creat),
			after: seq(fstatOp(0), preadOp(0, 0, 5000))},
		{name: "ok/O_EXCL without O_CREAT", setup: seq(file("f", 10, 1)), call: openOp(0, "f", rdwr|excl)},
		{name: "ok/create mode", call: withPerm(openOp(0, "f", rdwr|creat|excl), 0o640), after: seq(statOp("f"))},
		{name: "ok/O_CREAT through dangling symlink creates target", setup: seq(symlinkOp("g", "l")),
			call: openOp(0, "l", rdwr|creat), after: seq(pwriteOp(0, 0, 10, 3), statOp("g"), lstatOp("l"))},
		{name: "ok/O_CREAT through symlink to file", setup: seq(file("f", 10, 1), symlinkOp("f", "l")),
			call: openOp(0, "l", rdwr|creat), after: seq(fstatOp(0), preadOp(0, 0, 10))},
		{name: "ok/O_CREAT|O_EXCL in dir reached through symlink", setup: seq(mkdirOp("d"), symlinkOp("d", "l")),
			call: openOp(0, "l/f", rdwr|creat|excl), after: seq(readdirOp("d"))},

		// Reads and writes.
		{name: "ok/O_APPEND pwrite writes at EOF", setup: seq(file("f", 1000, 1), openOp(0, "f", wronly|appnd)),
			call: pwriteOp(0, 0, 10, 2), after: seq(seekOp(0, 0, 1), fstatOp(0))},
		{name: "ok/O_APPEND write moves position to EOF", setup: seq(file("f", 1000, 1), openOp(0, "f", rdwr|appnd), seekOp(0, 10, 0)),
			call: writeOp(0, 10, 2), after: seq(seekOp(0, 0, 1), fstatOp(0))},
		{name: "ok/O_APPEND zero-length write keeps position", setup: seq(file("f", 1000, 1), openOp(0, "f", rdwr|appnd), seekOp(0, 10, 0)),
			call: writeOp(0, 0, 2), after: seq(seekOp(0, 0, 1))},
		{name: "ok/O_DIRECT|O_APPEND at aligned EOF", setup: seq(file("f", 4096, 1), openOp(0, "f", wronly|appnd|direct)),
			call: writeOp(0, 512, 2), after: seq(seekOp(0, 0, 1), fstatOp(0))},
		{name: "ok/O_DIRECT|O_APPEND pwrite ignores a misaligned offset", setup: seq(file("f", 4096, 1), openOp(0, "f", rdwr|appnd|direct)),
			call: pwriteOp(0, 100, 512, 2), after: seq(fstatOp(0))},
		{name: "EBADF/fallocate len 0 on closed file", setup: seq(f("f"), openOp(0, "f", rdwr), closeOp(0)),
			call: fallocOp(0, 0, 0, 0), want: syscall.EBADF},
		{name: "EBADF/fallocate overflowing range on O_RDONLY", setup: seq(f("f"), openOp(0, "f", rdonly)),
			call: fallocOp(0, 0, 1<<62, 1<<62), want: syscall.EBADF},
		{name: "EFBIG/fallocate overflowing range", setup: seq(f("f"), openOp(0, "f", rdwr)),
			call: fallocOp(0, 0, 1<<62, 1<<62), want: syscall.EFBIG},
		{name: "ok/read past EOF is short", setup: seq(file("f", 80, 1), openOp(0, "f", rdonly)), call: preadOp(0, 50, 100),
			after: seq(preadOp(0, 80, 10), preadOp(0, 500, 10))},
		{name: "ok/sequential reads", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: readOp(0, 60),
			after: seq(readOp(0, 60), readOp(0, 60), seekOp(0, -30, 2), readOp(0, 60))},
		{name: "ok/zero-length reads and writes", setup: seq(file("f", 100, 1), openOp(0, "f", rdwr)), call: pwriteOp(0, 5000, 0, 2),
			after: seq(preadOp(0, 5000, 0), fstatOp(0))},
		{name: "ok/holes read as zeros", setup: seq(openOp(0, "f", rdwr|creat)), call: pwriteOp(0, 10000, 10, 2),
			after: seq(preadOp(0, 0, 10010), fstatOp(0))},
		{name: "ok/write far past EOF", setup: seq(openOp(0, "f", rdwr|creat)), call: pwriteOp(0, 4<<20, 10, 2),
			after: seq(fstatOp(0), preadOp(0, 4<<20-10, 30))},
		{name: "ok/O_DIRECT round trip", setup: seq(openOp(0, "f", rdwr|creat|direct)), call: pwriteOp(0, 4096, 8192, 2),
			after: seq(preadOp(0, 0, 16384), fstatOp(0), preadOp(0, 512, 512))},
		{name: "ok/O_DIRECT read past EOF is short", setup: seq(file("f", 1000, 1), openOp(0, "f", rdonly|direct)),
			call: preadOp(0, 0, 4096), after: seq(preadOp(0, 4096, 4096), preadOp(0, 512, 1024))},
		{name: "ok/O_DIRECT reads see buffered writes", setup: seq(openOp(0, "f", rdwr|creat), openOp(1, "f", rdwr|direct), pwriteOp(0, 100, 5000, 2)),
			call: preadOp(1, 0, 8192)},
		{name: "ok/buffered reads see O_DIRECT writes", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr), preadOp(0, 0, 8192), openOp(1, "f", rdwr|direct)),
			call: pwriteOp(1, 1024, 2048, 3), after: seq(preadOp(0, 0, 8192))},
		{name: "ok/O_DIRECT sub-block write into hole", setup: seq(openOp(0, "f", rdwr|creat|direct), ftruncOp(0, 16384)),
			call: pwriteOp(0, 4608, 1024, 3), after: seq(preadOp(0, 0, 16384))},

		// Truncate.
		{name: "ok/truncate down then up zero-fills", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr)), call: ftruncOp(0, 1000),
			after: seq(ftruncOp(0, 8192), preadOp(0, 0, 8192), fstatOp(0))},
		{name: "ok/truncate path down then up zero-fills", setup: seq(file("f", 20000, 1)), call: truncOp("f", 5000),
			after: seq(truncOp("f", 12000), statOp("f"))},
		{name: "ok/truncate up then write", setup: seq(file("f", 100, 1), openOp(0, "f", rdwr)), call: ftruncOp(0, 10000),
			after: seq(pwriteOp(0, 9000, 100, 2), preadOp(0, 0, 10000))},
		{name: "ok/truncate dirty cached file", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 12288, 1)),
			call: ftruncOp(0, 4000), after: seq(pwriteOp(0, 6000, 10, 2), preadOp(0, 0, 8192))},
		{name: "ok/ftruncate on O_APPEND handle", setup: seq(file("f", 1000, 1), openOp(0, "f", wronly|appnd)), call: ftruncOp(0, 10),
			after: seq(fstatOp(0))},

		// Fallocate.
		{name: "ok/fallocate extends with zeros", setup: seq(file("f", 1000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, 0, 500, 10000),
			after: seq(fstatOp(0), preadOp(0, 0, 12000))},
		{name: "ok/fallocate KEEP_SIZE keeps size", setup: seq(file("f", 1000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, keepSize, 0, 100000),
			after: seq(fstatOp(0), preadOp(0, 0, 2000), pwriteOp(0, 50000, 10, 2), preadOp(0, 0, 60000))},
		{name: "ok/fallocate inside file changes nothing", setup: seq(file("f", 10000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, 0, 100, 5000),
			after: seq(fstatOp(0), preadOp(0, 0, 10000))},
		{name: "ok/punch hole", setup: seq(file("f", 20000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, punchHole|keepSize, 1000, 9000),
			after: seq(fstatOp(0), preadOp(0, 0, 20000))},
		{name: "ok/punch hole past EOF", setup: seq(file("f", 5000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, punchHole|keepSize, 4000, 9000),
			after: seq(fstatOp(0), preadOp(0, 0, 20000))},
		{name: "ok/punch hole of dirty pages", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 16384, 1)),
			call: fallocOp(0, punchHole|keepSize, 4096, 8192), after: seq(preadOp(0, 0, 16384))},
		{name: "ok/zero range", setup: seq(file("f", 20000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, zeroRange, 1000, 9000),
			after: seq(fstatOp(0), preadOp(0, 0, 20000))},
		{name: "ok/zero range past EOF extends", setup: seq(file("f", 5000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, zeroRange, 4000, 9000),
			after: seq(fstatOp(0), preadOp(0, 0, 20000))},
		{name: "ok/zero range KEEP_SIZE past EOF", setup: seq(file("f", 5000, 1), openOp(0, "f", rdwr)), call: fallocOp(0, zeroRange|keepSize, 4000, 9000),
			after: seq(fstatOp(0), preadOp(0, 0, 20000))},
		{name: "ok/write into fallocated range", setup: seq(openOp(0, "f", rdwr|creat), fallocOp(0, 0, 0, 16384)),
			call: pwriteOp(0, 5000, 100, 2), after: seq(preadOp(0, 0, 16384), fstatOp(0))},
		{name: "ok/O_DIRECT write into fallocated range", setup: seq(openOp(0, "f", rdwr|creat|direct), fallocOp(0, 0, 0, 16384)),
			call: pwriteOp(0, 4608, 1024, 2), after: seq(preadOp(0, 0, 16384), fstatOp(0))},

		// SEEK_DATA and SEEK_HOLE on a 4 KiB-aligned layout (the engine's
		// and ext4's block size): data [0,4K), hole [4K,12K), data
		// [12K,16K), hole [16K,32K).
		{name: "ok/SEEK_DATA and SEEK_HOLE", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 4096, 1), pwriteOp(0, 12288, 4096, 2), ftruncOp(0, 32768)),
			call: seekOp(0, 0, seekHole),
			after: seq(seekOp(0, 0, seekData), seekOp(0, 100, seekData), seekOp(0, 4096, seekData), seekOp(0, 5000, seekHole),
				seekOp(0, 12288, seekHole), seekOp(0, 13000, seekData), seekOp(0, 16384, seekData), seekOp(0, 20000, seekHole),
				seekOp(0, 32767, seekHole), seekOp(0, 32768, seekHole))},
		{name: "ok/SEEK_HOLE after punch", setup: seq(file("f", 16384, 1), openOp(0, "f", rdwr), fallocOp(0, punchHole|keepSize, 4096, 4096)),
			call: seekOp(0, 0, seekHole), after: seq(seekOp(0, 4096, seekData), seekOp(0, 8192, seekHole))},
		{name: "ok/SEEK_HOLE O_DIRECT layout", setup: seq(openOp(0, "f", rdwr|creat|direct), pwriteOp(0, 8192, 4096, 1)),
			call: seekOp(0, 0, seekData), after: seq(seekOp(0, 0, seekHole), seekOp(0, 8192, seekHole))},

		// Rename.
		{name: "ok/rename onto existing file", setup: seq(file("f", 10, 1), file("g", 20, 2), openOp(0, "g", rdonly)),
			call: renameOp("f", "g", 0), after: seq(fstatOp(0), preadOp(0, 0, 20), statOp("g"), readdirOp("/"))},
		{name: "ok/rename to itself", setup: seq(file("f", 10, 1)), call: renameOp("f", "f", 0)},
		{name: "ok/rename onto own hard link", setup: seq(file("f", 10, 1), linkOp("f", "g")), call: renameOp("f", "g", 0),
			after: seq(statOp("f"), statOp("g"))},
		{name: "ok/rename dir across dirs", setup: seq(mkdirOp("a"), mkdirOp("b"), mkdirOp("a/d"), f("a/d/f")), call: renameOp("a/d", "b/e", 0),
			after: seq(statOp("a"), statOp("b"), readdirOp("b/e/.."), statOp("b/e/f"))},
		{name: "ok/rename dir over empty dir", setup: seq(mkdirOp("a"), mkdirOp("b"), mkdirOp("a/d"), mkdirOp("b/e")), call: renameOp("a/d", "b/e", 0),
			after: seq(statOp("a"), statOp("b"))},
		{name: "ok/RENAME_EXCHANGE file and dir", setup: seq(mkdirOp("a"), mkdirOp("b"), file("a/f", 10, 1), mkdirOp("b/d"), f("b/d/x")),
			call: renameOp("a/f", "b/d", renameExchange), after: seq(statOp("a"), statOp("b"), statOp("a/f"), statOp("b/d"), readdirOp("a/f/.."))},
		{name: "ok/RENAME_EXCHANGE two files", setup: seq(file("f", 10, 1), file("g", 20, 2)), call: renameOp("f", "g", renameExchange)},
		{name: "ok/RENAME_NOREPLACE to new name", setup: seq(file("f", 10, 1)), call: renameOp("f", "g", renameNoReplace)},
		{name: "ok/rename symlink", setup: seq(f("f"), symlinkOp("f", "l")), call: renameOp("l", "m", 0), after: seq(readlinkOp("m"), statOp("m"))},
		{name: "ok/rename dir with trailing slashes", setup: seq(mkdirOp("d")), call: renameOp("d/", "e/", 0)},
		{name: "ok/rename dir with open file in it", setup: seq(mkdirOp("d"), openOp(0, "d/f", rdwr|creat), pwriteOp(0, 0, 10, 1)),
			call: renameOp("d", "e", 0), after: seq(pwriteOp(0, 10, 10, 2), statOp("e/f"))},

		// Links.
		{name: "ok/link counts", setup: seq(file("f", 10, 1)), call: linkOp("f", "g"),
			after: seq(statOp("f"), unlinkOp("g"), statOp("f"), linkOp("f", "g"), file("h", 5, 2), renameOp("h", "g", 0), statOp("f"))},
		{name: "ok/link into other dir", setup: seq(mkdirOp("d"), file("f", 10, 1)), call: linkOp("f", "d/g"), after: seq(statOp("d/g"))},
		{name: "ok/link of symlink", setup: seq(f("f"), symlinkOp("f", "l")), call: linkOp("l", "m"), after: seq(lstatOp("l"), readlinkOp("m"))},
		{name: "ok/link through symlinked dir", setup: seq(mkdirOp("d"), symlinkOp("d", "l"), f("f")), call: linkOp("f", "l/g"), after: seq(readdirOp("d"))},
		{name: "ok/unlink open file", setup: seq(file("f", 100, 1), openOp(0, "f", rdwr)), call: unlinkOp("f"),
			after: seq(pwriteOp(0, 50, 100, 2), preadOp(0, 0, 200), fstatOp(0), readdirOp("/"), ftruncOp(0, 20), fsyncOp(0), fstatOp(0))},
		{name: "ok/unlink one of two links of open file", setup: seq(file("f", 100, 1), linkOp("f", "g"), openOp(0, "f", rdwr)), call: unlinkOp("f"),
			after: seq(fstatOp(0), pwriteOp(0, 0, 10, 2), statOp("g"))},
		{name: "ok/rename over open file", setup: seq(file("f", 100, 1), file("g", 100, 2), openOp(0, "g", rdwr)), call: renameOp("f", "g", 0),
			after: seq(pwriteOp(0, 0, 10, 3), preadOp(0, 0, 100), fstatOp(0))},

		// Directories.
		{name: "ok/mkdir nlink", setup: seq(mkdirOp("d")), call: mkdirOp("d/e"),
			after: seq(mkdirOp("d/f"), statOp("d"), rmdirOp("d/e"), statOp("d"), renameOp("d/f", "f", 0), statOp("d"), statOp("/"))},
		{name: "ok/mkdir with trailing slash", call: mkdirOp("d/"), after: seq(statOp("d"))},
		{name: "ok/mkdir mode", call: withPerm(mkdirOp("d"), 0o1777), after: seq(statOp("d"))},
		{name: "ok/rmdir with trailing slash", setup: seq(mkdirOp("d")), call: rmdirOp("d/")},
		{name: "ok/readdir types", setup: seq(mkdirOp("d"), f("f"), symlinkOp("f", "l"), symlinkOp("nowhere", "m")), call: readdirOp("/")},
		{name: "ok/readdir through handle", setup: seq(mkdirOp("d"), f("d/f"), mkdirOp("d/e"), openOp(0, "d", rdonly)), call: freaddirOp(0)},
		{name: "ok/readdir dot and dotdot paths", setup: seq(mkdirOp("d"), mkdirOp("d/e"), f("d/f")), call: readdirOp("d/e/.."),
			after: seq(readdirOp("d/./e/../."), statOp("d/e/../f"))},

		// Symlinks.
		{name: "ok/symlink", setup: seq(file("f", 10, 1)), call: symlinkOp("f", "l"), after: seq(readlinkOp("l"), statOp("l"), lstatOp("l"))},
		{name: "ok/symlink to dir in path", setup: seq(mkdirOp("d"), file("d/f", 10, 1)), call: symlinkOp("d", "l"),
			after: seq(statOp("l/f"), readdirOp("l"), openOp(0, "l/f", rdonly), preadOp(0, 0, 10))},
		{name: "ok/relative symlink with dotdot", setup: seq(mkdirOp("d"), file("f", 10, 1)), call: symlinkOp("../f", "d/l"),
			after: seq(statOp("d/l"), readlinkOp("d/l"))},

		// More namespace and data interplay.
		{name: "ok/rename over open empty dir", setup: seq(mkdirOp("d"), mkdirOp("e"), openOp(0, "e", rdonly)),
			call: renameOp("d", "e", 0), after: seq(fstatOp(0), freaddirOp(0), statOp("/"))},
		{name: "EISDIR/rename symlink over dir", setup: seq(mkdirOp("d"), symlinkOp("d", "l")), call: renameOp("l", "d", 0), want: syscall.EISDIR},
		{name: "ENOTDIR/rename dir over symlink to dir", setup: seq(mkdirOp("d"), mkdirOp("e"), symlinkOp("e", "l")),
			call: renameOp("d", "l", 0), want: syscall.ENOTDIR},
		{name: "EEXIST/RENAME_NOREPLACE dir onto itself", setup: seq(mkdirOp("d")), call: renameOp("d", "d", renameNoReplace), want: syscall.EEXIST},
		{name: "ok/rmdir of dir whose file is unlinked but open", setup: seq(mkdirOp("d"), openOp(0, "d/f", rdwr|creat), unlinkOp("d/f")),
			call: rmdirOp("d"), after: seq(pwriteOp(0, 0, 10, 1), fstatOp(0))},
		{name: "ok/O_TRUNC seen through another handle", setup: seq(file("f", 5000, 1), openOp(0, "f", rdonly)),
			call: openOp(1, "f", wronly|trunc), after: seq(fstatOp(0), preadOp(0, 0, 100))},
		{name: "ok/write through one handle read through another", setup: seq(openOp(0, "f", rdwr|creat), openOp(1, "f", rdonly)),
			call: pwriteOp(0, 3000, 5000, 2), after: seq(preadOp(1, 0, 9000))},
		{name: "ok/O_DIRECT read after truncate down and up", setup: seq(openOp(0, "f", rdwr|creat|direct), pwriteOp(0, 0, 16384, 1), ftruncOp(0, 5000)),
			call: ftruncOp(0, 16384), after: seq(preadOp(0, 0, 16384))},
		{name: "ok/O_DIRECT write past EOF in the EOF block", setup: seq(file("f", 8192, 1), truncOp("f", 5000), openOp(0, "f", rdwr|direct)),
			call: pwriteOp(0, 7168, 512, 2), after: seq(preadOp(0, 0, 8192), fstatOp(0))},
		{name: "ok/O_DIRECT write over dirty cached block", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 0, 8192, 1), openOp(1, "f", rdwr|direct)),
			call: pwriteOp(1, 1024, 1024, 2), after: seq(preadOp(0, 0, 8192), preadOp(1, 0, 8192))},
		{name: "ok/buffered write past EOF then O_DIRECT extend", setup: seq(openOp(0, "f", rdwr|creat), pwriteOp(0, 100, 300, 1), openOp(1, "f", rdwr|direct)),
			call: pwriteOp(1, 4096, 4096, 2), after: seq(preadOp(1, 0, 8192), fstatOp(1))},
		{name: "ok/punch inside one block", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr)),
			call: fallocOp(0, punchHole|keepSize, 1000, 100), after: seq(preadOp(0, 0, 8192))},
		{name: "ok/zero range inside one block", setup: seq(file("f", 8192, 1), openOp(0, "f", rdwr)),
			call: fallocOp(0, zeroRange, 4100, 10), after: seq(preadOp(0, 0, 8192))},
		{name: "ok/punch O_DIRECT-written data", setup: seq(openOp(0, "f", rdwr|creat|direct), pwriteOp(0, 0, 16384, 1)),
			call: fallocOp(0, punchHole|keepSize, 2048, 8192), after: seq(preadOp(0, 0, 16384))},
		{name: "ok/KEEP_SIZE prealloc then truncate up", setup: seq(file("f", 1000, 1), openOp(0, "f", rdwr), fallocOp(0, keepSize, 0, 65536)),
			call: ftruncOp(0, 30000), after: seq(preadOp(0, 0, 30000), pwriteOp(0, 20000, 100, 2), preadOp(0, 19990, 200))},
		{name: "ok/recreated file has no xattrs", setup: seq(f("f"), setxOp("f", "user.a", "v", 0), unlinkOp("f"), f("f")),
			call: listxOp("f")},
		{name: "ok/O_NOFOLLOW with symlink in the directory part", setup: seq(mkdirOp("d"), f("d/f"), symlinkOp("d", "l")),
			call: openOp(0, "l/f", rdonly|syscall.O_NOFOLLOW)},
		{name: "ok/O_DIRECTORY through symlink", setup: seq(mkdirOp("d"), symlinkOp("d", "l")), call: openOp(0, "l", rdonly|syscall.O_DIRECTORY)},
		{name: "ENOTDIR/O_DIRECTORY|O_NOFOLLOW on symlink", setup: seq(mkdirOp("d"), symlinkOp("d", "l")),
			call: openOp(0, "l", rdonly|syscall.O_DIRECTORY|syscall.O_NOFOLLOW), want: syscall.ENOTDIR},
		{name: "EEXIST/O_CREAT|O_EXCL on symlink to file", setup: seq(f("f"), symlinkOp("f", "l")), call: openOp(0, "l", rdwr|creat|excl), want: syscall.EEXIST},
		{name: "ok/many entries", setup: seq(file("a9", 1, 1), file("a10", 1, 1), file("b", 1, 1), mkdirOp("a1"), file("a1/x", 1, 1), file("A", 1, 1), file("_", 1, 1)),
			call: readdirOp("/")},
		{name: "ok/long symlink target", call: symlinkOp(strings.Repeat("x/", 2047), "l"), after: seq(lstatOp("l"))},
		{name: "ENAMETOOLONG/symlink target of 4096 bytes", call: symlinkOp(strings.Repeat("x", 4096), "l"), want: syscall.ENAMETOOLONG},
		{name: "ENAMETOOLONG/path of 4096 bytes", call: statOp(strings.Repeat("d/", 2048)), want: syscall.ENAMETOOLONG},
		{name: "ok/setgid dir: new dir and file inherit group", setup: seq(mkdirOp("d"), chownOp("d", 0, 1234), chmodOp("d", 0o2755)),
			call: mkdirOp("d/e"), after: seq(statOp("d/e"), openOp(0, "d/f", rdwr|creat), fstatOp(0))},
		{name: "ok/O_DSYNC and O_SYNC writes", setup: seq(openOp(0, "f", rdwr|creat|syscall.O_DSYNC), openOp(1, "f", rdwr|syscall.O_SYNC)),
			call: pwriteOp(0, 0, 5000, 1), after: seq(pwriteOp(1, 100, 100, 2), preadOp(0, 0, 5000))},

		// Attributes.
		{name: "ok/chmod", setup: seq(f("f")), call: chmodOp("f", 0o600), after: seq(statOp("f"), chmodOp("f", 0o4755), statOp("f"))},
		{name: "ok/chmod through symlink", setup: seq(f("f"), symlinkOp("f", "l")), call: chmodOp("l", 0o640), after: seq(statOp("f"))},
		{name: "ok/chmod dir", setup: seq(mkdirOp("d")), call: chmodOp("d", 0o700), after: seq(statOp("d"))},
		{name: "ok/chown", setup: seq(f("f")), call: chownOp("f", 1234, 5678), after: seq(statOp("f"), chownOp("f", -1, 42), statOp("f"))},
		{name: "ok/chown clears set-user-ID", setup: seq(f("f"), chmodOp("f", 0o6755)), call: chownOp("f", 1, 1), after: seq(statOp("f"))},
		{name: "ok/chown to same owner clears set-user-ID", setup: seq(f("f"), chmodOp("f", 0o4755)), call: chownOp("f", 0, 0), after: seq(statOp("f"))},
		{name: "ok/chown keeps set-group-ID without group exec", setup: seq(f("f"), chmodOp("f", 0o2745)), call: chownOp("f", 1, 1), after: seq(statOp("f"))},
		{name: "ok/chown dir keeps set-group-ID", setup: seq(mkdirOp("d"), chmodOp("d", 0o2755)), call: chownOp("d", 1, 1), after: seq(statOp("d"))},
		{name: "ok/utimes", setup: seq(f("f")), call: utimesOp("f", t2001, t2002), after: seq(statTimesOp("f"))},
		{name: "ok/utimes dir", setup: seq(mkdirOp("d")), call: utimesOp("d", t2002, t2001), after: seq(statTimesOp("d"))},
		{name: "ok/utimes through symlink", setup: seq(f("f"), symlinkOp("f", "l")), call: utimesOp("l", t2001, t2002), after: seq(statTimesOp("f"))},
		{name: "ok/fsync and fdatasync on O_RDONLY", setup: seq(file("f", 100, 1), openOp(0, "f", rdonly)), call: fsyncOp(0), after: seq(fdatasyncOp(0))},
		{name: "ok/fsync dir handle", setup: seq(mkdirOp("d"), openOp(0, "d", rdonly)), call: fsyncOp(0)},
	}
	cases = append(cases, reflinkCases()...)
	return append(cases, atomicCases()...)
}

// transcript runs c on t and returns one line per step, then the tree.
// It also reports, apart, setup steps that failed and a call whose errno
// is not c.want.
func transcript(t Target, c posixCase) (lines []string, setupErrs []string, callErr string) {
	r := NewRunner(t)
	defer r.CloseAll()
	for i, op := range c.setup {
		res := r.Apply(op)
		lines = append(lines, fmt.Sprintf("setup %d: %v -> %v", i, op, res))
		if res.Errno != 0 {
			setupErrs = append(setupErrs, fmt.Sprintf("%v -> %v", op, res))
		}
	}
	res := r.Apply(c.call)
	lines = append(lines, fmt.Sprintf("call: %v -> %v", c.call, res))
	if res.Errno != c.want {
		callErr = fmt.Sprintf("%v -> %v, want %s", c.call, res, errnoName(c.want))
		if c.want == 0 {
			callErr = fmt.Sprintf("%v -> %v, want success", c.call, res)
		}
	}
	for _, op := range c.after {
		lines = append(lines, fmt.Sprintf("after: %v -> %v", op, r.Apply(op)))
	}
	r.CloseAll()
	tree, err := Tree(t)
	if err != nil {
		lines = append(lines, "tree: "+err.Error())
	}
	for _, l := range tree {
		lines = append(lines, "tree: "+l)
	}
	return lines, setupErrs, callErr
}

// diffLines renders two transcripts side by side from their first
// difference, or returns "" if they are equal.
func diffLines(aName string, a []string, bName string, b []string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) && i == len(b) {
		return ""
	}
	var sb strings.Builder
	for j := range i {
		fmt.Fprintf(&sb, "   %s\n", a[j])
	}
	for j := i; j < len(a) || j < len(b); j++ {
		var x, y string
		if j < len(a) {
			x = a[j]
		}
		if j < len(b) {
			y = b[j]
		}
		if x == y {
			fmt.Fprintf(&sb, "   %s\n", x)
			continue
		}
		fmt.Fprintf(&sb, " - %s: %s\n + %s: %s\n", aName, x, bName, y)
	}
	return sb.String()
}

// TestPOSIX runs every case on the engine and on the host kernel and
// requires the same transcript. The host is a temporary directory (ext4),
// or, for the cases that call what ext4 lacks or what sluice does as XFS
// does (needsXFS), a directory of the XFS oracle; without one (not root,
// no mkfs.xfs) those cases check the engine's errno only.
func TestPOSIX(t *testing.T) {
	runPOSIX(t, posixCases(), func(t *testing.T) *Engine { return newTestEngine(t, EngineConfig{}) })
}

// runPOSIX runs cases as TestPOSIX does, each as a parallel subtest on the
// engine newEngine returns.
func runPOSIX(t *testing.T, cases []posixCase, newEngine func(t *testing.T) *Engine) {
	var mu sync.Mutex
	var known []string // protected by mu
	t.Cleanup(func() { // after every (parallel) case
		if len(known) > 0 {
			sort.Strings(known)
			t.Logf("%d cases fail because of known engine bugs (see its issue):\n  %s", len(known), strings.Join(known, "\n  "))
		}
	})
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			eng := newEngine(t)
			el, esetup, ecall := transcript(eng, c)
			el = append(el, checkEngine(t, eng)...)
			var problems []string
			if len(esetup) > 0 {
				problems = append(problems, fmt.Sprintf("engine setup failed: %q", esetup))
			}
			if ecall != "" {
				problems = append(problems, "engine: "+ecall)
			}
			host, why := hostFor(t, seq(c.setup, c.call, c.after), 4096)
			if host == nil {
				t.Logf("host side skipped: %s", why)
			}
			if host != nil {
				hl, hsetup, hcall := transcript(host, c)
				if len(hsetup) > 0 || (hcall != "" && c.engineOnly == "") {
					t.Fatalf("the case is wrong: on %s setup failed %q / call %s", host.Name(), hsetup, hcall)
				}
				if c.engineOnly != "" {
					t.Logf("host not compared (%s); host says: %s", c.engineOnly, hl[len(c.setup)])
				} else if d := diffLines("sluice", el, "linux ", hl); d != "" {
					problems = append(problems, "transcripts differ from "+host.Name()+":\n"+d)
				}
			}
			switch {
			case c.bug != "" && len(problems) == 0:
				t.Errorf("known bug %s no longer reproduces: remove the mark from the case", c.bug)
			case c.bug != "":
				mu.Lock()
				known = append(known, c.bug+": "+c.name)
				mu.Unlock()
				t.Logf("known bug %s:\n%s", c.bug, strings.Join(problems, "\n"))
			case len(problems) > 0:
				t.Errorf("%s", strings.Join(problems, "\n"))
			}
		})
	}
}
