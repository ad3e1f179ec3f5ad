package fusefs

import (
	"errors"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
)

// Inode and namespace operations. Each maps one FUSE request to one engine
// call by inode number; the engine does the locking and the transaction.

// Lookup answers LOOKUP. A missing name is answered with node ID 0 and the
// negative timeout, so the kernel caches the miss.
func (fs *FS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	t := fs.start()
	defer fs.done(opLookup, t)
	if hook := fs.panicHook.Load(); hook != nil {
		(*hook)(name)
	}
	a, err := fs.eng.Lookup(ino(h.NodeId), name)
	if err != nil {
		if st := fs.toStatus("lookup", h.NodeId, err); st != fuse.ENOENT || fs.negTTL == (ttl{}) {
			return st
		}
		*out = fuse.EntryOut{}
		out.EntryValid, out.EntryValidNsec = fs.negTTL.sec, fs.negTTL.nsec
		return fuse.OK
	}
	fs.fillEntry(&a, out)
	return fuse.OK
}

// Forget is a no-op: the engine keeps an inode as long as it is linked or
// open, and nothing in sluice depends on the kernel's lookup counts.
func (fs *FS) Forget(nodeID, nlookup uint64) {}

// GetAttr answers GETATTR (stat and fstat).
func (fs *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := fs.start()
	defer fs.done(opGetattr, t)
	a, err := fs.eng.Getattr(ino(in.NodeId))
	if err != nil {
		return fs.toStatus("getattr", in.NodeId, err)
	}
	fs.fillAttrOut(&a, out)
	return fuse.OK
}

// SetAttr answers SETATTR: chmod, chown, utimes, truncate and ftruncate.
// With CAP_HANDLE_KILLPRIV_V2 the kernel asks (FATTR_KILL_SUIDGID) for
// set-user-ID and set-group-ID to be cleared when an unprivileged caller
// truncates or chowns a file.
func (fs *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := fs.start()
	defer fs.done(opSetattr, t)
	var sa sluice.SetAttr
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		m := in.Mode & 0o7777
		sa.Mode = &m
	}
	if v&fuse.FATTR_UID != 0 {
		u := in.Uid
		sa.Uid = &u
	}
	if v&fuse.FATTR_GID != 0 {
		g := in.Gid
		sa.Gid = &g
	}
	if v&fuse.FATTR_SIZE != 0 {
		s := int64(in.Size)
		if s < 0 {
			return fuse.Status(syscall.EFBIG)
		}
		sa.Size = &s
	}
	if v&fuse.FATTR_ATIME != 0 {
		if v&fuse.FATTR_ATIME_NOW != 0 {
			sa.AtimeNow = true
		} else {
			at := time.Unix(int64(in.Atime), int64(in.Atimensec))
			sa.Atime = &at
		}
	}
	if v&fuse.FATTR_MTIME != 0 {
		if v&fuse.FATTR_MTIME_NOW != 0 {
			sa.MtimeNow = true
		} else {
			mt := time.Unix(int64(in.Mtime), int64(in.Mtimensec))
			sa.Mtime = &mt
		}
	}
	if v&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_SIZE|fuse.FATTR_ATIME|fuse.FATTR_MTIME) == 0 {
		// Nothing to change: chown(f, -1, -1), which reaches the
		// kernel's setattr as ATTR_CTIME alone and arrives here with no
		// attribute bit (FATTR_CTIME only with the writeback cache). It
		// is still a chown: ctime, set-ID bits and capabilities, as on
		// XFS and ext4.
		sa.Chown = true
	}
	if v&fuse.FATTR_KILL_SUIDGID != 0 && sa.Mode == nil {
		if m, ok, err := fs.killSuidgid(ino(in.NodeId)); err != nil {
			return fs.toStatus("setattr", in.NodeId, err)
		} else if ok {
			sa.Mode = &m
		}
	}
	a, err := fs.eng.Setattr(ino(in.NodeId), sa)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) && fs.timesFlush(in) {
			// The file is gone: nothing can see the times any more.
			out.Attr = fuse.Attr{Ino: in.NodeId, Mode: syscall.S_IFREG}
			out.Mtime, out.Mtimensec = in.Mtime, in.Mtimensec
			out.Ctime, out.Ctimensec = in.Ctime, in.Ctimensec
			return fuse.OK
		}
		return fs.toStatus("setattr", in.NodeId, err)
	}
	fs.fillAttrOut(&a, out)
	return fuse.OK
}

