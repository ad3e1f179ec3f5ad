package sluice

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// Open flags, as open(2). O_DIRECT and friends are spelled out because the
// os package does not name them all.
const (
	O_RDONLY    = syscall.O_RDONLY
	O_WRONLY    = syscall.O_WRONLY
	O_RDWR      = syscall.O_RDWR
	O_CREAT     = syscall.O_CREAT
	O_EXCL      = syscall.O_EXCL
	O_TRUNC     = syscall.O_TRUNC
	O_APPEND    = syscall.O_APPEND
	O_DIRECT    = syscall.O_DIRECT
	O_SYNC      = syscall.O_SYNC
	O_DSYNC     = syscall.O_DSYNC
	O_DIRECTORY = syscall.O_DIRECTORY
	O_NOFOLLOW  = syscall.O_NOFOLLOW
	O_NOATIME   = syscall.O_NOATIME
)

// File is an open file (or directory). Its methods are safe for concurrent
// use; ReadAt and WriteAt calls run in parallel as the I/O path allows.
type File struct {
	fs    *FS
	in    *inode
	name  string
	flags int // open flags (immutable)

	closed atomic.Bool
	// ops counts calls in progress, so Close waits for them.
	ops sync.WaitGroup

	posMu lockrank.Mutex[lockrank.FilePos]
	pos   int64 // file position for Read, Write and Seek. Protected by posMu.
}

// OpenFile opens path with open(2) flags and, when it creates the file,
// permission bits perm.
func (fs *FS) OpenFile(path string, flag int, perm uint32) (*File, error) {
	f, err := fs.openFile(path, flag, perm)
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	return f, nil
}

// Create creates or truncates path, open for reading and writing.
func (fs *FS) Create(path string) (*File, error) {
	return fs.OpenFile(path, O_RDWR|O_CREAT|O_TRUNC, 0o644)
}

func (fs *FS) openFile(path string, flag int, perm uint32) (*File, error) {
	if flag&O_CREAT != 0 && flag&O_DIRECTORY != 0 {
		return nil, syscall.EINVAL
	}
	links := 0
	w, err := fs.walkFrom(RootIno, path, &links)
	if err != nil {
		return nil, err
	}
	in, err := fs.openTarget(w, flag, perm, &links)
	if err != nil {
		return nil, err
	}
	f, err := fs.openInode(in, flag)
	if err != nil {
		fs.putInode(in)
		return nil, err
	}
	f.name = path
	return f, nil
}

// openTarget returns, referenced, the inode an open of w names: following
// symlinks (a dangling one with O_CREAT creates its target, as Linux
// does), creating the file for O_CREAT.
func (fs *FS) openTarget(w walked, flag int, perm uint32, links *int) (*inode, error) {
	creat := flag&O_CREAT != 0
	for {
		if !w.entry() || !creat {
			a, err := fs.target(w)
			if err != nil {
				return nil, err
			}
			ino := a.Ino
			if isSymlink(a.Mode) {
				if flag&O_NOFOLLOW != 0 && !w.mustDir {
					if flag&O_DIRECTORY != 0 {
						return nil, syscall.ENOTDIR
					}
					return nil, syscall.ELOOP
				}
				if ino, err = fs.followLink(w.dir, a.Ino, links); err != nil {
					return nil, err
				}
			} else if w.mustDir && !a.IsDir() {
				return nil, syscall.ENOTDIR
			}
			if creat { // "dir/." or "dir/.." with O_CREAT
				return nil, syscall.EISDIR
			}
			return fs.getInode(ino)
		}
		if w.mustDir {
			return nil, syscall.EISDIR // open("f/", O_CREAT)
		}
		a, err := fs.Lookup(w.dir, w.name)
		switch {
		case err == syscall.ENOENT:
			in, _, err := fs.create(w.dir, w.name, syscall.S_IFREG|perm&0o7777, fs.defaultOwner(), 0, nil, true)
			if err == syscall.EEXIST && flag&O_EXCL == 0 {
				continue // created by someone else meanwhile: open it
			}
			return in, err
		case err != nil:
			return nil, err
		case flag&O_EXCL != 0:
			return nil, syscall.EEXIST
		case isSymlink(a.Mode):
			if flag&O_NOFOLLOW != 0 {
				return nil, syscall.ELOOP
			}
			if w, err = fs.linkTarget(w.dir, a.Ino, links); err != nil {
				return nil, err
			}
		case a.IsDir():
			return nil, syscall.EISDIR
		default:
			return fs.getInode(a.Ino)
		}
	}
}

