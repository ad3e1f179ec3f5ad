package fusefs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// ioctls. The kernel forwards to the daemon, as FUSE_IOCTL, every ioctl
// of a file on the mount that do_vfs_ioctl (fs/ioctl.c) does not answer
// itself; sluice serves one, XFS_IOC_EXCHANGE_RANGE. The package doc says
// which ioctls stop in the kernel.

// xfsIocExchangeRange is XFS_IOC_EXCHANGE_RANGE (xfs_fs.h):
// _IOW('X', 129, struct xfs_exchange_range).
const xfsIocExchangeRange = 0x40285881

// xfsExchangeRangeSize is sizeof(struct xfs_exchange_range).
const xfsExchangeRangeSize = 40

// exchangeFlags are the XFS_EXCHANGE_RANGE_* flags
// (XFS_EXCHANGE_RANGE_ALL_FLAGS).
const exchangeFlags = sluice.ExchangeToEOF | sluice.ExchangeDsync | sluice.ExchangeDryRun | sluice.ExchangeFile1Written

// xfsExchangeRange is struct xfs_exchange_range, the ioctl's argument:
//
//	struct xfs_exchange_range {
//		__s32 file1_fd;
//		__u32 pad;          /* must be zeroes */
//		__u64 file1_offset; /* file1 offset, bytes */
//		__u64 file2_offset; /* file2 offset, bytes */
//		__u64 length;       /* bytes to exchange */
//		__u64 flags;        /* XFS_EXCHANGE_RANGE_* */
//	};
//
// Its layout is the same for 32-bit callers (no pointer or long; pad keeps
// the u64s aligned), so compat ioctls decode alike.
type xfsExchangeRange struct {
	file1Fd                   int32
	pad                       uint32
	file1Off, file2Off, count uint64
	flags                     uint64
}

// decode reads the struct from the ioctl's in-data (little-endian, the
// only byte order sluice runs on). It reports false for in-data shorter
// than the struct, which the kernel never sends for this command.
func (x *xfsExchangeRange) decode(b []byte) bool {
	if len(b) < xfsExchangeRangeSize {
		return false
	}
	le := binary.LittleEndian
	*x = xfsExchangeRange{
		file1Fd:  int32(le.Uint32(b[0:])),
		pad:      le.Uint32(b[4:]),
		file1Off: le.Uint64(b[8:]),
		file2Off: le.Uint64(b[16:]),
		count:    le.Uint64(b[24:]),
		flags:    le.Uint64(b[32:]),
	}
	return true
}

// Ioctl answers IOCTL: XFS_IOC_EXCHANGE_RANGE (see exchangeRange); every
// other command is ENOTTY, as on a file system that does not know it (the
// kernel would turn ENOSYS into ENOTTY too, fuse_send_ioctl). That
// includes FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IOC_FSGETXATTR and
// FS_IOC_FSSETXATTR, which the kernel sends on a private open of its own
// (fuse_priv_ioctl), so lsattr and chattr answer "Inappropriate ioctl for
// device".
func (fs *FS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	t := fs.start()
	defer fs.done(opIoctl, t)
	if in.Cmd == xfsIocExchangeRange {
		return fs.exchangeRange(in, inbuf)
	}
	return fuse.Status(syscall.ENOTTY)
}

