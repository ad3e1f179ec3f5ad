package sluice

import (
	"strings"
	"syscall"
	"time"
)

// The path-based API: what a Go program embedding sluice calls. Paths are
// slash-separated and resolved from the root of the file system (a leading
// "/" is optional). Symlinks in intermediate components are always
// followed; the last component is followed where the matching system call
// follows it. Errors are *os.PathError or *os.LinkError around an errno.

// maxSymlinks is how many symlinks one resolution may follow before ELOOP
// (Linux's MAXSYMLINKS).
const maxSymlinks = 40

// splitPath splits p into its non-empty components.
func splitPath(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, c := range parts {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// walk resolves path to the directory that holds its last component and
// that component's name. For the root itself, name is ".". Symlinks in the
// directory part are followed.
func (fs *FS) walk(path string) (dir Ino, name string, err error) {
	return fs.walkFrom(RootIno, path, new(int))
}

func (fs *FS) walkFrom(start Ino, path string, links *int) (Ino, string, error) {
	if len(path) >= maxPathLen {
		return 0, "", syscall.ENAMETOOLONG
	}
	if path == "" {
		return 0, "", syscall.ENOENT
	}
	comps := splitPath(path)
	cur := start
	if strings.HasPrefix(path, "/") {
		cur = RootIno
	}
	if len(comps) == 0 {
		return cur, ".", nil
	}
	for i, c := range comps[:len(comps)-1] {
		if len(c) > maxNameLen {
			return 0, "", syscall.ENAMETOOLONG
		}
		next, err := fs.step(cur, c, links)
		if err != nil {
			return 0, "", err
		}
		_ = i
		cur = next
	}
	last := comps[len(comps)-1]
	if len(last) > maxNameLen {
		return 0, "", syscall.ENAMETOOLONG
	}
	if strings.HasSuffix(path, "/") && last != "." && last != ".." {
		// "a/" names a directory: resolve it fully so that a trailing
		// slash on a non-directory gives ENOTDIR.
		ino, err := fs.step(cur, last, links)
		if err != nil {
			return 0, "", err
		}
		a, err := fs.Getattr(ino)
		if err != nil {
			return 0, "", err
		}
		if !a.IsDir() {
			return 0, "", syscall.ENOTDIR
		}
	}
	if last == ".." {
		p, err := fs.dotdot(cur)
		if err != nil {
			return 0, "", err
		}
		return p, ".", nil
	}
	return cur, last, nil
}

// dotdot returns the parent of directory d (the root is its own parent).
func (fs *FS) dotdot(d Ino) (Ino, error) {
	if d == RootIno {
		return RootIno, nil
	}
	fs.ns.RLock()
	defer fs.ns.RUnlock()
	return fs.parentOf(d)
}

// step resolves one component c inside directory cur, following a symlink
// it names.
func (fs *FS) step(cur Ino, c string, links *int) (Ino, error) {
	switch c {
	case ".":
		a, err := fs.Getattr(cur)
		if err != nil {
			return 0, err
		}
		if !a.IsDir() {
			return 0, syscall.ENOTDIR
		}
		return cur, nil
	case "..":
		return fs.dotdot(cur)
	}
	a, err := fs.Lookup(cur, c)
	if err != nil {
		return 0, err
	}
	if isSymlink(a.Mode) {
		return fs.followLink(cur, a.Ino, links)
	}
	return a.Ino, nil
}

// followLink resolves symlink ino found in directory dir to what it names.
func (fs *FS) followLink(dir, ino Ino, links *int) (Ino, error) {
	*links++
	if *links > maxSymlinks {
		return 0, syscall.ELOOP
	}
	target, err := fs.ReadlinkIno(ino)
	if err != nil {
		return 0, err
	}
	d, name, err := fs.walkFrom(dir, target, links)
	if err != nil {
		return 0, err
	}
	if name == "." {
		return d, nil
	}
	return fs.step(d, name, links)
}

// resolve returns the inode path names, following a final symlink when
// follow is set.
func (fs *FS) resolve(path string, follow bool) (Ino, error) {
	links := 0
	dir, name, err := fs.walkFrom(RootIno, path, &links)
	if err != nil {
		return 0, err
	}
	if name == "." {
		return dir, nil
	}
	a, err := fs.Lookup(dir, name)
	if err != nil {
		return 0, err
	}
	if follow && isSymlink(a.Mode) {
		return fs.followLink(dir, a.Ino, &links)
	}
	return a.Ino, nil
}

// Stat returns the attributes of the file path names, following symlinks.
func (fs *FS) Stat(path string) (Attr, error) {
	ino, err := fs.resolve(path, true)
	if err != nil {
		return Attr{}, pathErr("stat", path, err)
	}
	a, err := fs.Getattr(ino)
	return a, pathErr("stat", path, err)
}

// Lstat is Stat without following a final symlink.
func (fs *FS) Lstat(path string) (Attr, error) {
	ino, err := fs.resolve(path, false)
	if err != nil {
		return Attr{}, pathErr("lstat", path, err)
	}
	a, err := fs.Getattr(ino)
	return a, pathErr("lstat", path, err)
}

// Mkdir creates directory path with permission bits perm.
func (fs *FS) Mkdir(path string, perm uint32) error {
	dir, name, err := fs.walk(path)
	if err == nil && name == "." {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.MkdirIno(dir, name, perm, fs.defaultOwner())
	}
	return pathErr("mkdir", path, err)
}

// ReadDir lists directory path in name order, without "." and "..".
func (fs *FS) ReadDir(path string) ([]DirEntry, error) {
	ino, err := fs.resolve(path, true)
	if err != nil {
		return nil, pathErr("readdir", path, err)
	}
	ents, err := fs.ReadDirIno(ino)
	return ents, pathErr("readdir", path, err)
}

// Unlink removes the name path (not a directory).
func (fs *FS) Unlink(path string) error {
	dir, name, err := fs.walk(path)
	if err == nil {
		if name == "." {
			err = syscall.EISDIR
		} else {
			err = fs.UnlinkIno(dir, name)
		}
	}
	return pathErr("unlink", path, err)
}

// Rmdir removes the empty directory path.
func (fs *FS) Rmdir(path string) error {
	dir, name, err := fs.walk(path)
	if err == nil {
		if name == "." {
			if dir == RootIno {
				err = syscall.EBUSY
			} else {
				err = syscall.EINVAL
			}
		} else {
			err = fs.RmdirIno(dir, name)
		}
	}
	return pathErr("rmdir", path, err)
}

// Rename renames oldpath to newpath; flags is 0, RenameNoReplace or
// RenameExchange (renameat2(2)).
func (fs *FS) Rename(oldpath, newpath string, flags uint32) error {
	od, on, err := fs.walk(oldpath)
	if err != nil {
		return linkErr("rename", oldpath, newpath, err)
	}
	nd, nn, err := fs.walk(newpath)
	if err != nil {
		return linkErr("rename", oldpath, newpath, err)
	}
	if on == "." || nn == "." {
		return linkErr("rename", oldpath, newpath, syscall.EBUSY)
	}
	return linkErr("rename", oldpath, newpath, fs.RenameIno(od, on, nd, nn, flags))
}

// Link makes newpath a new name for the file oldpath (not followed if it
// is a symlink, as link(2)).
func (fs *FS) Link(oldpath, newpath string) error {
	ino, err := fs.resolve(oldpath, false)
	if err != nil {
		return linkErr("link", oldpath, newpath, err)
	}
	nd, nn, err := fs.walk(newpath)
	if err == nil && nn == "." {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.LinkIno(ino, nd, nn)
	}
	return linkErr("link", oldpath, newpath, err)
}

// Symlink creates newpath as a symlink to target.
func (fs *FS) Symlink(target, newpath string) error {
	nd, nn, err := fs.walk(newpath)
	if err == nil && nn == "." {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.SymlinkIno(nd, nn, target, fs.defaultOwner())
	}
	return linkErr("symlink", target, newpath, err)
}

// Readlink returns the target of symlink path.
func (fs *FS) Readlink(path string) (string, error) {
	ino, err := fs.resolve(path, false)
	if err != nil {
		return "", pathErr("readlink", path, err)
	}
	s, err := fs.ReadlinkIno(ino)
	return s, pathErr("readlink", path, err)
}

// Chmod sets the permission bits of path.
func (fs *FS) Chmod(path string, mode uint32) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		m := mode & 0o7777
		_, err = fs.Setattr(ino, SetAttr{Mode: &m})
	}
	return pathErr("chmod", path, err)
}

// Chown sets the owner and group of path; -1 leaves one unchanged.
func (fs *FS) Chown(path string, uid, gid int) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		var sa SetAttr
		if uid >= 0 {
			u := uint32(uid)
			sa.Uid = &u
		}
		if gid >= 0 {
			g := uint32(gid)
			sa.Gid = &g
		}
		_, err = fs.Setattr(ino, sa)
	}
	return pathErr("chown", path, err)
}

// Utimes sets the access and modification times of path.
func (fs *FS) Utimes(path string, atime, mtime time.Time) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		err = fs.utimesIno(ino, atime, mtime)
	}
	return pathErr("utimes", path, err)
}

// Truncate sets the size of the regular file path.
func (fs *FS) Truncate(path string, size int64) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		if size < 0 {
			err = syscall.EINVAL
		} else {
			_, err = fs.Setattr(ino, SetAttr{Size: &size})
		}
	}
	return pathErr("truncate", path, err)
}

// defaultOwner is the owner of what the path API creates: the process's.
func (fs *FS) defaultOwner() Owner {
	return Owner{Uid: uint32(syscall.Getuid()), Gid: uint32(syscall.Getgid())}
}
