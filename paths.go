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

// walked is a path resolved up to its last component.
type walked struct {
	dir  Ino    // the directory that holds the last component
	name string // the last component: a name, ".", or ".."
	// mustDir says the path ended in "/" (or the last component is "."
	// or ".."): it names a directory.
	mustDir bool
}

// entry reports whether the last component is an ordinary name (not "."
// or "..", which name dir itself or its parent).
func (w walked) entry() bool { return w.name != "." && w.name != ".." }

// walk resolves path up to its last component, following symlinks in the
// directory part.
func (fs *FS) walk(path string) (walked, error) {
	return fs.walkFrom(RootIno, path, new(int))
}

func (fs *FS) walkFrom(start Ino, path string, links *int) (walked, error) {
	if len(path) >= maxPathLen {
		return walked{}, syscall.ENAMETOOLONG
	}
	if path == "" {
		return walked{}, syscall.ENOENT
	}
	if strings.IndexByte(path, 0) >= 0 {
		return walked{}, syscall.EINVAL
	}
	comps := splitPath(path)
	cur := start
	if strings.HasPrefix(path, "/") {
		cur = RootIno
	}
	if len(comps) == 0 {
		return walked{dir: cur, name: ".", mustDir: true}, nil
	}
	for _, c := range comps[:len(comps)-1] {
		if len(c) > maxNameLen {
			return walked{}, syscall.ENAMETOOLONG
		}
		next, err := fs.step(cur, c, links)
		if err != nil {
			return walked{}, err
		}
		cur = next
	}
	last := comps[len(comps)-1]
	if len(last) > maxNameLen {
		return walked{}, syscall.ENAMETOOLONG
	}
	w := walked{dir: cur, name: last, mustDir: strings.HasSuffix(path, "/") || last == "." || last == ".."}
	// The directory part must be a directory ("file/x", "file/.").
	a, err := fs.Getattr(cur)
	if err != nil {
		return walked{}, err
	}
	if !a.IsDir() {
		return walked{}, syscall.ENOTDIR
	}
	return w, nil
}

// target returns the inode the last component names ("." is dir itself,
// ".." its parent), or ENOENT.
func (fs *FS) target(w walked) (Attr, error) {
	switch w.name {
	case ".":
		return fs.Getattr(w.dir)
	case "..":
		p, err := fs.dotdot(w.dir)
		if err != nil {
			return Attr{}, err
		}
		return fs.Getattr(p)
	}
	return fs.Lookup(w.dir, w.name)
}

