package sluice

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// Namespace operations by inode number: what the FUSE adapter calls. Each
// takes fs.ns (shared to look up, exclusive to change), then the mu of the
// inodes it changes in inode-number order, then commits one transaction.

// checkName validates one directory-entry name.
func checkName(name string) error {
	switch {
	case name == "":
		return syscall.ENOENT
	case len(name) > maxNameLen:
		return syscall.ENAMETOOLONG
	case name == "." || name == "..":
		return syscall.EINVAL
	case bytes.IndexByte([]byte(name), '/') >= 0 || bytes.IndexByte([]byte(name), 0) >= 0:
		return syscall.EINVAL
	}
	return nil
}

// lookupEntry returns the entry name of directory dir.
//
// Preconditions: fs.ns is held (either mode).
func (fs *FS) lookupEntry(dir Ino, name string) (meta.Dirent, error) {
	v, err := fs.kv.Get(meta.DirentKey(dir, name))
	if errors.Is(err, meta.ErrNotFound) {
		return meta.Dirent{}, syscall.ENOENT
	}
	if err != nil {
		return meta.Dirent{}, eio(err)
	}
	d, err := meta.DecodeDirent(v)
	if err != nil {
		return meta.Dirent{}, eio(err)
	}
	return d, nil
}

// dirInode returns directory ino, referenced, or ENOTDIR.
func (fs *FS) dirInode(ino Ino) (*inode, error) {
	in, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	mode, nlink := in.attr.Mode, in.attr.Nlink
	in.mu.Unlock()
	if !isDir(mode) {
		fs.putInode(in)
		return nil, syscall.ENOTDIR
	}
	if nlink == 0 { // removed directory
		fs.putInode(in)
		return nil, syscall.ENOENT
	}
	return in, nil
}

// Lookup returns the attributes of entry name in directory parent.
func (fs *FS) Lookup(parent Ino, name string) (Attr, error) {
	if len(name) > maxNameLen {
		return Attr{}, syscall.ENAMETOOLONG
	}
	fs.ns.RLock()
	defer fs.ns.RUnlock()
	dir, err := fs.dirInode(parent)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(dir)
	switch name {
	case ".":
		return dir.getattr()
	case "..":
		p := RootIno
		if parent != RootIno {
			if p, err = fs.parentOf(parent); err != nil {
				return Attr{}, err
			}
		}
		return fs.Getattr(p)
	}
	d, err := fs.lookupEntry(parent, name)
	if err != nil {
		return Attr{}, err
	}
	return fs.Getattr(d.Ino)
}

// Getattr returns the attributes of inode ino.
func (fs *FS) Getattr(ino Ino) (Attr, error) {
	in, err := fs.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	return in.getattr()
}

// newInode returns the record of a new inode of the given mode.
func newInodeRecord(mode, uid, gid, rdev uint32) meta.Inode {
	t := now()
	nlink := uint32(1)
	if isDir(mode) {
		nlink = 2
	}
	return meta.Inode{Mode: mode, Uid: uid, Gid: gid, Rdev: rdev, Nlink: nlink, Atime: t, Mtime: t, Ctime: t, Gen: uint64(t)}
}

// Owner says who creates an inode.
type Owner struct{ Uid, Gid uint32 }

