package fstest

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Host is a Target over a directory of the host kernel: the oracle. Calls
// go straight to the system calls (openat, renameat2, fallocate, lseek
// with SEEK_DATA/SEEK_HOLE, utimensat, the xattr calls ...) relative to a
// descriptor of the root directory, so their errnos are the kernel's own.
// A FUSE test can point it at a sluice mount point.
//
// Created files get perm minus the process umask: the tests set the umask
// to 0. A ".." that climbs above the root leaves it (the kernel does not
// confine *at calls), so tests must not do that.
type Host struct {
	dir  string
	root int    // O_PATH descriptor of dir
	name string // "host/" and the file system type
}

var _ Target = (*Host)(nil)

// NewHost returns a Target rooted at directory dir, which must exist.
func NewHost(dir string) (*Host, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	name := "host"
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) == nil {
		switch st.Type {
		case unix.XFS_SUPER_MAGIC:
			name += "/xfs"
		case unix.EXT4_SUPER_MAGIC:
			name += "/ext4"
		case unix.TMPFS_MAGIC:
			name += "/tmpfs"
		case unix.FUSE_SUPER_MAGIC:
			name += "/fuse"
		default:
			name += fmt.Sprintf("/%#x", st.Type)
		}
	}
	return &Host{dir: dir, root: fd, name: name}, nil
}

// Close releases the root descriptor (not the files).
func (h *Host) Close() error { return unix.Close(h.root) }

// Name implements Target: "host/" and the type of the file system, e.g.
// "host/xfs".
func (h *Host) Name() string { return h.name }

// rel turns a target path into one relative to the root descriptor.
func rel(path string) string {
	if path == "" {
		return "" // ENOENT, as on Linux
	}
	r := strings.TrimLeft(path, "/")
	if r == "" {
		return "."
	}
	return r
}

// full returns the host path of a target path, for the calls that have no
// *at form (truncate, the xattr calls).
func (h *Host) full(path string) string {
	r := rel(path)
	if r == "" {
		return ""
	}
	return h.dir + "/" + r
}

func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

func linkErr(op, oldpath, newpath string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: oldpath, New: newpath, Err: err}
}