// dotdot returns the parent of directory d (the root is its own parent).
func (fs *FS) dotdot(d Ino) (Ino, error) {
	if d == RootIno {
		return RootIno, nil
	}
	a, err := fs.Getattr(d)
	if err != nil {
		return 0, err
	}
	if !a.IsDir() {
		return 0, syscall.ENOTDIR
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
	target, err := fs.linkTarget(dir, ino, links)
	if err != nil {
		return 0, err
	}
	a, err := fs.target(target)
	if err != nil {
		return 0, err
	}
	if isSymlink(a.Mode) {
		return fs.followLink(target.dir, a.Ino, links)
	}
	if target.mustDir && !a.IsDir() {
		return 0, syscall.ENOTDIR
	}
	return a.Ino, nil
}

// linkTarget walks the target of symlink ino (found in dir) up to its last
// component.
func (fs *FS) linkTarget(dir, ino Ino, links *int) (walked, error) {
	*links++
	if *links > maxSymlinks {
		return walked{}, syscall.ELOOP
	}
	target, err := fs.ReadlinkIno(ino)
	if err != nil {
		return walked{}, err
	}
	return fs.walkFrom(dir, target, links)
}

// resolve returns the inode path names, following a final symlink when
// follow is set (a trailing slash always follows).
func (fs *FS) resolve(path string, follow bool) (Ino, error) {
	links := 0
	w, err := fs.walkFrom(RootIno, path, &links)
	if err != nil {
		return 0, err
	}
	a, err := fs.target(w)
	if err != nil {
		return 0, err
	}
	if isSymlink(a.Mode) && (follow || w.mustDir) {
		return fs.followLink(w.dir, a.Ino, &links)
	}
	if w.mustDir && !a.IsDir() {
		return 0, syscall.ENOTDIR
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
	w, err := fs.walk(path)
	if err == nil && !w.entry() {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.MkdirIno(w.dir, w.name, perm, fs.defaultOwner())
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
	w, err := fs.walk(path)
	if err == nil {
		switch {
		case !w.entry():
			err = syscall.EISDIR
		case w.mustDir:
			// "f/" names a directory: EISDIR if it is one, ENOTDIR if not.
			var a Attr
			if a, err = fs.Lookup(w.dir, w.name); err == nil {
				if a.IsDir() {
					err = syscall.EISDIR
				} else {
					err = syscall.ENOTDIR
				}
			}
		default:
			err = fs.UnlinkIno(w.dir, w.name)
		}
	}
	return pathErr("unlink", path, err)
}

// Rmdir removes the empty directory path.
func (fs *FS) Rmdir(path string) error {
	w, err := fs.walk(path)
	if err == nil {
		switch {
		case w.name == "." && w.dir == RootIno && len(splitPath(path)) == 0:
			err = syscall.EBUSY
		case w.name == ".":
			err = syscall.EINVAL
		case w.name == "..":
			err = syscall.ENOTEMPTY
		default:
			err = fs.RmdirIno(w.dir, w.name)
		}
	}
	return pathErr("rmdir", path, err)
}

// Rename renames oldpath to newpath; flags is 0 or RenameNoReplace,
// RenameExchange, RenameWhiteout as renameat2(2) takes them (a whiteout is
// owned by the process).
func (fs *FS) Rename(oldpath, newpath string, flags uint32) error {
	ow, err := fs.walk(oldpath)
	if err != nil {
		return linkErr("rename", oldpath, newpath, err)
	}
	nw, err := fs.walk(newpath)
	if err != nil {
		return linkErr("rename", oldpath, newpath, err)
	}
	if !ow.entry() || !nw.entry() {
		return linkErr("rename", oldpath, newpath, syscall.EBUSY)
	}
	if ow.mustDir || nw.mustDir {
		// A trailing slash on either name requires a directory source.
		a, err := fs.Lookup(ow.dir, ow.name)
		if err == nil && !a.IsDir() {
			err = syscall.ENOTDIR
		}
		if err != nil {
			return linkErr("rename", oldpath, newpath, err)
		}
	}
	return linkErr("rename", oldpath, newpath, fs.RenameIno(ow.dir, ow.name, nw.dir, nw.name, flags))
}

// Link makes newpath a new name for the file oldpath (not followed if it
// is a symlink, as link(2)).
func (fs *FS) Link(oldpath, newpath string) error {
	ino, err := fs.resolve(oldpath, false)
	if err != nil {
		return linkErr("link", oldpath, newpath, err)
	}
	nw, err := fs.walk(newpath)
	if err == nil && !nw.entry() {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.LinkIno(ino, nw.dir, nw.name)
	}
	return linkErr("link", oldpath, newpath, err)
}

// Symlink creates newpath as a symlink to target.
func (fs *FS) Symlink(target, newpath string) error {
	nw, err := fs.walk(newpath)
	if err == nil && !nw.entry() {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fs.SymlinkIno(nw.dir, nw.name, target, fs.defaultOwner())
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
		// chown(f, -1, -1) is still a chown: it updates ctime and clears
		// set-user-ID and set-group-ID, as Linux does.
		sa := SetAttr{Chown: true}
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
	if size < 0 {
		return pathErr("truncate", path, syscall.EINVAL)
	}
	ino, err := fs.resolve(path, true)
	if err == nil {
		_, err = fs.Setattr(ino, SetAttr{Size: &size})
	}
	return pathErr("truncate", path, err)
}

// defaultOwner is the owner of what the path API creates: the process's.
func (fs *FS) defaultOwner() Owner {
	return Owner{Uid: uint32(syscall.Getuid()), Gid: uint32(syscall.Getgid())}
}