// create adds a new inode of the given mode as entry name of parent and
// returns it referenced. With excl false, an existing regular file is
// returned instead (O_CREAT without O_EXCL); created reports which.
func (fs *FS) create(parent Ino, name string, mode uint32, owner Owner, rdev uint32, target []byte, excl bool) (in *inode, created bool, err error) {
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	if err := fs.writable(); err != nil {
		return nil, false, err
	}
	fs.ns.Lock()
	defer fs.ns.Unlock()
	dir, err := fs.dirInode(parent)
	if err != nil {
		return nil, false, err
	}
	defer fs.putInode(dir)
	if d, err := fs.lookupEntry(parent, name); err == nil {
		if excl {
			return nil, false, syscall.EEXIST
		}
		in, err := fs.getInode(d.Ino)
		return in, false, err
	} else if err != syscall.ENOENT {
		return nil, false, err
	}
	dir.mu.Lock()
	dirMode, dirGid := dir.attr.Mode, dir.attr.Gid
	dir.mu.Unlock()
	if dirMode&syscall.S_ISGID != 0 {
		// BSD group semantics (inode_init_owner): a set-group-ID directory
		// gives its group to what is created in it, and its bit to
		// subdirectories.
		owner.Gid = dirGid
		if isDir(mode) {
			mode |= syscall.S_ISGID
		}
	}
	rec := newInodeRecord(mode, owner.Uid, owner.Gid, rdev)
	rec.Size = uint64(len(target))
	if isDir(mode) {
		rec.Parent = parent
	}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	err = fs.transact(func(t *txn) error {
		rec.Ino = t.allocIno()
		t.putInode(&rec)
		t.kv.Set(meta.DirentKey(parent, name), meta.EncodeDirent(meta.Dirent{Ino: rec.Ino, Type: fileTypeOf(mode)}))
		if target != nil {
			t.kv.Set(meta.SymlinkKey(rec.Ino), meta.EncodeBytes(target))
		}
		dir.attr.Mtime, dir.attr.Ctime = rec.Ctime, rec.Ctime
		if isDir(mode) {
			dir.attr.Nlink++
		}
		t.putAttr(dir)
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if h, ok := fs.kv.(meta.EmptyHinter); ok && isDir(mode) {
		// A new directory has no entries, and none can be made in it
		// before fs.ns is released: lookups of names not yet created in
		// it need not ask the store.
		h.KnownEmpty(meta.DirentPrefix(rec.Ino))
	}
	// The record just committed is the inode: no need to read it back.
	var ext *extmap.Map
	if isReg(mode) {
		ext = extmap.New()
	}
	return fs.addInode(&rec, ext), true, nil
}

// Mknod creates a regular file (or FIFO, socket, device node) named name in
// parent.
func (fs *FS) Mknod(parent Ino, name string, mode uint32, rdev uint32, owner Owner) (Attr, error) {
	if fileTypeOf(mode) == 0 {
		mode |= syscall.S_IFREG
	}
	if isDir(mode) || isSymlink(mode) {
		return Attr{}, syscall.EINVAL
	}
	in, _, err := fs.create(parent, name, mode, owner, rdev, nil, true)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	return in.getattr()
}

// MkdirIno creates directory name in parent.
func (fs *FS) MkdirIno(parent Ino, name string, perm uint32, owner Owner) (Attr, error) {
	in, _, err := fs.create(parent, name, syscall.S_IFDIR|perm&0o7777, owner, 0, nil, true)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	return in.getattr()
}

// SymlinkIno creates symlink name in parent pointing at target.
func (fs *FS) SymlinkIno(parent Ino, name, target string, owner Owner) (Attr, error) {
	if target == "" {
		return Attr{}, syscall.ENOENT
	}
	if len(target) >= maxPathLen {
		return Attr{}, syscall.ENAMETOOLONG
	}
	if strings.IndexByte(target, 0) >= 0 {
		return Attr{}, syscall.EINVAL
	}
	in, _, err := fs.create(parent, name, syscall.S_IFLNK|0o777, owner, 0, []byte(target), true)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	return in.getattr()
}

// ReadlinkIno returns the target of symlink ino.
func (fs *FS) ReadlinkIno(ino Ino) (string, error) {
	in, err := fs.getInode(ino)
	if err != nil {
		return "", err
	}
	defer fs.putInode(in)
	in.mu.Lock()
	mode := in.attr.Mode
	in.mu.Unlock()
	if !isSymlink(mode) {
		return "", syscall.EINVAL
	}
	v, err := fs.kv.Get(meta.SymlinkKey(ino))
	if err != nil {
		return "", eio(err)
	}
	b, err := meta.DecodeBytes("symlink", v)
	if err != nil {
		return "", eio(err)
	}
	return string(b), nil
}

// LinkIno adds entry newName in newParent for inode ino.
func (fs *FS) LinkIno(ino, newParent Ino, newName string) (Attr, error) {
	if err := checkName(newName); err != nil {
		return Attr{}, err
	}
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	fs.ns.Lock()
	defer fs.ns.Unlock()
	dir, err := fs.dirInode(newParent)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(dir)
	in, err := fs.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	in.mu.Lock()
	mode, nlink := in.attr.Mode, in.attr.Nlink
	in.mu.Unlock()
	if _, err := fs.lookupEntry(newParent, newName); err == nil {
		return Attr{}, syscall.EEXIST
	} else if err != syscall.ENOENT {
		return Attr{}, err
	}
	if isDir(mode) {
		return Attr{}, syscall.EPERM
	}
	if nlink == 0 {
		return Attr{}, syscall.ENOENT
	}
	if nlink >= 65000 {
		return Attr{}, syscall.EMLINK
	}
	unlock := lockInodes(dir, in)
	defer unlock()
	t0 := now()
	err = fs.transact(func(t *txn) error {
		t.kv.Set(meta.DirentKey(newParent, newName), meta.EncodeDirent(meta.Dirent{Ino: ino, Type: fileTypeOf(mode)}))
		in.attr.Nlink++
		in.attr.Ctime = t0
		t.putAttr(in)
		dir.attr.Mtime, dir.attr.Ctime = t0, t0
		t.putAttr(dir)
		return nil
	})
	if err != nil {
		return Attr{}, err
	}
	return in.attrLocked()
}

// lockInodes locks the mu of distinct inodes in inode-number order (the
// rule for taking several) and returns the unlock function.
func lockInodes(ins ...*inode) func() {
	uniq := make([]*inode, 0, len(ins))
	for _, in := range ins {
		dup := false
		for _, u := range uniq {
			dup = dup || u == in
		}
		if in != nil && !dup {
			uniq = append(uniq, in)
		}
	}
	for i := 1; i < len(uniq); i++ {
		for j := i; j > 0 && uniq[j].ino < uniq[j-1].ino; j-- {
			uniq[j], uniq[j-1] = uniq[j-1], uniq[j]
		}
	}
	for _, in := range uniq {
		in.mu.LockOrdered(uint64(in.ino))
	}
	return func() {
		for i := len(uniq) - 1; i >= 0; i-- {
			uniq[i].mu.Unlock()
		}
	}
}

// dirEmpty reports whether directory ino has no entries.
//
// Preconditions: fs.ns is held.
func (fs *FS) dirEmpty(ino Ino) (bool, error) {
	start, end := meta.DirentPrefix(ino)
	empty := true
	errStop := errors.New("stop")
	err := fs.kv.Scan(start, end, func([]byte, []byte) error { empty = false; return errStop })
	if err != nil && err != errStop {
		return false, eio(err)
	}
	return empty, nil
}

// removeEntry implements Unlink (dir false) and Rmdir (dir true).
func (fs *FS) removeEntry(parent Ino, name string, rmdir bool) error {
	if name == "." {
		return syscall.EINVAL
	}
	if name == ".." {
		return syscall.ENOTEMPTY
	}
	if err := checkName(name); err != nil {
		return err
	}
	if err := fs.writable(); err != nil {
		return err
	}
	fs.ns.Lock()
	defer fs.ns.Unlock()
	dir, err := fs.dirInode(parent)
	if err != nil {
		return err
	}
	defer fs.putInode(dir)
	d, err := fs.lookupEntry(parent, name)
	if err != nil {
		return err
	}
	in, err := fs.getInode(d.Ino)
	if err != nil {
		return err
	}
	defer fs.putInode(in)
	in.mu.Lock()
	mode := in.attr.Mode
	in.mu.Unlock()
	switch {
	case rmdir && !isDir(mode):
		return syscall.ENOTDIR
	case !rmdir && isDir(mode):
		return syscall.EISDIR
	case rmdir:
		empty, err := fs.dirEmpty(d.Ino)
		if err != nil {
			return err
		}
		if !empty {
			return syscall.ENOTEMPTY
		}
	}
	unlock := lockInodes(dir, in)
	defer unlock()
	return fs.transact(func(t *txn) error {
		t0 := now()
		t.kv.Delete(meta.DirentKey(parent, name))
		dir.attr.Mtime, dir.attr.Ctime = t0, t0
		if rmdir {
			dir.attr.Nlink--
			in.attr.Nlink = 0
		} else {
			in.attr.Nlink--
		}
		in.attr.Ctime = t0
		t.putAttr(dir)
		t.putAttr(in)
		if in.attr.Nlink == 0 {
			// Freed when the last reference goes (maybe at once, in
			// putInode); an orphan record covers a crash in between.
			t.kv.Set(meta.OrphanKey(in.ino), meta.EncodeBytes(nil))
		}
		return nil
	})
}

// UnlinkIno removes entry name (not a directory) from parent.
func (fs *FS) UnlinkIno(parent Ino, name string) error { return fs.removeEntry(parent, name, false) }

// RmdirIno removes the empty directory name from parent.
func (fs *FS) RmdirIno(parent Ino, name string) error { return fs.removeEntry(parent, name, true) }

// Rename flags, as renameat2(2).
const (
	RenameNoReplace = 1 << 0 // RENAME_NOREPLACE
	RenameExchange  = 1 << 1 // RENAME_EXCHANGE
	// RenameWhiteout leaves a whiteout (a character device 0:0 with mode
	// 0, what overlayfs reads as "deleted in this layer") at the source
	// name, in the same transaction as the rename (RENAME_WHITEOUT, as
	// xfs_rename). Not with RenameExchange. The caller's CAP_MKNOD is the
	// caller's business (the VFS checks it before a FUSE server sees the
	// call).
	RenameWhiteout = 1 << 2
)

// isAncestor reports whether directory a is d or an ancestor of d, by
// walking the parent links up from d.
//
// Preconditions: fs.ns is held exclusive.
func (fs *FS) isAncestor(a, d Ino) (bool, error) {
	for d != RootIno {
		if d == a {
			return true, nil
		}
		p, err := fs.parentOf(d)
		if err != nil {
			return false, err
		}
		d = p
	}
	return a == RootIno, nil
}

// RenameIno renames oldParent/oldName to newParent/newName with Linux's
// rename(2) and renameat2(2) semantics. The whiteout RenameWhiteout
// leaves is owned by the process; RenameInoAs says by whom.
func (fs *FS) RenameIno(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) error {
	return fs.RenameInoAs(oldParent, oldName, newParent, newName, flags, fs.defaultOwner())
}

// RenameInoAs is RenameIno for a caller: with RenameWhiteout, the whiteout
// is owned by owner (with the group of oldParent if that directory is
// set-group-ID, inode_init_owner), as the kernel makes it for the caller
// of renameat2.
func (fs *FS) RenameInoAs(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32, owner Owner) error {
	if flags&^(RenameNoReplace|RenameExchange|RenameWhiteout) != 0 ||
		flags&RenameExchange != 0 && flags&(RenameNoReplace|RenameWhiteout) != 0 {
		return syscall.EINVAL // do_renameat2's checks
	}
	for _, n := range []string{oldName, newName} {
		if n == "." || n == ".." {
			return syscall.EBUSY
		}
		if err := checkName(n); err != nil {
			return err
		}
	}
	if err := fs.writable(); err != nil {
		return err
	}
	fs.ns.Lock()
	defer fs.ns.Unlock()
	odir, err := fs.dirInode(oldParent)
	if err != nil {
		return err
	}
	defer fs.putInode(odir)
	ndir, err := fs.dirInode(newParent)
	if err != nil {
		return err
	}
	defer fs.putInode(ndir)
	src, err := fs.lookupEntry(oldParent, oldName)
	if err != nil {
		return err
	}
	dst, dstErr := fs.lookupEntry(newParent, newName)
	if dstErr != nil && dstErr != syscall.ENOENT {
		return dstErr
	}
	dstExists := dstErr == nil
	switch {
	case flags&RenameNoReplace != 0 && dstExists:
		return syscall.EEXIST
	case flags&RenameExchange != 0 && !dstExists:
		return syscall.ENOENT
	}
	if dstExists && dst.Ino == src.Ino { // same inode: nothing to do
		return nil
	}
	srcIn, err := fs.getInode(src.Ino)
	if err != nil {
		return err
	}
	defer fs.putInode(srcIn)
	srcIsDir := isDir(src.Type)
	// A directory may not move below itself.
	if srcIsDir && oldParent != newParent {
		if below, err := fs.isAncestor(src.Ino, newParent); err != nil {
			return err
		} else if below {
			return syscall.EINVAL
		}
	}
	if dstExists && isDir(dst.Type) && flags&RenameExchange == 0 {
		// The target is the source's directory or an ancestor of it:
		// never empty (lock_rename's trap).
		if above, err := fs.isAncestor(dst.Ino, oldParent); err != nil {
			return err
		} else if above {
			return syscall.ENOTEMPTY
		}
	}
	var dstIn *inode
	if dstExists {
		dstIn, err = fs.getInode(dst.Ino)
		if err != nil {
			return err
		}
		defer fs.putInode(dstIn)
		dstIsDir := isDir(dst.Type)
		if flags&RenameExchange != 0 {
			if dstIsDir && oldParent != newParent {
				if below, err := fs.isAncestor(dst.Ino, oldParent); err != nil {
					return err
				} else if below {
					return syscall.EINVAL
				}
			}
		} else {
			switch {
			case srcIsDir && !dstIsDir:
				return syscall.ENOTDIR
			case !srcIsDir && dstIsDir:
				return syscall.EISDIR
			case dstIsDir:
				empty, err := fs.dirEmpty(dst.Ino)
				if err != nil {
					return err
				}
				if !empty {
					return syscall.ENOTEMPTY
				}
			}
		}
	}
	unlock := lockInodes(odir, ndir, srcIn, dstIn)
	defer unlock()
	if flags&RenameWhiteout != 0 && odir.attr.Mode&syscall.S_ISGID != 0 {
		owner.Gid = odir.attr.Gid
	}
	return fs.transact(func(t *txn) error {
		t0 := now()
		if flags&RenameExchange != 0 {
			t.kv.Set(meta.DirentKey(oldParent, oldName), meta.EncodeDirent(dst))
			t.kv.Set(meta.DirentKey(newParent, newName), meta.EncodeDirent(src))
			if isDir(src.Type) {
				srcIn.attr.Parent = newParent
			}
			if isDir(dst.Type) {
				dstIn.attr.Parent = oldParent
			}
			if oldParent != newParent && isDir(src.Type) != isDir(dst.Type) {
				if isDir(src.Type) {
					odir.attr.Nlink--
					ndir.attr.Nlink++
				} else {
					odir.attr.Nlink++
					ndir.attr.Nlink--
				}
			}
			dstIn.attr.Ctime = t0
			t.putAttr(dstIn)
		} else {
			if flags&RenameWhiteout != 0 {
				// The whiteout replaces the source entry in the same
				// batch (xfs_rename allocates it in the rename's
				// transaction): a crash shows the rename whole or not.
				wo := newInodeRecord(syscall.S_IFCHR, owner.Uid, owner.Gid, 0)
				wo.Atime, wo.Mtime, wo.Ctime = t0, t0, t0
				wo.Ino = t.allocIno()
				t.putInode(&wo)
				t.kv.Set(meta.DirentKey(oldParent, oldName), meta.EncodeDirent(meta.Dirent{Ino: wo.Ino, Type: syscall.S_IFCHR}))
				fs.counters.RenameWhiteouts.Add(1)
			} else {
				t.kv.Delete(meta.DirentKey(oldParent, oldName))
			}
			t.kv.Set(meta.DirentKey(newParent, newName), meta.EncodeDirent(src))
			if srcIsDir {
				odir.attr.Nlink--
				ndir.attr.Nlink++
				srcIn.attr.Parent = newParent
			}
			if dstIn != nil {
				if isDir(dst.Type) {
					ndir.attr.Nlink--
					dstIn.attr.Nlink = 0
				} else {
					dstIn.attr.Nlink--
				}
				dstIn.attr.Ctime = t0
				t.putAttr(dstIn)
				if dstIn.attr.Nlink == 0 {
					t.kv.Set(meta.OrphanKey(dstIn.ino), meta.EncodeBytes(nil))
				}
			}
		}
		srcIn.attr.Ctime = t0
		t.putAttr(srcIn)
		odir.attr.Mtime, odir.attr.Ctime = t0, t0
		ndir.attr.Mtime, ndir.attr.Ctime = t0, t0
		t.putAttr(odir)
		if ndir != odir {
			t.putAttr(ndir)
		}
		return nil
	})
}

// parentOf returns the directory that holds directory d.
//
// Preconditions: fs.ns is held.
func (fs *FS) parentOf(d Ino) (Ino, error) {
	in, err := fs.getInode(d)
	if err != nil {
		return 0, err
	}
	defer fs.putInode(in)
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.attr.Parent == 0 {
		return 0, eio(fmt.Errorf("directory %d has no parent: %w", d, meta.ErrCorrupt))
	}
	return in.attr.Parent, nil
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  Ino
	// Type is the S_IFMT bits of the entry's mode.
	Type uint32
}

// ReadDirIno lists directory ino in name order, without "." and "..".
func (fs *FS) ReadDirIno(ino Ino) ([]DirEntry, error) {
	fs.ns.RLock()
	defer fs.ns.RUnlock()
	dir, err := fs.dirInode(ino)
	if err != nil {
		return nil, err
	}
	defer fs.putInode(dir)
	var out []DirEntry
	start, end := meta.DirentPrefix(ino)
	err = fs.kv.Scan(start, end, func(k, v []byte) error {
		_, name, err := meta.DirentName(k)
		if err != nil {
			return err
		}
		d, err := meta.DecodeDirent(v)
		if err != nil {
			return err
		}
		out = append(out, DirEntry{Name: name, Ino: d.Ino, Type: d.Type})
		return nil
	})
	if err != nil {
		return nil, eio(err)
	}
	dir.mu.Lock()
	dir.attr.Atime = now()
	dir.mu.Unlock()
	return out, nil
}

// Setattr changes attributes of inode ino (chmod, chown, utimes,
// truncate) and returns the new attributes.
func (fs *FS) Setattr(ino Ino, sa SetAttr) (Attr, error) {
	if err := fs.writable(); err != nil {
		return Attr{}, err
	}
	in, err := fs.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	defer fs.putInode(in)
	if sa.Size != nil {
		in.mu.Lock()
		mode := in.attr.Mode
		in.mu.Unlock()
		if isDir(mode) {
			return Attr{}, syscall.EISDIR
		}
		if !isReg(mode) {
			return Attr{}, syscall.EINVAL
		}
		if err := in.truncate(*sa.Size); err != nil {
			return Attr{}, err
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	chown := sa.Chown || sa.Uid != nil || sa.Gid != nil
	if sa.Mode == nil && !chown && sa.Atime == nil && sa.Mtime == nil && !sa.AtimeNow && !sa.MtimeNow {
		return in.attrLocked()
	}
	if chown && !isDir(in.attr.Mode) && in.needsPrivStripLocked() {
		// The chown clears set-user-ID, set-group-ID or capabilities:
		// the capability's xattr goes with the attributes, in one
		// transaction.
		err = fs.transact(func(t *txn) error {
			in.setAttrLocked(sa, now())
			t.kv.Delete(meta.XattrKey(in.ino, "security.capability"))
			t.putAttr(in)
			in.attrDirty = false
			return nil
		})
		if err != nil {
			return Attr{}, err
		}
		return in.attrLocked()
	}
	// Delayed logging: the change is in-core, persisted with the inode's
	// next transaction or at the next sync point (fsync, syncfs, the
	// background interval), as a write's mtime is; no transaction here.
	in.setAttrLocked(sa, now())
	if !in.attrDirty {
		in.attrDirty = true
		fs.markDirty(in)
	}
	fs.counters.AttrsDeferred.Add(1)
	return in.attrLocked()
}

// setAttrLocked applies sa's mode, owner and times to in.attr, with ctime
// t0 (chown's side effects on the mode included; the capability xattr is
// the caller's).
//
// Preconditions: in.mu is held.
func (in *inode) setAttrLocked(sa SetAttr, t0 int64) {
	a := &in.attr
	if sa.Mode != nil {
		a.Mode = a.Mode&syscall.S_IFMT | *sa.Mode&0o7777
		in.privChecked = false
	}
	if sa.Chown || sa.Uid != nil || sa.Gid != nil {
		if sa.Uid != nil {
			a.Uid = *sa.Uid
		}
		if sa.Gid != nil {
			a.Gid = *sa.Gid
		}
		// Every chown, even to the same owner or chown(f, -1, -1),
		// clears set-user-ID, set-group-ID (the group-exec-less sgid
		// marks mandatory locking) and capabilities on non-directories
		// (ATTR_KILL_SUID, ATTR_KILL_SGID, ATTR_KILL_PRIV in
		// chown_common).
		if !isDir(a.Mode) {
			a.Mode &^= syscall.S_ISUID
			if a.Mode&0o010 != 0 {
				a.Mode &^= syscall.S_ISGID
			}
			in.privChecked = false
		}
	}
	switch {
	case sa.AtimeNow:
		a.Atime = t0
	case sa.Atime != nil:
		a.Atime = sa.Atime.UnixNano()
	}
	switch {
	case sa.MtimeNow:
		a.Mtime = t0
	case sa.Mtime != nil:
		a.Mtime = sa.Mtime.UnixNano()
	}
	a.Ctime = t0
}

// Utimes sets the access and modification times of inode ino.
func (fs *FS) utimesIno(ino Ino, atime, mtime time.Time) error {
	_, err := fs.Setattr(ino, SetAttr{Atime: &atime, Mtime: &mtime})
	return err
}