// Open implements Target.
func (h *Host) Open(path string, flag int, perm uint32) (Handle, error) {
	fd, err := unix.Openat(h.root, rel(path), flag|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	return &hostHandle{fd: fd, name: path}, nil
}

// Stat implements Target.
func (h *Host) Stat(path string) (Stat, error) { return h.fstatat("stat", path, 0) }

// Lstat implements Target.
func (h *Host) Lstat(path string) (Stat, error) {
	return h.fstatat("lstat", path, unix.AT_SYMLINK_NOFOLLOW)
}

func (h *Host) fstatat(op, path string, flags int) (Stat, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(h.root, rel(path), &st, flags); err != nil {
		return Stat{}, pathErr(op, path, err)
	}
	return statOfUnix(&st), nil
}

// Mkdir implements Target.
func (h *Host) Mkdir(path string, perm uint32) error {
	return pathErr("mkdir", path, unix.Mkdirat(h.root, rel(path), perm))
}

// ReadDir implements Target.
func (h *Host) ReadDir(path string) ([]DirEntry, error) {
	fd, err := unix.Openat(h.root, rel(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("readdir", path, err)
	}
	return readDirFd(fd, path)
}

// readDirFd lists directory fd and closes it.
func readDirFd(fd int, name string) ([]DirEntry, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(ents))
	for _, d := range ents {
		out = append(out, DirEntry{Name: d.Name(), Type: ifmtOf(d.Type())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func ifmtOf(m os.FileMode) uint32 {
	switch {
	case m&os.ModeDir != 0:
		return syscall.S_IFDIR
	case m&os.ModeSymlink != 0:
		return syscall.S_IFLNK
	case m&os.ModeNamedPipe != 0:
		return syscall.S_IFIFO
	case m&os.ModeSocket != 0:
		return syscall.S_IFSOCK
	case m&os.ModeCharDevice != 0:
		return syscall.S_IFCHR
	case m&os.ModeDevice != 0:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// Unlink implements Target.
func (h *Host) Unlink(path string) error {
	return pathErr("unlink", path, unix.Unlinkat(h.root, rel(path), 0))
}

// Rmdir implements Target.
func (h *Host) Rmdir(path string) error {
	return pathErr("rmdir", path, unix.Unlinkat(h.root, rel(path), unix.AT_REMOVEDIR))
}

// Rename implements Target. rename(2) lets a file system refuse to
// replace a non-empty directory with EEXIST or ENOTEMPTY: XFS says EEXIST
// (xfs_rename), ext4 and sluice ENOTEMPTY, which Rename reports for both.
func (h *Host) Rename(oldpath, newpath string, flags uint32) error {
	err := unix.Renameat2(h.root, rel(oldpath), h.root, rel(newpath), uint(flags))
	if err == unix.EEXIST && flags&unix.RENAME_NOREPLACE == 0 && h.name == "host/xfs" {
		err = unix.ENOTEMPTY
	}
	return linkErr("rename", oldpath, newpath, err)
}

// Link implements Target.
func (h *Host) Link(oldpath, newpath string) error {
	return linkErr("link", oldpath, newpath, unix.Linkat(h.root, rel(oldpath), h.root, rel(newpath), 0))
}

// Symlink implements Target.
func (h *Host) Symlink(target, newpath string) error {
	return linkErr("symlink", target, newpath, unix.Symlinkat(target, h.root, rel(newpath)))
}

// Readlink implements Target.
func (h *Host) Readlink(path string) (string, error) {
	buf := make([]byte, unix.PathMax+1)
	n, err := unix.Readlinkat(h.root, rel(path), buf)
	if err != nil {
		return "", pathErr("readlink", path, err)
	}
	return string(buf[:n]), nil
}

// Chmod implements Target.
func (h *Host) Chmod(path string, mode uint32) error {
	return pathErr("chmod", path, unix.Fchmodat(h.root, rel(path), mode, 0))
}

// Chown implements Target.
func (h *Host) Chown(path string, uid, gid int) error {
	return pathErr("chown", path, unix.Fchownat(h.root, rel(path), uid, gid, 0))
}

// Utimes implements Target.
func (h *Host) Utimes(path string, atime, mtime time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return pathErr("utimes", path, unix.UtimesNanoAt(h.root, rel(path), ts, 0))
}

// Truncate implements Target.
func (h *Host) Truncate(path string, size int64) error {
	return pathErr("truncate", path, unix.Truncate(h.full(path), size))
}

// Getxattr implements Target.
func (h *Host) Getxattr(path, name string) ([]byte, error) {
	p := h.full(path)
	for {
		n, err := unix.Getxattr(p, name, nil)
		if err != nil {
			return nil, pathErr("getxattr", path, err)
		}
		buf := make([]byte, n)
		m, err := unix.Getxattr(p, name, buf)
		if err == unix.ERANGE {
			continue // it grew in between
		}
		if err != nil {
			return nil, pathErr("getxattr", path, err)
		}
		return buf[:m], nil
	}
}

// Setxattr implements Target.
func (h *Host) Setxattr(path, name string, value []byte, flags int) error {
	return pathErr("setxattr", path, unix.Setxattr(h.full(path), name, value, flags))
}

// Listxattr implements Target.
func (h *Host) Listxattr(path string) ([]string, error) {
	p := h.full(path)
	for {
		n, err := unix.Listxattr(p, nil)
		if err != nil {
			return nil, pathErr("listxattr", path, err)
		}
		buf := make([]byte, n)
		m, err := unix.Listxattr(p, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, pathErr("listxattr", path, err)
		}
		var names []string
		for _, s := range strings.Split(string(buf[:m]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		sort.Strings(names)
		return names, nil
	}
}

// Removexattr implements Target.
func (h *Host) Removexattr(path, name string) error {
	return pathErr("removexattr", path, unix.Removexattr(h.full(path), name))
}

// hostHandle is a file descriptor; -1 after Close, so that later calls get
// EBADF from the kernel (and never reach a descriptor reused meanwhile).
type hostHandle struct {
	fd   int
	name string
}

func (h *hostHandle) Pread(p []byte, off int64) (int, error) {
	n, err := unix.Pread(h.fd, p, off)
	return max(n, 0), pathErr("read", h.name, err)
}

func (h *hostHandle) Pwrite(p []byte, off int64) (int, error) {
	n, err := unix.Pwrite(h.fd, p, off)
	return max(n, 0), pathErr("write", h.name, err)
}

// PwriteAtomic is pwritev2 with RWF_ATOMIC and one iovec, which the
// kernel takes as a single user buffer (iter_is_ubuf, as
// generic_atomic_write_valid requires). p comes from device.AlignedBuf
// (Pattern), as O_DIRECT needs. A negative offset is refused here, as
// pwrite(2) refuses it: pwritev2 would write at the file position for -1.
func (h *hostHandle) PwriteAtomic(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, pathErr("write", h.name, syscall.EINVAL)
	}
	n, err := unix.Pwritev2(h.fd, [][]byte{p}, off, unix.RWF_ATOMIC)
	return max(n, 0), pathErr("write", h.name, err)
}

func (h *hostHandle) Read(p []byte) (int, error) {
	n, err := unix.Read(h.fd, p)
	return max(n, 0), pathErr("read", h.name, err)
}

func (h *hostHandle) Write(p []byte) (int, error) {
	n, err := unix.Write(h.fd, p)
	return max(n, 0), pathErr("write", h.name, err)
}

func (h *hostHandle) Seek(off int64, whence int) (int64, error) {
	pos, err := unix.Seek(h.fd, off, whence)
	if err != nil {
		return 0, pathErr("seek", h.name, err)
	}
	return pos, nil
}

func (h *hostHandle) Truncate(size int64) error {
	return pathErr("truncate", h.name, unix.Ftruncate(h.fd, size))
}

func (h *hostHandle) Fallocate(mode uint32, off, n int64) error {
	return pathErr("fallocate", h.name, unix.Fallocate(h.fd, mode, off, n))
}

func (h *hostHandle) Fsync() error     { return pathErr("fsync", h.name, unix.Fsync(h.fd)) }
func (h *hostHandle) Fdatasync() error { return pathErr("fdatasync", h.name, unix.Fdatasync(h.fd)) }

func (h *hostHandle) Stat() (Stat, error) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return Stat{}, pathErr("stat", h.name, err)
	}
	return statOfUnix(&st), nil
}

// ReadDir lists the directory through a new open file description (of
// /proc/self/fd/N), so that the handle's own position does not move.
func (h *hostHandle) ReadDir() ([]DirEntry, error) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return nil, pathErr("readdir", h.name, err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", h.fd), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("readdir", h.name, err)
	}
	return readDirFd(fd, h.name)
}

func (h *hostHandle) Close() error {
	err := unix.Close(h.fd)
	h.fd = -1
	return pathErr("close", h.name, err)
}

// fdOf returns the descriptor of h, or -1 (EBADF) if h is not a host
// handle (a slot never opened) or is closed.
func fdOf(h Handle) int {
	if hh, ok := h.(*hostHandle); ok {
		return hh.fd
	}
	return -1
}

func (h *hostHandle) Clone(src Handle) error {
	return pathErr("ficlone", h.name, unix.IoctlFileClone(h.fd, fdOf(src)))
}

func (h *hostHandle) CloneRange(src Handle, srcOff, dstOff, n int64) error {
	return pathErr("ficlonerange", h.name, unix.IoctlFileCloneRange(h.fd, &unix.FileCloneRange{
		Src_fd: int64(fdOf(src)), Src_offset: uint64(srcOff), Src_length: uint64(n), Dest_offset: uint64(dstOff),
	}))
}

// DedupeRange returns the destination's status as the error: the
// negative errno, or EBADE for FILE_DEDUPE_RANGE_DIFFERS.
func (h *hostHandle) DedupeRange(srcOff, n int64, dst Handle, dstOff int64) (int64, error) {
	r := unix.FileDedupeRange{
		Src_offset: uint64(srcOff), Src_length: uint64(n),
		Info: []unix.FileDedupeRangeInfo{{Dest_fd: int64(fdOf(dst)), Dest_offset: uint64(dstOff)}},
	}
	if err := unix.IoctlFileDedupeRange(h.fd, &r); err != nil {
		return 0, pathErr("fideduperange", h.name, err)
	}
	var err error
	switch st := r.Info[0].Status; {
	case st == unix.FILE_DEDUPE_RANGE_DIFFERS:
		err = syscall.EBADE
	case st < 0:
		err = syscall.Errno(-st)
	}
	return int64(r.Info[0].Bytes_deduped), pathErr("fideduperange", h.name, err)
}

// xfsIocExchangeRange is XFS_IOC_EXCHANGE_RANGE, _IOW('X', 129, struct
// xfs_exchange_range).
const xfsIocExchangeRange = 0x40285881

// xfsExchangeRange is struct xfs_exchange_range (xfs_fs.h).
type xfsExchangeRange struct {
	file1Fd     int32
	pad         uint32
	file1Offset uint64
	file2Offset uint64
	length      uint64
	flags       uint64
}

func (h *hostHandle) ExchangeRange(file1 Handle, off1, off2, n int64, flags uint64) error {
	arg := xfsExchangeRange{
		file1Fd: int32(fdOf(file1)), file1Offset: uint64(off1), file2Offset: uint64(off2), length: uint64(n), flags: flags,
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(h.fd), xfsIocExchangeRange, uintptr(unsafe.Pointer(&arg)))
	var err error
	if e != 0 {
		err = e
	}
	return pathErr("exchange_range", h.name, err)
}

func statOfUnix(st *unix.Stat_t) Stat {
	return Stat{
		Ino: st.Ino, Mode: st.Mode, Nlink: uint32(st.Nlink), Uid: st.Uid, Gid: st.Gid,
		Size: st.Size, Blocks: st.Blocks,
		Atime: time.Unix(st.Atim.Sec, st.Atim.Nsec),
		Mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Ctime: time.Unix(st.Ctim.Sec, st.Ctim.Nsec),
	}
}
