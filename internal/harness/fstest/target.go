package fstest

import (
	"errors"
	"syscall"
	"time"
)

// Target is a file system under test, reached through a path API that
// mirrors the Linux system calls one for one. Three implementations exist:
// Engine (a sluice file system on memory devices), Host (a directory on the
// host kernel: the oracle) and Model (a trivial in-memory model).
//
// Paths are slash-separated and relative to the target's root; a leading
// "/" is allowed and names the root too. Symlinks are resolved inside the
// target, so their targets must be relative and must not climb above the
// root with "..". Flags, modes and whence values are Linux's (sluice.O_*,
// sluice.Rename*, sluice.Falloc*, sluice.Xattr* and sluice.Seek* have the
// same values).
//
// Every error carries a syscall.Errno that Errno extracts: what the call
// returned on Linux, or what the engine says Linux would return.
// Permissions are not checked by the engine and the tests run as root, so
// EACCES and EPERM-for-permission are out of scope.
//
// A Target is used by one goroutine at a time.
type Target interface {
	// Name identifies the target in test output.
	Name() string

	// Open opens path with open(2) flags; perm is the mode of a file it
	// creates (not masked: tests run with umask 0).
	Open(path string, flag int, perm uint32) (Handle, error)
	// Stat is stat(2) (following a final symlink); Lstat is lstat(2).
	Stat(path string) (Stat, error)
	Lstat(path string) (Stat, error)
	Mkdir(path string, perm uint32) error
	// ReadDir lists a directory in name order, without "." and "..".
	ReadDir(path string) ([]DirEntry, error)
	Unlink(path string) error
	Rmdir(path string) error
	// Rename is renameat2(2): flags is 0, RENAME_NOREPLACE or
	// RENAME_EXCHANGE.
	Rename(oldpath, newpath string, flags uint32) error
	// Link is link(2): oldpath is not followed if it is a symlink.
	Link(oldpath, newpath string) error
	Symlink(target, newpath string) error
	Readlink(path string) (string, error)
	Chmod(path string, mode uint32) error
	// Chown is chown(2); -1 leaves the owner or group unchanged.
	Chown(path string, uid, gid int) error
	// Utimes sets the access and modification times (utimensat(2)).
	Utimes(path string, atime, mtime time.Time) error
	Truncate(path string, size int64) error
	Getxattr(path, name string) ([]byte, error)
	// Setxattr is setxattr(2): flags is 0, XATTR_CREATE or XATTR_REPLACE.
	Setxattr(path, name string, value []byte, flags int) error
	// Listxattr returns the attribute names in sorted order.
	Listxattr(path string) ([]string, error)
	Removexattr(path, name string) error
}

// Handle is an open file or directory of a Target: a file descriptor.
// After Close every call fails with EBADF.
type Handle interface {
	// Pread is pread(2): a short count at end of file, (0, nil) at or past
	// it. With O_DIRECT, p must come from device.AlignedBuf (and offset and
	// length must be aligned) unless the call means to fail.
	Pread(p []byte, off int64) (int, error)
	// Pwrite is pwrite(2); on a file opened O_APPEND it appends, as on
	// Linux.
	Pwrite(p []byte, off int64) (int, error)
	// PwriteAtomic is pwritev2(2) with RWF_ATOMIC and p as its one
	// buffer (sluice.RWFAtomic): an untorn write. It takes a power of two
	// between the file system's atomic write unit min and max (statx
	// STATX_WRITE_ATOMIC: a block and 1 MiB on sluice and on the XFS
	// oracle) at an offset aligned to its length, on an O_DIRECT file.
	// A negative offset is EINVAL, as for pwrite(2) (pwritev2 would take
	// -1 for the file position). Without a crash its effect is exactly
	// Pwrite's. FUSE passes no RWF_ATOMIC: on a FUSE mount it fails with
	// EOPNOTSUPP.
	PwriteAtomic(p []byte, off int64) (int, error)
	// Read and Write use and advance the file position, as read(2) and
	// write(2); Read returns (0, nil) at end of file.
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	// Seek is lseek(2), including SEEK_DATA (3) and SEEK_HOLE (4).
	Seek(off int64, whence int) (int64, error)
	// Truncate is ftruncate(2).
	Truncate(size int64) error
	// Fallocate is fallocate(2) with FALLOC_FL_* modes.
	Fallocate(mode uint32, off, n int64) error
	Fsync() error
	Fdatasync() error
	// Stat is fstat(2).
	Stat() (Stat, error)
	// ReadDir lists the directory the handle is open on, in name order.
	ReadDir() ([]DirEntry, error)
	Close() error

	// The reflink calls take a second handle of the same target; a
	// handle of another kind (closedHandle for a slot never opened)
	// stands for a closed descriptor. Offsets must be multiples of the
	// file system's block size, and errors come in the order XFS checks
	// them (vfs_clone_file_range, vfs_dedupe_file_range and
	// xfs_exchange_range over generic_remap_file_range_prep).

	// Clone is ioctl(FICLONE) on the handle, the destination: all of
	// src's blocks are shared into it (CloneRange(src, 0, 0, 0)).
	Clone(src Handle) error
	// CloneRange is ioctl(FICLONERANGE) on the handle, the destination:
	// src's bytes [srcOff, srcOff+n) are shared into it at dstOff; n == 0
	// means up to src's EOF.
	CloneRange(src Handle, srcOff, dstOff, n int64) error
	// DedupeRange is ioctl(FIDEDUPERANGE) on the handle, the source, with
	// one destination: it returns the destination's bytes_deduped, and
	// its status as the error (EBADE for FILE_DEDUPE_RANGE_DIFFERS).
	DedupeRange(srcOff, n int64, dst Handle, dstOff int64) (int64, error)
	// ExchangeRange is ioctl(XFS_IOC_EXCHANGE_RANGE) on the handle, file2:
	// file1's bytes [off1, off1+n) and the handle's [off2, off2+n) change
	// places; flags are the Exchange* constants.
	ExchangeRange(file1 Handle, off1, off2, n int64, flags uint64) error
}

// Remounter is implemented by targets that can be shut down cleanly and
// opened again (the engine). The caller closes every handle first.
type Remounter interface {
	Remount() error
}

// Stat is the part of stat(2) the tests look at.
type Stat struct {
	Ino   uint64
	Mode  uint32 // file type (S_IFMT bits) and permission bits
	Nlink uint32
	Uid   uint32
	Gid   uint32
	Size  int64
	// Blocks is the space allocated in 512 B units. It depends on each
	// file system's block size and allocation policy: compare with care.
	Blocks int64
	Atime  time.Time
	Mtime  time.Time
	Ctime  time.Time
}

// Type returns the S_IFMT bits of the mode.
func (s Stat) Type() uint32 { return s.Mode & syscall.S_IFMT }

// DirEntry is one directory entry.
type DirEntry struct {
	Name string
	Type uint32 // S_IFMT bits
}

// NotErrno is what Errno returns for an error that carries no
// syscall.Errno: it matches no real errno, so a comparison shows it.
const NotErrno = syscall.Errno(4095)

// Errno normalises err for comparison: 0 for nil, the syscall.Errno in
// err's chain, or NotErrno.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return NotErrno
}

// typeName returns a short name for S_IFMT bits.
func typeName(t uint32) string {
	switch t & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "reg"
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "lnk"
	case syscall.S_IFCHR:
		return "chr"
	case syscall.S_IFBLK:
		return "blk"
	case syscall.S_IFIFO:
		return "fifo"
	case syscall.S_IFSOCK:
		return "sock"
	}
	return "?"
}
