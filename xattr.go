package sluice

import (
	"errors"
	"strings"
	"syscall"

	"github.com/sluicefs/sluice/meta"
)

// Extended attributes, with Linux's limits and errors.

// Xattr flags, as setxattr(2).
const (
	XattrCreate  = 1 // XATTR_CREATE: fail with EEXIST if it exists
	XattrReplace = 2 // XATTR_REPLACE: fail with ENODATA if it does not
)

// maxXattrValue is the largest value (XATTR_SIZE_MAX).
const maxXattrValue = 64 << 10

func checkXattrName(name string) error {
	switch {
	case name == "" || len(name) > maxNameLen:
		return syscall.ERANGE
	case strings.IndexByte(name, 0) >= 0:
		return syscall.EINVAL
	}
	for _, ns := range []string{"user.", "trusted.", "security.", "system."} {
		if strings.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return syscall.EINVAL
			}
			return nil
		}
	}
	return syscall.EOPNOTSUPP
}

// GetxattrIno returns the value of attribute name of inode ino.
func (fs *FS) GetxattrIno(ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	in, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	defer fs.putInode(in)
	v, err := fs.kv.Get(meta.XattrKey(ino, name))
	if errors.Is(err, meta.ErrNotFound) {
		return nil, syscall.ENODATA
	}
	if err != nil {
		return nil, eio(err)
	}
	b, err := meta.DecodeBytes("xattr", v)
	return b, eio(err)
}

// SetxattrIno sets attribute name of inode ino.
func (fs *FS) SetxattrIno(ino Ino, name string, value []byte, flags int) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > maxXattrValue {
		return syscall.E2BIG
	}
	if flags&^(XattrCreate|XattrReplace) != 0 {
		return syscall.EINVAL
	}
	return fs.changeXattr(ino, name, func(exists bool, t *txn) error {
		switch {
		case exists && flags&XattrCreate != 0:
			return syscall.EEXIST
		case !exists && flags&XattrReplace != 0:
			return syscall.ENODATA
		}
		t.kv.Set(meta.XattrKey(ino, name), meta.EncodeBytes(value))
		return nil
	})
}

// RemovexattrIno removes attribute name of inode ino.
func (fs *FS) RemovexattrIno(ino Ino, name string) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	return fs.changeXattr(ino, name, func(exists bool, t *txn) error {
		if !exists {
			return syscall.ENODATA
		}
		t.kv.Delete(meta.XattrKey(ino, name))
		return nil
	})
}

// changeXattr runs fn in a transaction that also updates ctime.
func (fs *FS) changeXattr(ino Ino, name string, fn func(exists bool, t *txn) error) error {
	if err := fs.writable(); err != nil {
		return err
	}
	in, err := fs.getInode(ino)
	if err != nil {
		return err
	}
	defer fs.putInode(in)
	in.mu.Lock()
	defer in.mu.Unlock()
	_, err = fs.kv.Get(meta.XattrKey(ino, name))
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return eio(err)
	}
	exists := err == nil
	if strings.HasPrefix(name, "security.") {
		in.privChecked = false // a capability may have come or gone
	}
	return fs.transact(func(t *txn) error {
		if err := fn(exists, t); err != nil {
			return err
		}
		in.attr.Ctime = now()
		t.putAttr(in)
		in.attrDirty = false
		return nil
	})
}

// ListxattrIno returns the names of every attribute of inode ino.
func (fs *FS) ListxattrIno(ino Ino) ([]string, error) {
	in, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	defer fs.putInode(in)
	var names []string
	start, end := meta.XattrPrefix(ino)
	err = fs.kv.Scan(start, end, func(k, _ []byte) error {
		_, name, err := meta.XattrName(k)
		names = append(names, name)
		return err
	})
	return names, eio(err)
}

// Getxattr returns attribute name of path (following symlinks).
func (fs *FS) Getxattr(path, name string) ([]byte, error) {
	ino, err := fs.resolve(path, true)
	if err != nil {
		return nil, pathErr("getxattr", path, err)
	}
	v, err := fs.GetxattrIno(ino, name)
	return v, pathErr("getxattr", path, err)
}

// Setxattr sets attribute name of path; flags is 0, XattrCreate or
// XattrReplace.
func (fs *FS) Setxattr(path, name string, value []byte, flags int) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		err = fs.SetxattrIno(ino, name, value, flags)
	}
	return pathErr("setxattr", path, err)
}

// Listxattr lists the attribute names of path.
func (fs *FS) Listxattr(path string) ([]string, error) {
	ino, err := fs.resolve(path, true)
	if err != nil {
		return nil, pathErr("listxattr", path, err)
	}
	n, err := fs.ListxattrIno(ino)
	return n, pathErr("listxattr", path, err)
}

// Removexattr removes attribute name of path.
func (fs *FS) Removexattr(path, name string) error {
	ino, err := fs.resolve(path, true)
	if err == nil {
		err = fs.RemovexattrIno(ino, name)
	}
	return pathErr("removexattr", path, err)
}