// exchangeRange serves XFS_IOC_EXCHANGE_RANGE issued on the handle in.Fh
// (file2) with the struct in arg, as xfs_ioc_exchange_range does: EFAULT
// for a short struct, EINVAL for a pad that is not zero or an unknown flag
// (before the descriptor is looked at), EBADF for a file1_fd that is not
// an open file of the caller (O_PATH descriptors included), EXDEV for a
// file1 on another file system; then the engine's
// (*sluice.File).ExchangeRange applies xfs_exchange_range_checks and
// exchanges.
//
// file1_fd is a descriptor of the caller, which the request names only by
// its thread ID (fuse_in_header.pid); the daemon resolves it through
// /proc (resolveCallerFd). Both files are exchanged through engine files
// opened with the caller's access modes and O_APPEND: file1's as a new
// engine file, file2's as the handle's own unless it was opened O_APPEND,
// so that the engine refuses what XFS refuses (EBADF: not O_RDWR, or
// O_APPEND), in XFS's order.
//
// The kernel's page cache and attributes of both inodes are stale after
// an exchange: XFS flushes and drops both ranges' pages under its locks
// (xfs_exchange_range_prep), but FUSE takes no lock for an ioctl and knows
// nothing of what this one does. So before the exchange the daemon asks
// the kernel to drop both inodes' pages (InvalidateInode), which writes
// dirty ones (shared mappings, the writeback cache) back first, and after
// it drops them again with the attributes, before the reply: a read after
// the ioctl returns reads the exchanged data, a stat the new sizes and
// times. Neither for DRY_RUN. A write that races with the exchange through
// the kernel's cache may still land on either side of it, where on XFS it
// waits.
//
// With Options.WritebackCache the kernel owns the sizes (and times) of
// regular files: fuse_change_attributes_i keeps its own i_size over the
// daemon's, even after an invalidation, for as long as it holds the inode.
// An exchange with TO_EOF, which changes the sizes, would leave the kernel
// reading and appending at the old ones, so it is refused with EOPNOTSUPP
// (after the descriptor checks, before the engine's); exchanges of ranges
// within EOF work, their dirty pages written back first as above.
func (fs *FS) exchangeRange(in *fuse.IoctlIn, arg []byte) fuse.Status {
	const op = "exchange range"
	var x xfsExchangeRange
	if !x.decode(arg) {
		return fuse.Status(syscall.EFAULT)
	}
	if x.pad != 0 || x.flags&^exchangeFlags != 0 {
		return fuse.EINVAL
	}
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	c, err := fs.resolveCallerFd(in.Caller.Pid, x.file1Fd)
	if err != nil {
		return fs.toStatus(op, in.NodeId, err)
	}
	if fs.opts.WritebackCache && x.flags&(sluice.ExchangeToEOF|sluice.ExchangeDryRun) == sluice.ExchangeToEOF {
		return fuse.Status(syscall.EOPNOTSUPP)
	}
	f1, err := fs.eng.OpenIno(c.ino, c.flags)
	if err != nil {
		return fs.toStatus(op, uint64(c.ino), err)
	}
	defer f1.Close()
	f2 := h.f
	if h.append || h.f.Flags()&syscall.O_ACCMODE != h.accMode {
		// The engine checks file2's mode as the application opened it:
		// O_APPEND (which the engine file lacks) and the access mode
		// (which planOpen widens for the writeback cache).
		if f2, err = fs.eng.OpenIno(h.ino, h.accMode|sluice.O_APPEND); err != nil {
			return fs.toStatus(op, in.NodeId, err)
		}
		defer f2.Close()
	}
	dry := x.flags&sluice.ExchangeDryRun != 0
	if !dry {
		fs.invalidate(c.ino, h.ino)
	}
	err = f2.ExchangeRange(f1, int64(x.file1Off), int64(x.file2Off), int64(x.count), x.flags)
	if err != nil {
		return fs.toStatus(op, in.NodeId, err)
	}
	if !dry {
		fs.invalidate(c.ino, h.ino)
	}
	return fuse.OK
}

// invalidate drops the kernel's cached pages and attributes of the inodes
// (one notification each, a and b may be equal). A failure is logged: the
// kernel may then serve stale pages until they are evicted.
func (fs *FS) invalidate(a, b sluice.Ino) {
	if fs.srv == nil {
		return
	}
	for _, i := range []sluice.Ino{a, b} {
		if err := fs.srv.InvalidateInode(uint64(i), 0, -1); err != nil {
			fs.opts.Logger.Printf("sluice: %v (the kernel may serve stale pages of inode %d)", err, i)
		}
		if a == b {
			break
		}
	}
}

