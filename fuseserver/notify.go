package fuseserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/sys/mountinfo"
)

// Notifications: messages the server sends the kernel unasked, on
// /dev/fuse, with unique 0 and the notification's code where a reply has
// its error (fuse_dev_do_write, fuse_notify). They travel on /dev/fuse
// under io_uring too: fs/fuse/dev_uring.c carries only replies.

// notifyInvalInode is FUSE_NOTIFY_INVAL_INODE (enum fuse_notify_code).
const notifyInvalInode = 2

// InvalidateInode tells the kernel that what it caches of node is stale
// (FUSE_NOTIFY_INVAL_INODE, libfuse's fuse_lowlevel_notify_inval_inode;
// the kernel's side is fuse_reverse_inval_inode). The kernel forgets the
// node's attributes, so the next stat asks the daemon (GETATTR), and bumps
// its attribute version, so that a GETATTR answered before the call
// cannot reinstate them; with off >= 0 it also drops the cached pages of
// [off, off+length), length <= 0 meaning to the end of file, as
// invalidate_inode_pages2_range does: a page under writeback is waited
// for, a dirty page is written back first (fuse_launder_folio, a WRITE),
// a mapped page is unmapped. off < 0 invalidates the attributes only. A
// node the kernel does not hold (ENOENT) is no error: it caches nothing of
// it.
//
// It returns once the kernel has done so (the write(2) of the notification
// does the work). It may be called from a FileSystem method: the kernel
// does not wait for the request being served, only for the READs of pages
// locked for reading and the WRITEs of dirty pages, which other goroutines
// serve (see Concurrency in the package doc), so the caller must hold
// nothing those requests need (an engine lock of the node).
func (s *Server) InvalidateInode(node uint64, off, length int64) error {
	var msg struct {
		fuse.OutHeader
		fuse.NotifyInvalInodeOut
	}
	msg.OutHeader.Length = uint32(unsafe.Sizeof(msg))
	msg.OutHeader.Status = notifyInvalInode
	msg.Ino = node
	msg.Off = off
	msg.NotifyInvalInodeOut.Length = length
	b := unsafe.Slice((*byte)(unsafe.Pointer(&msg)), unsafe.Sizeof(msg))
	for {
		_, err := unix.Write(s.fd, b)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENODEV):
			return fmt.Errorf("FUSE_NOTIFY_INVAL_INODE of node %d: %w", node, errStopped)
		}
		return fmt.Errorf("FUSE_NOTIFY_INVAL_INODE of node %d: %w", node, err)
	}
}

// Attacher is a FileSystem that calls its Server back (InvalidateInode,
// Dev). Mount calls Attach once INIT is answered, before it reads any
// other request.
type Attacher interface {
	Attach(s *Server)
}

// Dev returns the device number that stat(2) reports as st_dev for files
// on the mount (the FUSE superblock's anonymous device, major 0), as
// /proc/self/mountinfo listed it when the mount was made; 0 if it was not
// listed (Mount logs why).
func (s *Server) Dev() uint64 { return s.stDev }

// mountDev finds the device number of the mount on dir in
// /proc/self/mountinfo. It never touches the mount itself: Mount calls it
// before any reader runs, when a stat of dir would wait for a GETATTR
// nobody serves. A dir reached through a symbolic link is listed by its
// real path, so the parent is resolved too (never dir: it is the mount).
func mountDev(dir string) (uint64, error) {
	t, err := mountinfo.Read()
	if err != nil {
		return 0, err
	}
	m, ok := t.At(dir)
	if !ok {
		if parent, err := filepath.EvalSymlinks(filepath.Dir(dir)); err == nil {
			m, ok = t.At(filepath.Join(parent, filepath.Base(dir)))
		}
	}
	if !ok {
		return 0, fmt.Errorf("%s is not in %s", dir, mountinfo.Path)
	}
	return unix.Mkdev(m.Major, m.Minor), nil
}
