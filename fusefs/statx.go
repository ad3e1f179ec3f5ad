package fusefs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// statxMask is what Statx fills: the basic stats. sluice keeps no birth
// time (sluice.Attr has none), so STATX_BTIME is never set and Btime
// stays zero.
const statxMask = unix.STATX_BASIC_STATS

// Statx answers STATX, which the kernel sends when statx(2) asks for more
// than the basic stats (STATX_BTIME) and refreshes its attributes; it then
// falls back to GETATTR for good if the answer is ENOSYS. The attributes
// are GetAttr's, in statx form, with the same validity timeout. With
// FUSE_GETATTR_FH (an fstat-like call) they are read through the handle,
// which must exist (EBADF otherwise); GetAttr reads by node ID, which is
// the same inode: node IDs are inode numbers. in.SxFlags (AT_STATX_*
// sync flags) need nothing: the engine's attributes are always current.
// Dev is left zero: the kernel reports its own device number for the mount
// (fuse_fillattr).
func (fs *FS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	t := fs.start()
	defer fs.done(opStatx, t)
	var a sluice.Attr
	var err error
	if in.GetattrFlags&fuse.FUSE_GETATTR_FH != 0 {
		h, st := fs.getHandle(in.Fh)
		if !st.Ok() {
			return st
		}
		a, err = h.f.Stat()
	} else {
		a, err = fs.eng.Getattr(ino(in.NodeId))
	}
	if err != nil {
		return fs.toStatus("statx", in.NodeId, err)
	}
	*out = fuse.StatxOut{}
	out.AttrValid, out.AttrValidNsec = fs.attrTTL.sec, fs.attrTTL.nsec
	fillStatx(&a, &out.Statx)
	return fuse.OK
}

// fillStatx converts engine attributes to statx form, as fillAttr does to
// stat form. The engine's Rdev is the kernel's 32-bit encoding (FUSE's
// MKNOD carries it so), which unix.Major and unix.Minor decode.
func fillStatx(a *sluice.Attr, out *fuse.Statx) {
	sx := func(tm time.Time) fuse.SxTime {
		return fuse.SxTime{Sec: uint64(tm.Unix()), Nsec: uint32(tm.Nanosecond())}
	}
	out.Mask = statxMask
	out.Blksize = uint32(a.Blksize)
	out.Attributes = 0 // no STATX_ATTR_* applies (no immutable, append-only, ... flags)
	out.AttributesMask = 0
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.Uid, a.Gid
	out.Mode = uint16(a.Mode)
	out.Ino = uint64(a.Ino)
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.Atime, out.Mtime, out.Ctime = sx(a.Atime), sx(a.Mtime), sx(a.Ctime)
	out.RdevMajor, out.RdevMinor = unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev))
}
