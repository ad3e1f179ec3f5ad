package fusefs

import (
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
)

// Directory handles. OPENDIR opens the directory in the engine, which
// keeps it alive (a directory replaced by rename stays fstat-able through
// an open descriptor, as on Linux). The listing is taken at the first
// READDIR and at every READDIR from offset 0 (rewinddir); entry i of it has
// offset i+1, so seekdir to an offset telldir returned lands on the same
// entry.

// OpenDir answers OPENDIR.
func (fs *FS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := fs.start()
	defer fs.done(opOpendir, t)
	i := ino(in.NodeId)
	f, err := fs.eng.OpenIno(i, sluice.O_RDONLY|sluice.O_DIRECTORY)
	if err != nil {
		return fs.toStatus("opendir", in.NodeId, err)
	}
	out.Fh = fs.handles.add(&handle{ino: i, f: f})
	return fuse.OK
}

// listing returns the entries of h from offset off, taking a new listing
// when off is 0.
//
// Preconditions: h.mu is held.
func (fs *FS) listingLocked(h *handle, off uint64) ([]sluice.DirEntry, error) {
	if off == 0 || h.mu.ents == nil {
		ents, err := fs.eng.ReadDirIno(h.ino)
		if errors.Is(err, syscall.ENOENT) {
			// Removed while open: Linux lists it as empty.
			ents, err = nil, nil
		}
		if err != nil {
			return nil, err
		}
		var parent sluice.Ino
		if a, err := fs.eng.Getattr(h.ino); err == nil {
			parent = a.Parent
		}
		all := make([]sluice.DirEntry, 0, len(ents)+2)
		all = append(all, sluice.DirEntry{Name: ".", Ino: h.ino, Type: syscall.S_IFDIR},
			sluice.DirEntry{Name: "..", Ino: parent, Type: syscall.S_IFDIR})
		h.mu.ents = append(all, ents...)
	}
	if off >= uint64(len(h.mu.ents)) {
		return nil, nil
	}
	return h.mu.ents[off:], nil
}

// ReadDir answers READDIR.
func (fs *FS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := fs.start()
	defer fs.done(opReaddir, t)
	return fs.readDir("readdir", in, func(_ sluice.DirEntry, de fuse.DirEntry) bool {
		return out.AddDirEntry(de)
	})
}

// ReadDirPlus answers READDIRPLUS: each entry with its attributes, which
// saves the kernel a LOOKUP per name. "." and ".." go without (node ID 0),
// which the kernel takes as "no attributes".
func (fs *FS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := fs.start()
	defer fs.done(opReaddirplus, t)
	return fs.readDir("readdirplus", in, func(e sluice.DirEntry, de fuse.DirEntry) bool {
		if e.Name == "." || e.Name == ".." {
			return out.AddDirLookupEntry(de) != nil
		}
		a, err := fs.eng.Getattr(e.Ino)
		if err != nil {
			return true // removed since the listing was taken: leave it out
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			return false
		}
		fs.fillEntry(&a, eo)
		return true
	})
}

// readDir passes the entries of directory handle in.Fh from in.Offset to
// add, each with its READDIR entry, until add reports that the reply is
// full.
func (fs *FS) readDir(op string, in *fuse.ReadIn, add func(sluice.DirEntry, fuse.DirEntry) bool) fuse.Status {
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ents, err := fs.listingLocked(h, in.Offset)
	if err != nil {
		return fs.toStatus(op, in.NodeId, err)
	}
	for k, e := range ents {
		de := fuse.DirEntry{Name: e.Name, Ino: uint64(e.Ino), Mode: e.Type, Off: in.Offset + uint64(k) + 1}
		if !add(e, de) {
			break
		}
	}
	return fuse.OK
}

// ReleaseDir answers RELEASEDIR.
func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) {
	t := fs.start()
	defer fs.done(opReleasedir, t)
	if h := fs.handles.remove(in.Fh); h != nil {
		if err := h.close(); err != nil {
			fs.toStatus("releasedir", in.NodeId, err)
		}
	}
}

// FsyncDir answers FSYNCDIR: namespace changes are committed at once but
// synced at the next sync point; fsync of the directory makes one.
//
// An fsync of the mount's root directory is a sync of the whole file
// system (SyncAll), what SYNCFS would be: Linux sends FUSE_SYNCFS to
// virtiofs only, so sync(1) and syncfs(2) write the kernel's dirty pages
// to sluice but never reach it, and `sync MOUNTPOINT` (coreutils: fsync of
// the directory) is how a user makes everything durable.
func (fs *FS) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	t := fs.start()
	defer fs.done(opFsyncdir, t)
	if in.NodeId == fuse.FUSE_ROOT_ID {
		return fs.toStatus("fsyncdir", in.NodeId, fs.eng.SyncAll())
	}
	h, st := fs.getHandle(in.Fh)
	if !st.Ok() {
		return st
	}
	return fs.toStatus("fsyncdir", in.NodeId, h.f.Fsync())
}