// OpenIno opens inode ino with open(2) flags (no O_CREAT): what the FUSE
// adapter calls.
func (fs *FS) OpenIno(ino Ino, flag int) (*File, error) {
	in, err := fs.getInode(ino)
	if err != nil {
		return nil, err
	}
	f, err := fs.openInode(in, flag&^(O_CREAT|O_EXCL))
	if err != nil {
		fs.putInode(in)
		return nil, err
	}
	return f, nil
}

// CreateIno creates name in parent and opens it (the FUSE create call).
func (fs *FS) CreateIno(parent Ino, name string, flag int, mode uint32, owner Owner) (*File, Attr, error) {
	in, _, err := fs.create(parent, name, syscall.S_IFREG|mode&0o7777, owner, 0, nil, flag&O_EXCL != 0)
	if err != nil {
		return nil, Attr{}, err
	}
	f, err := fs.openInode(in, flag)
	if err != nil {
		fs.putInode(in)
		return nil, Attr{}, err
	}
	a, err := in.getattr()
	if err != nil {
		f.Close()
		return nil, Attr{}, err
	}
	return f, a, nil
}

// openInode checks flag against in and returns a File that owns the
// caller's reference to in.
func (fs *FS) openInode(in *inode, flag int) (*File, error) {
	in.mu.Lock()
	mode, nlink := in.attr.Mode, in.attr.Nlink
	in.mu.Unlock()
	acc := flag & syscall.O_ACCMODE
	if acc == 3 {
		return nil, syscall.EINVAL
	}
	switch {
	case nlink == 0 && !isDir(mode):
		// Reachable by inode number only (FUSE); it still works.
	case isDir(mode) && (acc != O_RDONLY || flag&O_TRUNC != 0):
		return nil, syscall.EISDIR
	case isDir(mode) && flag&O_DIRECT != 0:
		return nil, syscall.EINVAL
	case !isDir(mode) && flag&O_DIRECTORY != 0:
		return nil, syscall.ENOTDIR
	case isSymlink(mode):
		return nil, syscall.ELOOP
	}
	if acc != O_RDONLY || flag&O_TRUNC != 0 {
		if err := fs.writable(); err != nil {
			return nil, err
		}
	}
	if flag&O_TRUNC != 0 && isReg(mode) { // even O_RDONLY, as Linux
		if err := in.truncate(0); err != nil {
			return nil, err
		}
	}
	fs.icache.mu.Lock()
	in.opens++
	fs.icache.mu.Unlock()
	f := &File{fs: fs, in: in, flags: flag}
	fs.files.mu.Lock()
	fs.files.set[f] = struct{}{}
	fs.files.mu.Unlock()
	return f, nil
}

// Name returns the path the file was opened by (empty when opened by inode
// number).
func (f *File) Name() string { return f.name }

// Ino returns the file's inode number.
func (f *File) Ino() Ino { return f.in.ino }

// Flags returns the flags the file was opened with.
func (f *File) Flags() int { return f.flags }

// begin marks a call in progress; it fails with EBADF on a closed file.
func (f *File) begin() error {
	f.ops.Add(1)
	if f.closed.Load() {
		f.ops.Done()
		return syscall.EBADF
	}
	return nil
}

func (f *File) end() { f.ops.Done() }

func (f *File) readable() bool { return f.flags&syscall.O_ACCMODE != O_WRONLY }
func (f *File) writable() bool { return f.flags&syscall.O_ACCMODE != O_RDONLY }

// Close releases the file. Calls in progress finish first. Unlinked files
// are freed at the last close.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return pathErr("close", f.name, syscall.EBADF)
	}
	f.ops.Wait()
	fs := f.fs
	fs.files.mu.Lock()
	delete(fs.files.set, f)
	fs.files.mu.Unlock()
	fs.icache.mu.Lock()
	f.in.opens--
	last := f.in.opens == 0
	fs.icache.mu.Unlock()
	var err error
	if last {
		err = f.in.trimSpeculative()
	}
	fs.putInode(f.in)
	return pathErr("close", f.name, err)
}

// Stat returns the file's attributes.
func (f *File) Stat() (Attr, error) {
	if err := f.begin(); err != nil {
		return Attr{}, pathErr("stat", f.name, err)
	}
	defer f.end()
	a, err := f.in.getattr()
	return a, pathErr("stat", f.name, err)
}

// ReadDir lists the directory the file is open on.
func (f *File) ReadDir() ([]DirEntry, error) {
	if err := f.begin(); err != nil {
		return nil, pathErr("readdir", f.name, err)
	}
	defer f.end()
	ents, err := f.fs.ReadDirIno(f.in.ino)
	return ents, pathErr("readdir", f.name, err)
}

