package fstest

import (
	"bytes"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Model is a trivial in-memory Target: a tree of maps and byte slices that
// does what Linux does for the calls the metamorphic test makes, including
// the order in which Linux checks for errors. It has no blocks: holes and
// allocated-but-unwritten ranges are simply zeros, and SEEK_DATA/SEEK_HOLE,
// symlinks and xattrs are not modelled (ENOSYS). The reflink calls are
// byte copies and swaps with XFS's argument rules (BlockSize is their
// alignment). Nothing lies past a file's EOF: what an extension exposes
// reads as zeros, whatever a clone or an exchange left there.
// Exchange-range's FILE1_WRITTEN, which depends on where file1 has
// written blocks, is not modelled (ENOSYS).
type Model struct {
	// DirectAlign is the alignment of O_DIRECT offsets and lengths (the
	// device's I/O unit).
	DirectAlign int64
	// BlockSize is the file system's block size: the alignment of the
	// reflink calls, COLLAPSE_RANGE and INSERT_RANGE.
	BlockSize int64
	// AtomicUnitMin and AtomicUnitMax bound an untorn write
	// (PwriteAtomic), as statx's STATX_WRITE_ATOMIC reports them.
	// NewModel sets sluice's (AtomicWriteLimits): a block and
	// max(a block, 1 MiB), which on 4 KiB blocks are also the XFS
	// oracle's (software atomic writes). AtomicUnitMax 0 means none, as
	// with sluice.Options.NoAtomicWrites.
	AtomicUnitMin, AtomicUnitMax int64

	root    *mnode
	nextIno uint64
}

// mnode is a model inode.
type mnode struct {
	ino   uint64
	mode  uint32
	nlink uint32
	uid   uint32
	gid   uint32
	data  []byte            // regular file contents (its length is the size)
	kids  map[string]*mnode // directory entries
	atime time.Time
	mtime time.Time
}

func (n *mnode) isDir() bool { return n.mode&syscall.S_IFMT == syscall.S_IFDIR }
func (n *mnode) isReg() bool { return n.mode&syscall.S_IFMT == syscall.S_IFREG }

var _ Target = (*Model)(nil)

// NewModel returns an empty model (a root directory) whose O_DIRECT
// alignment is directAlign bytes and whose block size is blockSize bytes,
// with sluice's atomic write limits for that block size.
func NewModel(directAlign, blockSize int64) *Model {
	m := &Model{
		DirectAlign: directAlign, BlockSize: blockSize,
		AtomicUnitMin: blockSize, AtomicUnitMax: max(blockSize, atomicWriteMax),
		nextIno: 2,
	}
	m.root = &mnode{ino: 1, mode: syscall.S_IFDIR | 0o755, nlink: 2, kids: map[string]*mnode{}}
	return m
}

// Name implements Target.
func (m *Model) Name() string { return "model" }

func (m *Model) newNode(mode uint32) *mnode {
	n := &mnode{ino: m.nextIno, mode: mode, nlink: 1}
	m.nextIno++
	if n.isDir() {
		n.nlink = 2
		n.kids = map[string]*mnode{}
	}
	return n
}

// lookupParent resolves every component of path but the last (which must
// be a plain name) and returns the directory and the name. The root
// itself gives (nil, ".").
func (m *Model) lookupParent(path string) (*mnode, string, error) {
	if path == "" {
		return nil, "", syscall.ENOENT
	}
	comps := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	if len(comps) == 0 {
		return nil, ".", nil
	}
	dir := m.root
	for _, c := range comps[:len(comps)-1] {
		next, ok := dir.kids[c]
		if !ok {
			return nil, "", syscall.ENOENT
		}
		if !next.isDir() {
			return nil, "", syscall.ENOTDIR
		}
		dir = next
	}
	return dir, comps[len(comps)-1], nil
}

// lookup resolves path fully.
func (m *Model) lookup(path string) (*mnode, error) {
	dir, name, err := m.lookupParent(path)
	if err != nil {
		return nil, err
	}
	if dir == nil {
		return m.root, nil
	}
	n, ok := dir.kids[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return n, nil
}

// Open implements Target (open(2) and may_open order: the lookup, O_CREAT
// and O_EXCL, EISDIR for a directory opened to write or truncate or with
// O_CREAT, ENOTDIR for O_DIRECTORY, EINVAL for O_DIRECT on a directory
// (ext4 and XFS directories refuse it), then O_TRUNC even with O_RDONLY).
func (m *Model) Open(path string, flag int, perm uint32) (Handle, error) {
	dir, name, err := m.lookupParent(path)
	if err != nil {
		return nil, err
	}
	var n *mnode
	if dir == nil {
		n = m.root
	} else {
		n = dir.kids[name]
	}
	switch {
	case n != nil && flag&syscall.O_CREAT != 0 && flag&syscall.O_EXCL != 0:
		return nil, syscall.EEXIST
	case n != nil && flag&syscall.O_CREAT != 0 && n.isDir():
		return nil, syscall.EISDIR
	case n == nil && flag&syscall.O_CREAT == 0:
		return nil, syscall.ENOENT
	case n == nil:
		n = m.newNode(syscall.S_IFREG | perm&0o7777)
		dir.kids[name] = n
	}
	acc := flag & syscall.O_ACCMODE
	switch {
	case n.isDir() && (acc != syscall.O_RDONLY || flag&syscall.O_TRUNC != 0):
		return nil, syscall.EISDIR
	case !n.isDir() && flag&syscall.O_DIRECTORY != 0:
		return nil, syscall.ENOTDIR
	case n.isDir() && flag&syscall.O_DIRECT != 0:
		return nil, syscall.EINVAL
	}
	if flag&syscall.O_TRUNC != 0 && n.isReg() {
		n.data = nil
	}
	return &modelHandle{m: m, n: n, flags: flag}, nil
}

func (n *mnode) stat() Stat {
	st := Stat{Ino: n.ino, Mode: n.mode, Nlink: n.nlink, Uid: n.uid, Gid: n.gid, Atime: n.atime, Mtime: n.mtime}
	if n.isReg() {
		st.Size = int64(len(n.data))
	}
	return st
}

// Stat implements Target.
func (m *Model) Stat(path string) (Stat, error) {
	n, err := m.lookup(path)
	if err != nil {
		return Stat{}, err
	}
	return n.stat(), nil
}

// Lstat implements Target (there are no symlinks).
func (m *Model) Lstat(path string) (Stat, error) { return m.Stat(path) }

// Mkdir implements Target.
func (m *Model) Mkdir(path string, perm uint32) error {
	dir, name, err := m.lookupParent(path)
	if err != nil {
		return err
	}
	if dir == nil || dir.kids[name] != nil {
		return syscall.EEXIST
	}
	dir.kids[name] = m.newNode(syscall.S_IFDIR | perm&0o7777)
	dir.nlink++
	return nil
}

// ReadDir implements Target.
func (m *Model) ReadDir(path string) ([]DirEntry, error) {
	n, err := m.lookup(path)
	if err != nil {
		return nil, err
	}
	return n.readDir()
}

func (n *mnode) readDir() ([]DirEntry, error) {
	switch {
	case !n.isDir():
		return nil, syscall.ENOTDIR
	case n.nlink == 0:
		return nil, syscall.ENOENT // iterate_dir on a removed directory
	}
	var out []DirEntry
	for name, k := range n.kids {
		out = append(out, DirEntry{Name: name, Type: k.mode & syscall.S_IFMT})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Unlink implements Target.
func (m *Model) Unlink(path string) error {
	dir, name, err := m.lookupParent(path)
	if err != nil {
		return err
	}
	if dir == nil {
		return syscall.EISDIR
	}
	n, ok := dir.kids[name]
	switch {
	case !ok:
		return syscall.ENOENT
	case n.isDir():
		return syscall.EISDIR
	}
	delete(dir.kids, name)
	n.nlink--
	return nil
}

// Rmdir implements Target.
func (m *Model) Rmdir(path string) error {
	dir, name, err := m.lookupParent(path)
	if err != nil {
		return err
	}
	if dir == nil {
		return syscall.EBUSY
	}
	n, ok := dir.kids[name]
	switch {
	case !ok:
		return syscall.ENOENT
	case !n.isDir():
		return syscall.ENOTDIR
	case len(n.kids) > 0:
		return syscall.ENOTEMPTY
	}
	delete(dir.kids, name)
	dir.nlink--
	n.nlink = 0
	return nil
}

// isAncestor reports whether directory a is d or above it.
func (m *Model) isAncestor(a, d *mnode) bool {
	if a == d {
		return true
	}
	for _, k := range a.kids {
		if k.isDir() && m.isAncestor(k, d) {
			return true
		}
	}
	return false
}

// Rename implements Target, in do_renameat2's order: flags, both parents,
// the source (ENOENT), NOREPLACE (EEXIST) and EXCHANGE (ENOENT) against
// the target, the lock_rename trap (source above the target's directory:
// EINVAL; target above the source's directory: ENOTEMPTY, or EINVAL for an
// exchange), same inode (nothing to do), then the type checks of
// may_delete and the emptiness of a replaced directory.
func (m *Model) Rename(oldpath, newpath string, flags uint32) error {
	const noReplace, exchange = 1, 2
	if flags&^(noReplace|exchange) != 0 || flags == noReplace|exchange {
		return syscall.EINVAL
	}
	od, on, err := m.lookupParent(oldpath)
	if err != nil {
		return err
	}
	nd, nn, err := m.lookupParent(newpath)
	if err != nil {
		return err
	}
	if od == nil || nd == nil {
		return syscall.EBUSY
	}
	src, ok := od.kids[on]
	if !ok {
		return syscall.ENOENT
	}
	dst := nd.kids[nn]
	switch {
	case flags&noReplace != 0 && dst != nil:
		return syscall.EEXIST
	case flags&exchange != 0 && dst == nil:
		return syscall.ENOENT
	}
	if od != nd {
		if src.isDir() && m.isAncestor(src, nd) {
			return syscall.EINVAL
		}
		if dst != nil && dst.isDir() && m.isAncestor(dst, od) {
			if flags&exchange != 0 {
				return syscall.EINVAL
			}
			return syscall.ENOTEMPTY
		}
	}
	if dst == src {
		return nil
	}
	if flags&exchange != 0 {
		od.kids[on], nd.kids[nn] = dst, src
		if od != nd && src.isDir() != dst.isDir() {
			if src.isDir() {
				od.nlink--
				nd.nlink++
			} else {
				od.nlink++
				nd.nlink--
			}
		}
		return nil
	}
	if dst != nil {
		switch {
		case src.isDir() && !dst.isDir():
			return syscall.ENOTDIR
		case !src.isDir() && dst.isDir():
			return syscall.EISDIR
		case dst.isDir() && len(dst.kids) > 0:
			return syscall.ENOTEMPTY
		}
		if dst.isDir() {
			nd.nlink--
			dst.nlink = 0
		} else {
			dst.nlink--
		}
	}
	delete(od.kids, on)
	nd.kids[nn] = src
	if src.isDir() {
		od.nlink--
		nd.nlink++
	}
	return nil
}

// Link implements Target (EEXIST before EPERM for a directory, as
// do_linkat creates the new name before vfs_link looks at the inode).
func (m *Model) Link(oldpath, newpath string) error {
	n, err := m.lookup(oldpath)
	if err != nil {
		return err
	}
	nd, nn, err := m.lookupParent(newpath)
	if err != nil {
		return err
	}
	if nd == nil || nd.kids[nn] != nil {
		return syscall.EEXIST
	}
	if n.isDir() {
		return syscall.EPERM
	}
	nd.kids[nn] = n
	n.nlink++
	return nil
}

// Symlink implements Target: not modelled.
func (m *Model) Symlink(target, newpath string) error { return syscall.ENOSYS }

// Readlink implements Target: there are no symlinks.
func (m *Model) Readlink(path string) (string, error) {
	if _, err := m.lookup(path); err != nil {
		return "", err
	}
	return "", syscall.EINVAL
}

// Chmod implements Target.
func (m *Model) Chmod(path string, mode uint32) error {
	n, err := m.lookup(path)
	if err != nil {
		return err
	}
	n.mode = n.mode&syscall.S_IFMT | mode&0o7777
	return nil
}

// Chown implements Target (chown clears set-user-ID, and set-group-ID
// with group execute, on non-directories, even as root).
func (m *Model) Chown(path string, uid, gid int) error {
	n, err := m.lookup(path)
	if err != nil {
		return err
	}
	if uid >= 0 {
		n.uid = uint32(uid)
	}
	if gid >= 0 {
		n.gid = uint32(gid)
	}
	if !n.isDir() {
		n.mode &^= syscall.S_ISUID
		if n.mode&syscall.S_IXGRP != 0 {
			n.mode &^= syscall.S_ISGID
		}
	}
	return nil
}

// Utimes implements Target.
func (m *Model) Utimes(path string, atime, mtime time.Time) error {
	n, err := m.lookup(path)
	if err != nil {
		return err
	}
	n.atime, n.mtime = atime, mtime
	return nil
}

// Truncate implements Target (a negative size is EINVAL before the
// lookup, as in do_sys_truncate).
func (m *Model) Truncate(path string, size int64) error {
	if size < 0 {
		return syscall.EINVAL
	}
	n, err := m.lookup(path)
	switch {
	case err != nil:
		return err
	case n.isDir():
		return syscall.EISDIR
	}
	n.setSize(size)
	return nil
}

func (n *mnode) setSize(size int64) {
	if size <= int64(len(n.data)) {
		n.data = n.data[:size:size]
		return
	}
	n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
}

// Getxattr implements Target: not modelled.
func (m *Model) Getxattr(path, name string) ([]byte, error) { return nil, syscall.ENOSYS }

// Setxattr implements Target: not modelled.
func (m *Model) Setxattr(path, name string, value []byte, flags int) error { return syscall.ENOSYS }

// Listxattr implements Target: not modelled.
func (m *Model) Listxattr(path string) ([]string, error) { return nil, syscall.ENOSYS }

// Removexattr implements Target: not modelled.
func (m *Model) Removexattr(path, name string) error { return syscall.ENOSYS }

// modelHandle is an open model file: it keeps its inode, so it works on
// after the last name is gone.
type modelHandle struct {
	m      *Model
	n      *mnode
	flags  int
	pos    int64
	closed bool
}

func (h *modelHandle) readable() bool { return h.flags&syscall.O_ACCMODE != syscall.O_WRONLY }
func (h *modelHandle) writable() bool { return h.flags&syscall.O_ACCMODE != syscall.O_RDONLY }

// misaligned applies O_DIRECT's alignment rule.
func (h *modelHandle) misaligned(p []byte, off int64) bool {
	a := h.m.DirectAlign
	return h.flags&syscall.O_DIRECT != 0 && (off%a != 0 || int64(len(p))%a != 0)
}

func (h *modelHandle) read(p []byte, off int64) (int, error) {
	switch {
	case h.closed || !h.readable():
		return 0, syscall.EBADF
	case h.n.isDir():
		return 0, syscall.EISDIR
	case len(p) == 0, off >= int64(len(h.n.data)):
		// Before O_DIRECT's alignment check, as in ext4_file_read_iter
		// and iomap_dio_rw.
		return 0, nil
	case h.misaligned(p, off):
		return 0, syscall.EINVAL
	}
	return copy(p, h.n.data[off:]), nil
}

// write is the common part of pwrite and write: the append position, the
// zero-length no-op (before O_DIRECT's alignment check, as
// generic_write_checks returns first), then the alignment.
func (h *modelHandle) write(p []byte, off int64) (n int, at int64, err error) {
	if h.closed || !h.writable() {
		return 0, off, syscall.EBADF
	}
	if len(p) == 0 {
		return 0, off, nil
	}
	if h.flags&syscall.O_APPEND != 0 {
		off = int64(len(h.n.data))
	}
	if h.misaligned(p, off) {
		return 0, off, syscall.EINVAL
	}
	if end := off + int64(len(p)); end > int64(len(h.n.data)) {
		h.n.setSize(end)
	}
	copy(h.n.data[off:], p)
	return len(p), off, nil
}

// Pread: a negative offset is EINVAL before the descriptor is looked at.
func (h *modelHandle) Pread(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	return h.read(p, off)
}

func (h *modelHandle) Pwrite(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	n, _, err := h.write(p, off)
	return n, err
}

// atomicWriteMax is the largest untorn write of sluice (atomic.go's
// atomicWriteMax) and of XFS's software atomic writes on the oracle's
// 512 MiB images.
const atomicWriteMax = 1 << 20

// PwriteAtomic applies sluice's RWFAtomic rules (atomicWriteCheck), which
// are those of pwritev2 on Linux 6.18's XFS in their order but for
// appends, then writes as Pwrite does: EINVAL for a negative offset
// (do_pwritev), EBADF for a descriptor not open for writing; a zero-length
// write does nothing (vfs_writev returns before the flags are looked at);
// EOPNOTSUPP without atomic writes (kiocb_set_rw_flags); EINVAL for a
// length outside [AtomicUnitMin, AtomicUnitMax] (xfs_file_write_iter),
// then for one that is not a power of two or an offset not aligned to it
// (generic_atomic_write_valid); EOPNOTSUPP for a buffered file. An append
// (O_APPEND) is EINVAL after the length checks: sluice takes none, where
// XFS checks the alignment of the offset passed (not of EOF, which
// generic_write_checks substitutes later) and appends.
func (h *modelHandle) PwriteAtomic(p []byte, off int64) (int, error) {
	n := int64(len(p))
	switch {
	case off < 0:
		return 0, syscall.EINVAL
	case h.closed || !h.writable():
		return 0, syscall.EBADF
	case n == 0:
		return 0, nil
	case h.m.AtomicUnitMax == 0:
		return 0, syscall.EOPNOTSUPP
	case n < h.m.AtomicUnitMin || n > h.m.AtomicUnitMax:
		return 0, syscall.EINVAL
	case n&(n-1) != 0:
		return 0, syscall.EINVAL
	case h.flags&syscall.O_APPEND != 0:
		return 0, syscall.EINVAL
	case off%n != 0:
		return 0, syscall.EINVAL
	case h.flags&syscall.O_DIRECT == 0:
		return 0, syscall.EOPNOTSUPP
	}
	return h.Pwrite(p, off)
}

func (h *modelHandle) Read(p []byte) (int, error) {
	n, err := h.read(p, h.pos)
	h.pos += int64(n)
	return n, err
}

func (h *modelHandle) Write(p []byte) (int, error) {
	n, at, err := h.write(p, h.pos)
	if n > 0 {
		h.pos = at + int64(n)
	}
	return n, err
}

func (h *modelHandle) Seek(off int64, whence int) (int64, error) {
	if h.closed {
		return 0, syscall.EBADF
	}
	var pos int64
	switch whence {
	case 0:
		pos = off
	case 1:
		pos = h.pos + off
	case 2:
		pos = int64(len(h.n.data)) + off
	default:
		return 0, syscall.ENOSYS // SEEK_DATA/SEEK_HOLE are not modelled
	}
	if pos < 0 {
		return 0, syscall.EINVAL
	}
	h.pos = pos
	return pos, nil
}

// Truncate is ftruncate(2): EINVAL for a negative size before the
// descriptor is looked at, then EBADF, then EINVAL for a descriptor not
// open for writing or not on a regular file.
func (h *modelHandle) Truncate(size int64) error {
	switch {
	case size < 0:
		return syscall.EINVAL
	case h.closed:
		return syscall.EBADF
	case !h.writable() || !h.n.isReg():
		return syscall.EINVAL
	}
	h.n.setSize(size)
	return nil
}

// Fallocate follows vfs_fallocate's order: EBADF for a closed descriptor,
// EINVAL for the range, EOPNOTSUPP for the mode, EBADF for a descriptor
// not open for writing, EFBIG past the largest size; then
// xfs_file_fallocate's rules for COLLAPSE_RANGE and INSERT_RANGE.
// UNSHARE_RANGE changes no byte: it is mode 0 (allocate, and extend
// without KEEP_SIZE).
func (h *modelHandle) Fallocate(mode uint32, off, n int64) error {
	const keep, punch, collapse, zero, insert, unshare = 0x01, 0x02, 0x08, 0x10, 0x20, 0x40
	switch {
	case h.closed:
		return syscall.EBADF
	case off < 0 || n <= 0:
		return syscall.EINVAL
	}
	switch mode &^ keep {
	case 0, zero, unshare:
	case punch:
		if mode&keep == 0 {
			return syscall.EOPNOTSUPP
		}
	case collapse, insert:
		if mode&keep != 0 {
			return syscall.EOPNOTSUPP
		}
	default:
		return syscall.EOPNOTSUPP
	}
	switch {
	case !h.writable():
		return syscall.EBADF
	case h.n.isDir():
		return syscall.EISDIR
	case off > maxBytes-n:
		return syscall.EFBIG
	}
	end := off + n
	size := int64(len(h.n.data))
	bs := h.m.BlockSize
	switch mode &^ keep {
	case collapse:
		// xfs_falloc_collapse_range: reaching EOF would be a truncate.
		switch {
		case off%bs != 0 || n%bs != 0:
			return syscall.EINVAL
		case end >= size:
			return syscall.EINVAL
		}
		h.n.data = append(h.n.data[:off:off], h.n.data[end:]...)
		return nil
	case insert:
		// xfs_falloc_insert_range.
		switch {
		case off%bs != 0 || n%bs != 0:
			return syscall.EINVAL
		case maxBytes-size < n:
			return syscall.EFBIG
		case off >= size:
			return syscall.EINVAL
		}
		data := make([]byte, size+n)
		copy(data, h.n.data[:off])
		copy(data[end:], h.n.data[off:])
		h.n.data = data
		return nil
	}
	if mode&(punch|zero) != 0 && off < size {
		clear(h.n.data[off:min(end, size)])
	}
	if mode&keep == 0 && end > size {
		h.n.setSize(end)
	}
	return nil
}

// maxBytes is the largest file size (s_maxbytes, MAX_LFS_FILESIZE).
const maxBytes = 1<<63 - 1

// asModel returns the model handle h, or a closed one if h is none (a slot
// never opened).
func asModel(h Handle) *modelHandle {
	if mh, ok := h.(*modelHandle); ok {
		return mh
	}
	return &modelHandle{closed: true}
}

// verifyArea is remap_verify_area's range check: no negative offset or
// length, and no overflow of their sum.
func verifyArea(off, n int64) bool { return off >= 0 && n >= 0 && off <= maxBytes-n }

func roundUpTo(x, a int64) int64 { return (x + a - 1) / a * a }

// Clone is ioctl_file_clone with no range: CloneRange(src, 0, 0, 0).
func (h *modelHandle) Clone(src Handle) error { return h.CloneRange(src, 0, 0, 0) }

// CloneRange follows vfs_clone_file_range on XFS: EBADF for a closed
// descriptor; generic_file_rw_checks (EISDIR, EINVAL for a file that is
// not regular, EBADF unless src is readable and the destination writable
// and not O_APPEND); remap_verify_area for each file (EINVAL); then
// remapPrep. The bytes are copied, and the destination grows to
// dstOff+n if it is shorter.
func (h *modelHandle) CloneRange(src Handle, srcOff, dstOff, n int64) error {
	s := asModel(src)
	switch {
	case h.closed || s.closed:
		return syscall.EBADF
	case s.n.isDir() || h.n.isDir():
		return syscall.EISDIR
	case !s.n.isReg() || !h.n.isReg():
		return syscall.EINVAL
	case !s.readable() || !h.writable() || h.flags&syscall.O_APPEND != 0:
		return syscall.EBADF
	case !verifyArea(srcOff, n) || !verifyArea(dstOff, n):
		return syscall.EINVAL
	}
	n, err := h.m.remapPrep(s.n, h.n, srcOff, dstOff, n, false)
	if err != nil || n == 0 {
		return err
	}
	data := append([]byte(nil), s.n.data[srcOff:srcOff+n]...)
	if end := dstOff + n; end > int64(len(h.n.data)) {
		h.n.setSize(end)
	}
	copy(h.n.data[dstOff:], data)
	return nil
}

// remapPrep applies __generic_remap_file_range_prep's checks after the
// file types, in their order (generic_remap_checks, the dedupe compare,
// generic_remap_check_len), and returns the length to remap (0: nothing
// to do). A clone may not shorten the range (EINVAL); a dedupe may
// (REMAP_FILE_CAN_SHORTEN), and answers EBADE if the bytes differ.
func (m *Model) remapPrep(src, dst *mnode, srcOff, dstOff, n int64, dedupe bool) (int64, error) {
	bs := m.BlockSize
	ssize, dsize := int64(len(src.data)), int64(len(dst.data))
	// Zero length: a dedupe does nothing, a clone goes to EOF.
	if n == 0 {
		switch {
		case dedupe || srcOff == ssize:
			return 0, nil
		case srcOff > ssize:
			return 0, syscall.EINVAL
		}
		n = ssize - srcOff
	}
	switch {
	case srcOff%bs != 0 || dstOff%bs != 0:
		return 0, syscall.EINVAL
	case dedupe && (srcOff >= ssize || srcOff+n > ssize || dstOff >= dsize || dstOff+n > dsize):
		return 0, syscall.EINVAL
	case srcOff >= ssize:
		return 0, syscall.EINVAL
	case dstOff >= maxBytes: // generic_write_check_limits
		return 0, syscall.EFBIG
	}
	count := min(n, ssize-srcOff, maxBytes-dstOff)
	// The EOF rule: a range that ends at the source's EOF (and, for a
	// dedupe, at the destination's) takes its partial last block whole;
	// any other is cut to whole blocks.
	var bcount int64
	if srcOff+count == ssize && (!dedupe || dstOff+count == dsize) {
		bcount = roundUpTo(ssize, bs) - srcOff
	} else {
		count = count / bs * bs
		bcount = count
	}
	switch {
	case src == dst && dstOff+bcount > srcOff && dstOff < srcOff+bcount:
		return 0, syscall.EINVAL
	case count != n && !dedupe:
		return 0, syscall.EINVAL
	case count == 0:
		return 0, nil
	case dedupe && !bytes.Equal(src.data[srcOff:srcOff+count], dst.data[dstOff:dstOff+count]):
		return 0, syscall.EBADE
	}
	// generic_remap_check_len: a partial last block may only land at or
	// past the destination's EOF.
	if count%bs != 0 && dstOff+count < dsize {
		if !dedupe {
			return 0, syscall.EINVAL
		}
		count = count / bs * bs
	}
	return count, nil
}

// DedupeRange follows vfs_dedupe_file_range with one destination: for the
// source EBADF, EINVAL unless it is open for reading, EISDIR, EINVAL for
// the range (remap_verify_area, past EOF); the length cut to 1 GiB; then,
// for the destination (vfs_dedupe_file_range_one), EBADF, EINVAL for the
// range, EISDIR, success for length 0, then remapPrep. No byte changes;
// bytes_deduped is the length asked for (as cut), not the part shared.
func (h *modelHandle) DedupeRange(srcOff, n int64, dst Handle, dstOff int64) (int64, error) {
	d := asModel(dst)
	switch {
	case h.closed:
		return 0, syscall.EBADF
	case !h.readable():
		return 0, syscall.EINVAL
	case h.n.isDir():
		return 0, syscall.EISDIR
	case !h.n.isReg():
		return 0, syscall.EINVAL
	case !verifyArea(srcOff, n) || srcOff+n > int64(len(h.n.data)):
		return 0, syscall.EINVAL
	}
	n = min(n, 1<<30)
	switch {
	case d.closed:
		return 0, syscall.EBADF
	case !verifyArea(dstOff, n):
		return 0, syscall.EINVAL
	case d.n.isDir():
		return 0, syscall.EISDIR
	case n == 0:
		return 0, nil
	case !d.n.isReg():
		return 0, syscall.EINVAL
	}
	if _, err := h.m.remapPrep(h.n, d.n, srcOff, dstOff, n, true); err != nil {
		return 0, err
	}
	return n, nil
}

// ExchangeRange follows xfs_ioc_exchange_range and
// xfs_exchange_range_checks: EBADF for a closed file2 (the handle), EINVAL
// for unknown flags, EBADF for a closed file1, EISDIR, EINVAL for a file
// that is not regular, EBADF unless both are open O_RDWR without
// O_APPEND, EINVAL for the ranges (negative or overflowing unless
// TO_EOF, an offset past EOF, misaligned offsets, a range past EOF
// without TO_EOF, a partial block not at EOF, overlap within one file).
// TO_EOF takes the longer of the two ranges to EOF and ends each file
// where the other's EOF lands in it (off1+size2-off2, off2+size1-off1),
// as Linux 6.18.44 does (earlier kernels swapped the sizes literally
// whatever the offsets; the bytes past a file's new EOF go). Whole blocks are
// exchanged, so a partial last block carries the zeros past EOF with it.
func (h *modelHandle) ExchangeRange(file1 Handle, off1, off2, n int64, flags uint64) error {
	const toEOF, dryRun, file1Written = ExchangeToEOF, ExchangeDryRun, ExchangeFile1Written
	f1 := asModel(file1)
	rdwr := func(x *modelHandle) bool {
		return x.flags&syscall.O_ACCMODE == syscall.O_RDWR && x.flags&syscall.O_APPEND == 0
	}
	switch {
	case h.closed:
		return syscall.EBADF
	case flags&^0xf != 0:
		return syscall.EINVAL
	case f1.closed:
		return syscall.EBADF
	case f1.n.isDir() || h.n.isDir():
		return syscall.EISDIR
	case !f1.n.isReg() || !h.n.isReg():
		return syscall.EINVAL
	case !rdwr(f1) || !rdwr(h):
		return syscall.EBADF
	case flags&toEOF == 0 && (!verifyArea(off1, n) || !verifyArea(off2, n)):
		return syscall.EINVAL
	}
	n1, n2 := f1.n, h.n
	bs := h.m.BlockSize
	size1, size2 := int64(len(n1.data)), int64(len(n2.data))
	if off1 > size1 || off2 > size2 {
		return syscall.EINVAL
	}
	if flags&toEOF != 0 {
		n = max(size1-off1, size2-off2)
		if !verifyArea(off1, n) || !verifyArea(off2, n) {
			return syscall.EINVAL
		}
	}
	switch {
	case off1%bs != 0 || off2%bs != 0:
		return syscall.EINVAL
	case off1 > maxBytes-n || off2 > maxBytes-n:
		return syscall.EINVAL
	case flags&toEOF == 0 && (off1+n > size1 || off2+n > size2):
		return syscall.EINVAL
	}
	var blen int64
	switch {
	case off1+n == size1:
		blen = roundUpTo(size1, bs) - off1
	case off2+n == size2:
		blen = roundUpTo(size2, bs) - off2
	case n%bs != 0:
		return syscall.EINVAL
	default:
		blen = n
	}
	switch {
	case n1 == n2 && off2+blen > off1 && off1+blen > off2:
		return syscall.EINVAL
	case n%bs != 0 && (off2+n < size2 || off1+n < size1):
		return syscall.EINVAL
	case flags&dryRun != 0:
		return nil
	case flags&file1Written != 0:
		return syscall.ENOSYS
	}
	// Whole blocks change places: blen is n rounded up to a block.
	grow := func(d []byte, size int64) []byte {
		out := make([]byte, max(int64(len(d)), size))
		copy(out, d)
		return out
	}
	a := grow(n1.data, off1+blen)
	b := a
	if n2 != n1 {
		b = grow(n2.data, off2+blen)
	} else {
		a = grow(a, off2+blen)
		b = a
	}
	tmp := append([]byte(nil), a[off1:off1+blen]...)
	copy(a[off1:], b[off2:off2+blen])
	copy(b[off2:], tmp)
	new1, new2 := size1, size2
	if flags&toEOF != 0 {
		new1, new2 = off1+size2-off2, off2+size1-off1
	}
	n1.data = a
	n1.setSize(new1)
	if n2 != n1 {
		n2.data = b
		n2.setSize(new2)
	}
	return nil
}

func (h *modelHandle) sync() error {
	if h.closed {
		return syscall.EBADF
	}
	return nil
}

func (h *modelHandle) Fsync() error     { return h.sync() }
func (h *modelHandle) Fdatasync() error { return h.sync() }

func (h *modelHandle) Stat() (Stat, error) {
	if h.closed {
		return Stat{}, syscall.EBADF
	}
	return h.n.stat(), nil
}

func (h *modelHandle) ReadDir() ([]DirEntry, error) {
	if h.closed {
		return nil, syscall.EBADF
	}
	return h.n.readDir()
}

func (h *modelHandle) Close() error {
	if h.closed {
		return syscall.EBADF
	}
	h.closed = true
	return nil
}