// timesFlush reports whether a SETATTR is the kernel writing back the
// times the writeback cache keeps of a regular file (fuse_flush_times:
// FATTR_MTIME and FATTR_CTIME, with FATTR_FH), which it also does for an
// unlinked file the engine has freed (no handle open, the kernel's inode
// not yet evicted). An error there would be a writeback error, which the
// next syncfs(2) reports: XFS keeps such an inode until its last reference
// goes, and the times it takes are never seen. Only regular files carry
// FATTR_CTIME without FATTR_MODE, FATTR_UID or FATTR_GID (the kernel
// trusts its own ctime for them alone), so the S_IFREG of the reply is
// their type: a directory or symlink freed under a utimensat still gets
// ENOENT, not a reply whose type the kernel would find wrong.
func (fs *FS) timesFlush(in *fuse.SetAttrIn) bool {
	v, times := in.Valid, uint32(fuse.FATTR_MTIME|fuse.FATTR_CTIME)
	return fs.opts.WritebackCache && v&times == times && v&^(times|fuse.FATTR_FH) == 0
}

// killSuidgid returns the permission bits of regular file ino without
// set-user-ID and (with group execute) set-group-ID, and whether that
// changes anything (should_remove_suid).
func (fs *FS) killSuidgid(i sluice.Ino) (uint32, bool, error) {
	a, err := fs.eng.Getattr(i)
	if err != nil {
		return 0, false, err
	}
	if !a.IsRegular() {
		return 0, false, nil
	}
	m := a.Mode & 0o7777
	n := m &^ syscall.S_ISUID
	if m&syscall.S_IXGRP != 0 {
		n &^= syscall.S_ISGID
	}
	return n, n != m, nil
}

// Mknod answers MKNOD: regular files, FIFOs, sockets and device nodes.
func (fs *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	t := fs.start()
	defer fs.done(opMknod, t)
	own, _, err := fs.ownerFor(ino(in.NodeId), &in.Caller)
	if err != nil {
		return fs.toStatus("mknod", in.NodeId, err)
	}
	a, err := fs.eng.Mknod(ino(in.NodeId), name, in.Mode, in.Rdev, own)
	if err != nil {
		return fs.toStatus("mknod", in.NodeId, err)
	}
	fs.fillEntry(&a, out)
	return fuse.OK
}

// Mkdir answers MKDIR.
func (fs *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	t := fs.start()
	defer fs.done(opMkdir, t)
	own, sgid, err := fs.ownerFor(ino(in.NodeId), &in.Caller)
	if err != nil {
		return fs.toStatus("mkdir", in.NodeId, err)
	}
	a, err := fs.eng.MkdirIno(ino(in.NodeId), name, in.Mode&0o7777|sgid, own)
	if err != nil {
		return fs.toStatus("mkdir", in.NodeId, err)
	}
	fs.fillEntry(&a, out)
	return fuse.OK
}

// Unlink answers UNLINK. An open file lives on until its last release.
func (fs *FS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := fs.start()
	defer fs.done(opUnlink, t)
	return fs.toStatus("unlink", h.NodeId, fs.eng.UnlinkIno(ino(h.NodeId), name))
}

// Rmdir answers RMDIR.
func (fs *FS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	t := fs.start()
	defer fs.done(opRmdir, t)
	return fs.toStatus("rmdir", h.NodeId, fs.eng.RmdirIno(ino(h.NodeId), name))
}

// Rename answers RENAME and RENAME2 (renameat2 with RENAME_NOREPLACE,
// RENAME_EXCHANGE or RENAME_WHITEOUT: the kernel passes the flags through,
// having checked CAP_MKNOD for a whiteout). The whiteout is the caller's,
// as the kernel makes it on XFS.
func (fs *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	t := fs.start()
	defer fs.done(opRename, t)
	own := sluice.Owner{Uid: in.Caller.Uid, Gid: in.Caller.Gid}
	err := fs.eng.RenameInoAs(ino(in.NodeId), oldName, ino(in.Newdir), newName, in.Flags, own)
	return fs.toStatus("rename", in.NodeId, err)
}