// callerFile is an open file description of a request's caller, as /proc
// shows it.
type callerFile struct {
	ino sluice.Ino
	// flags are its access mode and O_APPEND (fdinfo's flags:).
	flags int
}

// resolveCallerFd finds what descriptor fd of thread tid (a request's
// caller, fuse_in_header.pid) refers to, as fdget does for XFS, and
// returns it if it is a file on this mount:
//
//   - statx(2) of /proc/TID/fd/FD, which follows the magic link to the
//     open file itself, gives st_dev and st_ino. It is made with
//     AT_STATX_DONT_SYNC: for a file on this mount the kernel answers from
//     the inode it holds (fuse_update_get_attr does not sync) instead of
//     sending a GETATTR to this daemon, so serving the ioctl never waits
//     for another request. st_dev must be the mount's (EXDEV otherwise:
//     XFS compares the vfsmount, this compares the superblock, so a bind
//     mount of the mount counts as the mount); st_ino is the engine's
//     inode number, as every node ID is (see ino).
//   - /proc/TID/fdinfo/FD gives the open file description's flags, in
//     octal: the access mode and O_APPEND as they are now, fcntl(F_SETFL)
//     included; O_PATH descriptors are EBADF, as fdget ignores them. Its
//     ino: line must name the same inode, or the descriptor was replaced
//     between the two looks (EBADF).
//
// Anything that cannot be resolved is EBADF: a thread ID of 0 (a caller in
// a PID namespace the mount's cannot see), a closed descriptor, and a
// caller the daemon may not inspect (/proc/TID/fd needs ptrace read
// access: a daemon not run by root resolves only its own user's
// processes, and only those that are dumpable). The daemon's /proc must
// show the PID namespace the mount was made in.
func (fs *FS) resolveCallerFd(tid uint32, fd int32) (callerFile, error) {
	const op = "exchange range: file1"
	if tid == 0 || fd < 0 {
		return callerFile{}, &os.PathError{Op: op, Path: fmt.Sprintf("descriptor %d of thread %d", fd, tid), Err: syscall.EBADF}
	}
	link := fmt.Sprintf("/proc/%d/fd/%d", tid, fd)
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, link, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO, &stx); err != nil {
		return callerFile{}, &os.PathError{Op: op, Path: link, Err: syscall.EBADF}
	}
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", tid, fd))
	if err != nil {
		return callerFile{}, &os.PathError{Op: op, Path: link, Err: syscall.EBADF}
	}
	flags, ino, ok := parseFdinfo(info)
	if !ok || flags&unix.O_PATH != 0 || (ino != 0 && ino != stx.Ino) {
		return callerFile{}, &os.PathError{Op: op, Path: link, Err: syscall.EBADF}
	}
	if fs.srv == nil || unix.Mkdev(stx.Dev_major, stx.Dev_minor) != fs.srv.Dev() {
		return callerFile{}, &os.PathError{Op: op, Path: link, Err: syscall.EXDEV}
	}
	return callerFile{ino: sluice.Ino(stx.Ino), flags: flags & (syscall.O_ACCMODE | sluice.O_APPEND)}, nil
}

// parseFdinfo returns the flags (octal) and the inode number (0 when the
// kernel does not list it; 5.14 and later do) of a /proc/PID/fdinfo/FD
// file. It reports false if there are no flags.
func parseFdinfo(b []byte) (flags int, ino uint64, ok bool) {
	for line := range bytes.Lines(b) {
		k, v, found := bytes.Cut(line, []byte(":"))
		if !found {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "flags":
			n, err := strconv.ParseUint(string(v), 8, 32)
			if err != nil {
				return 0, 0, false
			}
			flags, ok = int(n), true
		case "ino":
			ino, _ = strconv.ParseUint(string(v), 10, 64)
		}
	}
	return flags, ino, ok
}