// verifyArea refuses a negative position or one whose end overflows, as
// Linux's rw_verify_area does before anything else.
func verifyArea(off int64, n int) error {
	if off < 0 || off+int64(n) < off {
		return syscall.EINVAL
	}
	return nil
}

// RWFlags modify one read or write, as preadv2(2) and pwritev2(2) flags do.
// The values are sluice's own bits, not the kernel's RWF_* numbers.
type RWFlags uint32

const (
	// RWFNoWait returns EAGAIN instead of blocking (RWF_NOWAIT): for a lock
	// held in a conflicting mode, an allocation, a page under I/O, a drain.
	RWFNoWait RWFlags = 1 << iota
	// RWFDsync makes a write durable before it returns, as O_DSYNC.
	RWFDsync
	// RWFSync is RWFDsync plus the file's metadata, as O_SYNC.
	RWFSync
	// RWFAppend writes at the end of the file, as O_APPEND.
	RWFAppend
	// RWFKeepPrivs keeps set-user-ID, set-group-ID and capabilities that a
	// write would otherwise clear: for a caller with CAP_FSETID, or a FUSE
	// write the kernel did not flag WRITE_KILL_SUIDGID.
	RWFKeepPrivs
	// RWFDontCache asks for uncached buffered I/O (RWF_DONTCACHE, 0x80 in
	// linux/fs.h, Linux 6.14): the read or write goes through the page
	// cache, coherent with every other access, but the pages it brings
	// in or dirties are dropped once they are clean: a read's after it
	// copied from them (it reads no further ahead than asked), a write's
	// when their writeback ends, which the write starts at once (the
	// kernel's folio_end_dropbehind). Pages that were cached before stay,
	// and a cached access to a page keeps it. Direct I/O ignores it.
	RWFDontCache
	// RWFAtomic makes an O_DIRECT write untorn (RWF_ATOMIC, Linux 6.11):
	// after any crash its range holds either all of the old data or all
	// of the new, never a mix. The write must be a power of two between
	// the volume's AtomicWriteLimits UnitMin and UnitMax bytes, at an
	// offset aligned to its length (EINVAL otherwise), and not an append
	// (EINVAL); a buffered file, and a file system opened with
	// Options.NoAtomicWrites, get EOPNOTSUPP. See atomic.go.
	RWFAtomic
)

// ReadAt reads len(p) bytes at off, as os.File.ReadAt: fewer bytes only at
// end of file, with io.EOF.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := f.Pread(p[n:], off+int64(n), 0)
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
	}
	return n, nil
}

// Pread reads up to len(p) bytes at off, as pread(2) (or preadv2 with
// flags): a short count at end of file, no io.EOF.
func (f *File) Pread(p []byte, off int64, flags RWFlags) (int, error) {
	if err := verifyArea(off, len(p)); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	if err := f.begin(); err != nil {
		return 0, pathErr("read", f.name, err)
	}
	defer f.end()
	n, err := f.pread(p, off, flags)
	return n, pathErr("read", f.name, err)
}

// WriteAt writes p at off, as pwrite(2). On a file opened O_APPEND it
// appends, as Linux does.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.Pwrite(p, off, 0)
}

// Pwrite writes p at off with pwritev2(2) flags.
func (f *File) Pwrite(p []byte, off int64, flags RWFlags) (int, error) {
	if err := verifyArea(off, len(p)); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	if err := f.begin(); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	defer f.end()
	n, err := f.pwrite(p, off, flags)
	return n, pathErr("write", f.name, err)
}

// Read reads from the file position, as read(2).
func (f *File) Read(p []byte) (int, error) {
	f.posMu.Lock()
	defer f.posMu.Unlock()
	n, err := f.Pread(p, f.pos, 0)
	f.pos += int64(n)
	if err == nil && n == 0 && len(p) > 0 {
		err = io.EOF
	}
	return n, err
}