// Link answers LINK.
func (fs *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	t := fs.start()
	defer fs.done(opLink, t)
	a, err := fs.eng.LinkIno(ino(in.Oldnodeid), ino(in.NodeId), name)
	if err != nil {
		return fs.toStatus("link", in.Oldnodeid, err)
	}
	fs.fillEntry(&a, out)
	return fuse.OK
}

// Symlink answers SYMLINK: linkName in the directory, pointing to pointedTo.
func (fs *FS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, pointedTo, linkName string, out *fuse.EntryOut) fuse.Status {
	t := fs.start()
	defer fs.done(opSymlink, t)
	own, _, err := fs.ownerFor(ino(h.NodeId), &h.Caller)
	if err != nil {
		return fs.toStatus("symlink", h.NodeId, err)
	}
	a, err := fs.eng.SymlinkIno(ino(h.NodeId), linkName, pointedTo, own)
	if err != nil {
		return fs.toStatus("symlink", h.NodeId, err)
	}
	fs.fillEntry(&a, out)
	return fuse.OK
}

// Readlink answers READLINK.
func (fs *FS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	t := fs.start()
	defer fs.done(opReadlink, t)
	s, err := fs.eng.ReadlinkIno(ino(h.NodeId))
	if err != nil {
		return nil, fs.toStatus("readlink", h.NodeId, err)
	}
	return []byte(s), fuse.OK
}

// Access answers ACCESS. The mount always has default_permissions, so the
// kernel checks permissions itself and does not normally ask.
func (fs *FS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	t := fs.start()
	defer fs.done(opAccess, t)
	_, err := fs.eng.Getattr(ino(in.NodeId))
	return fs.toStatus("access", in.NodeId, err)
}

// StatFs answers STATFS.
func (fs *FS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	t := fs.start()
	defer fs.done(opStatfs, t)
	st, err := fs.eng.Statfs()
	if err != nil {
		return fs.toStatus("statfs", h.NodeId, err)
	}
	*out = fuse.StatfsOut{
		Blocks:  st.Blocks,
		Bfree:   st.BlocksFree,
		Bavail:  st.BlocksAvail,
		Files:   st.Files,
		Ffree:   st.FilesFree,
		Bsize:   uint32(st.BlockSize),
		Frsize:  uint32(st.BlockSize),
		NameLen: uint32(st.NameLen),
	}
	return fuse.OK
}

// GetXAttr answers GETXATTR. With an empty dest the kernel asks for the
// size; a dest too small gets ERANGE.
func (fs *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	t := fs.start()
	defer fs.done(opGetxattr, t)
	v, err := fs.eng.GetxattrIno(ino(h.NodeId), attr)
	if err != nil {
		return 0, fs.toStatus("getxattr", h.NodeId, err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), fuse.ERANGE
	}
	return uint32(copy(dest, v)), fuse.OK
}

// ListXAttr answers LISTXATTR: the names, each followed by a NUL.
func (fs *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := fs.start()
	defer fs.done(opListxattr, t)
	names, err := fs.eng.ListxattrIno(ino(h.NodeId))
	if err != nil {
		return 0, fs.toStatus("listxattr", h.NodeId, err)
	}
	n := 0
	for _, s := range names {
		n += len(s) + 1
	}
	if len(dest) < n {
		return uint32(n), fuse.ERANGE
	}
	p := 0
	for _, s := range names {
		p += copy(dest[p:], s)
		dest[p] = 0
		p++
	}
	return uint32(n), fuse.OK
}

// SetXAttr answers SETXATTR (flags XATTR_CREATE and XATTR_REPLACE).
func (fs *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := fs.start()
	defer fs.done(opSetxattr, t)
	err := fs.eng.SetxattrIno(ino(in.NodeId), attr, data, int(in.Flags))
	return fs.toStatus("setxattr", in.NodeId, err)
}

// RemoveXAttr answers REMOVEXATTR.
func (fs *FS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	t := fs.start()
	defer fs.done(opRemovexattr, t)
	return fs.toStatus("removexattr", h.NodeId, fs.eng.RemovexattrIno(ino(h.NodeId), attr))
}