// Write writes at the file position (at the end with O_APPEND), as
// write(2).
func (f *File) Write(p []byte) (int, error) {
	f.posMu.Lock()
	defer f.posMu.Unlock()
	if err := f.begin(); err != nil {
		return 0, pathErr("write", f.name, err)
	}
	defer f.end()
	if !f.writable() {
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	if len(p) == 0 {
		return 0, nil // not even O_APPEND moves the position
	}
	k := f.newKiocb(p, f.pos, 0)
	n, err := f.in.write(k)
	if n > 0 {
		f.pos = k.off + int64(n)
	}
	return n, pathErr("write", f.name, err)
}

// Seek sets the file position, as lseek(2), including SEEK_DATA (3) and
// SEEK_HOLE (4).
func (f *File) Seek(off int64, whence int) (int64, error) {
	if err := f.begin(); err != nil {
		return 0, pathErr("seek", f.name, err)
	}
	defer f.end()
	f.posMu.Lock()
	defer f.posMu.Unlock()
	var pos int64
	var err error
	switch whence {
	case io.SeekStart:
		pos = off
	case io.SeekCurrent:
		pos = f.pos + off
	case io.SeekEnd:
		a, e := f.in.getattr()
		pos, err = a.Size+off, e
	case SeekData, SeekHole:
		pos, err = f.in.seekData(off, whence == SeekData)
	default:
		err = syscall.EINVAL
	}
	if err == nil && pos < 0 {
		err = syscall.EINVAL
	}
	if err != nil {
		return 0, pathErr("seek", f.name, err)
	}
	f.pos = pos
	return pos, nil
}

// SEEK_DATA and SEEK_HOLE whence values.
const (
	SeekData = 3
	SeekHole = 4
)

// Sync is Fsync, for io-style callers.
func (f *File) Sync() error { return f.Fsync() }

// Fsync writes back the file's dirty pages, flushes the device, then makes
// the metadata durable: after it returns, the file's data and attributes
// and every committed namespace change survive a crash.
func (f *File) Fsync() error {
	if err := f.begin(); err != nil {
		return pathErr("fsync", f.name, err)
	}
	defer f.end()
	return pathErr("fsync", f.name, f.in.fsync())
}

// Fdatasync is Fsync without the promise for attributes that are not
// needed to read the data back: when only timestamps changed since the
// last sync point it flushes the device and syncs no metadata.
func (f *File) Fdatasync() error {
	if err := f.begin(); err != nil {
		return pathErr("fdatasync", f.name, err)
	}
	defer f.end()
	return pathErr("fdatasync", f.name, f.in.fdatasync())
}

// Truncate sets the file's size.
func (f *File) Truncate(size int64) error {
	if size < 0 {
		return pathErr("truncate", f.name, syscall.EINVAL)
	}
	if err := f.begin(); err != nil {
		return pathErr("truncate", f.name, err)
	}
	defer f.end()
	var err error
	if !f.writable() {
		err = syscall.EINVAL
	} else {
		err = f.in.truncate(size)
	}
	return pathErr("truncate", f.name, err)
}

// Fallocate flags, as fallocate(2).
const (
	FallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	FallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE (with KEEP_SIZE)
	FallocZeroRange = 0x10 // FALLOC_FL_ZERO_RANGE
	// FallocCollapseRange (FALLOC_FL_COLLAPSE_RANGE) removes the
	// block-aligned range, moving the rest of the file down; alone.
	FallocCollapseRange = 0x08
	// FallocInsertRange (FALLOC_FL_INSERT_RANGE) inserts a block-aligned
	// hole, moving the rest of the file up; alone.
	FallocInsertRange = 0x20
	// FallocUnshareRange (FALLOC_FL_UNSHARE_RANGE) gives the range blocks
	// of the file's own: shared (reflinked) blocks are copied, holes
	// allocated as for mode 0; with or without KEEP_SIZE.
	FallocUnshareRange = 0x40
	// FallocWriteZeroes (FALLOC_FL_WRITE_ZEROES, Linux 6.17) asks for
	// zeroed written blocks. The VFS knows it, XFS on 6.18 does not:
	// after the generic checks (EBADF for a file not open for writing)
	// it is EOPNOTSUPP, as there.
	FallocWriteZeroes = 0x80
)

// Fallocate allocates, punches, zeroes, collapses or inserts [off, off+n)
// as fallocate(2) on XFS (see the Falloc flags).
func (f *File) Fallocate(mode uint32, off, n int64) error {
	if err := f.begin(); err != nil {
		return pathErr("fallocate", f.name, err)
	}
	defer f.end()
	// Arguments are checked before the access mode (vfs_fallocate).
	if err := checkFallocate(mode, off, n); err != nil {
		return pathErr("fallocate", f.name, err)
	}
	var err error
	if !f.writable() {
		err = syscall.EBADF
	} else {
		err = f.in.fallocate(mode, off, n)
	}
	return pathErr("fallocate", f.name, err)
}

var _ io.ReaderAt = (*File)(nil)
var _ io.WriterAt = (*File)(nil)
var _ = os.ErrClosed
