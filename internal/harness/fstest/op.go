package fstest

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sluicefs/sluice/device"
)

// OpKind names one call of Target or Handle.
type OpKind uint8

// The operations. Handle operations name a slot (Op.Slot) of the Runner;
// OpOpen fills it.
const (
	OpOpen        OpKind = iota // Slot = Open(Path, Flags, Perm)
	OpClose                     // Close(Slot)
	OpPread                     // Pread(Len bytes at Off)
	OpPwrite                    // Pwrite(Len bytes of pattern Seed at Off)
	OpRead                      // Read(Len bytes)
	OpWrite                     // Write(Len bytes of pattern Seed)
	OpSeek                      // Seek(Off, whence Flags)
	OpFtruncate                 // Truncate(Off)
	OpFallocate                 // Fallocate(mode Flags, Off, Len)
	OpFsync                     // Fsync
	OpFdatasync                 // Fdatasync
	OpFstat                     // Stat
	OpFreadDir                  // ReadDir on the handle
	OpStat                      // Stat(Path)
	OpLstat                     // Lstat(Path)
	OpMkdir                     // Mkdir(Path, Perm)
	OpReadDir                   // ReadDir(Path)
	OpUnlink                    // Unlink(Path)
	OpRmdir                     // Rmdir(Path)
	OpRename                    // Rename(Path, Path2, Flags)
	OpLink                      // Link(Path, Path2)
	OpSymlink                   // Symlink(target Path, link Path2)
	OpReadlink                  // Readlink(Path)
	OpChmod                     // Chmod(Path, Perm)
	OpChown                     // Chown(Path, Uid, Gid)
	OpUtimes                    // Utimes(Path, Atime, Mtime)
	OpTruncate                  // Truncate(Path, Off)
	OpGetxattr                  // Getxattr(Path, Name)
	OpSetxattr                  // Setxattr(Path, Name, Value, Flags)
	OpListxattr                 // Listxattr(Path)
	OpRemovexattr               // Removexattr(Path, Name)
	OpRemount                   // close every handle, then Remount if the target can
	// The reflink calls name a second slot (Op.Slot2) and give it Off2;
	// Slot is the descriptor the ioctl is issued on.
	OpClone         // FICLONE on Slot (the destination) from Slot2
	OpCloneRange    // FICLONERANGE: Slot2's [Off2, Off2+Len) into Slot at Off
	OpDedupeRange   // FIDEDUPERANGE: Slot's [Off, Off+Len) into Slot2 at Off2
	OpExchangeRange // XFS_IOC_EXCHANGE_RANGE on Slot (file2, at Off) with Slot2 (file1, at Off2), Flags
	// OpPwriteAtomic is an untorn write: pwritev2(2) with RWF_ATOMIC
	// (sluice.RWFAtomic), one buffer.
	OpPwriteAtomic // PwriteAtomic(Len bytes of pattern Seed at Off)
	numOpKinds
)

var opNames = [numOpKinds]string{
	"open", "close", "pread", "pwrite", "read", "write", "seek", "ftruncate", "fallocate",
	"fsync", "fdatasync", "fstat", "freaddir", "stat", "lstat", "mkdir", "readdir", "unlink",
	"rmdir", "rename", "link", "symlink", "readlink", "chmod", "chown", "utimes", "truncate",
	"getxattr", "setxattr", "listxattr", "removexattr", "remount",
	"clone", "clonerange", "dedupe", "exchange", "pwrite-atomic",
}

func (k OpKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op%d", k)
}

// Op is one call with its arguments. Which fields matter depends on Kind
// (see the OpKind constants).
type Op struct {
	Kind OpKind
	Slot int
	// Slot2 is the other file of a reflink call.
	Slot2 int
	Path  string
	Path2 string
	// Flags: open flags, rename flags, fallocate mode, xattr flags,
	// seek whence or exchange-range flags.
	Flags int
	Perm  uint32
	Off   int64
	// Off2 is the offset in Slot2's file.
	Off2 int64
	Len  int64
	// Seed selects the bytes written (see Pattern).
	Seed byte
	// Misalign offsets the I/O buffer this many bytes from the 4 KiB
	// alignment of device.AlignedBuf (to provoke O_DIRECT's EINVAL).
	Misalign int
	// Name and Value are the xattr's.
	Name  string
	Value []byte
	Uid   int
	Gid   int
	Atime time.Time
	Mtime time.Time
	// Times makes a stat result show atime and mtime.
	Times bool
}

func (op Op) String() string {
	var b strings.Builder
	b.WriteString(op.Kind.String())
	switch op.Kind {
	case OpOpen:
		fmt.Fprintf(&b, " h%d %q %s %#o", op.Slot, op.Path, OpenFlagsString(op.Flags), op.Perm)
	case OpClose, OpFsync, OpFdatasync, OpFstat, OpFreadDir:
		fmt.Fprintf(&b, " h%d", op.Slot)
	case OpPread:
		fmt.Fprintf(&b, " h%d off=%d len=%d", op.Slot, op.Off, op.Len)
	case OpPwrite, OpPwriteAtomic:
		fmt.Fprintf(&b, " h%d off=%d len=%d seed=%d", op.Slot, op.Off, op.Len, op.Seed)
	case OpRead:
		fmt.Fprintf(&b, " h%d len=%d", op.Slot, op.Len)
	case OpWrite:
		fmt.Fprintf(&b, " h%d len=%d seed=%d", op.Slot, op.Len, op.Seed)
	case OpSeek:
		fmt.Fprintf(&b, " h%d off=%d whence=%d", op.Slot, op.Off, op.Flags)
	case OpFtruncate:
		fmt.Fprintf(&b, " h%d size=%d", op.Slot, op.Off)
	case OpFallocate:
		fmt.Fprintf(&b, " h%d mode=%s off=%d len=%d", op.Slot, FallocModeString(op.Flags), op.Off, op.Len)
	case OpMkdir, OpChmod:
		fmt.Fprintf(&b, " %q %#o", op.Path, op.Perm)
	case OpRename:
		fmt.Fprintf(&b, " %q %q flags=%d", op.Path, op.Path2, op.Flags)
	case OpLink, OpSymlink:
		fmt.Fprintf(&b, " %q %q", op.Path, op.Path2)
	case OpChown:
		fmt.Fprintf(&b, " %q %d %d", op.Path, op.Uid, op.Gid)
	case OpUtimes:
		fmt.Fprintf(&b, " %q %d %d", op.Path, op.Atime.UnixNano(), op.Mtime.UnixNano())
	case OpTruncate:
		fmt.Fprintf(&b, " %q size=%d", op.Path, op.Off)
	case OpGetxattr, OpRemovexattr:
		fmt.Fprintf(&b, " %q %q", op.Path, op.Name)
	case OpSetxattr:
		fmt.Fprintf(&b, " %q %q %q flags=%d", op.Path, op.Name, op.Value, op.Flags)
	case OpClone:
		fmt.Fprintf(&b, " h%d <- h%d", op.Slot, op.Slot2)
	case OpCloneRange:
		fmt.Fprintf(&b, " h%d off=%d <- h%d off=%d len=%d", op.Slot, op.Off, op.Slot2, op.Off2, op.Len)
	case OpDedupeRange:
		fmt.Fprintf(&b, " h%d off=%d -> h%d off=%d len=%d", op.Slot, op.Off, op.Slot2, op.Off2, op.Len)
	case OpExchangeRange:
		fmt.Fprintf(&b, " h%d off=%d <-> h%d off=%d len=%d flags=%s", op.Slot, op.Off, op.Slot2, op.Off2, op.Len, ExchangeFlagsString(op.Flags))
	case OpRemount:
	default:
		fmt.Fprintf(&b, " %q", op.Path)
	}
	if op.Misalign != 0 {
		fmt.Fprintf(&b, " misalign=%d", op.Misalign)
	}
	return b.String()
}

// OpenFlagsString renders open(2) flags.
func OpenFlagsString(f int) string {
	var parts []string
	switch f & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		parts = append(parts, "O_RDONLY")
	case syscall.O_WRONLY:
		parts = append(parts, "O_WRONLY")
	case syscall.O_RDWR:
		parts = append(parts, "O_RDWR")
	default:
		parts = append(parts, "O_ACCMODE")
	}
	rest := f &^ syscall.O_ACCMODE
	for _, x := range []struct {
		bit  int
		name string
	}{
		{syscall.O_CREAT, "O_CREAT"}, {syscall.O_EXCL, "O_EXCL"}, {syscall.O_TRUNC, "O_TRUNC"},
		{syscall.O_APPEND, "O_APPEND"}, {syscall.O_DIRECT, "O_DIRECT"}, {syscall.O_DIRECTORY, "O_DIRECTORY"},
		{syscall.O_NOFOLLOW, "O_NOFOLLOW"}, {syscall.O_SYNC, "O_SYNC"}, {syscall.O_DSYNC, "O_DSYNC"},
	} {
		if rest&x.bit == x.bit {
			parts = append(parts, x.name)
			rest &^= x.bit
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", rest))
	}
	return strings.Join(parts, "|")
}

// FallocModeString renders fallocate(2) modes.
func FallocModeString(m int) string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for _, x := range []struct {
		bit  int
		name string
	}{
		{0x01, "KEEP_SIZE"}, {0x02, "PUNCH_HOLE"}, {0x08, "COLLAPSE_RANGE"}, {0x10, "ZERO_RANGE"},
		{0x20, "INSERT_RANGE"}, {0x40, "UNSHARE_RANGE"},
	} {
		if m&x.bit != 0 {
			parts = append(parts, x.name)
			m &^= x.bit
		}
	}
	if m != 0 {
		parts = append(parts, fmt.Sprintf("%#x", m))
	}
	return strings.Join(parts, "|")
}

// XFS_IOC_EXCHANGE_RANGE flags (xfs_fs.h; sluice.Exchange* have the same
// values).
const (
	ExchangeToEOF        = 0x1
	ExchangeDsync        = 0x2
	ExchangeDryRun       = 0x4
	ExchangeFile1Written = 0x8
)

// ExchangeFlagsString renders XFS_IOC_EXCHANGE_RANGE flags.
func ExchangeFlagsString(f int) string {
	if f == 0 {
		return "0"
	}
	var parts []string
	for _, x := range []struct {
		bit  int
		name string
	}{{ExchangeToEOF, "TO_EOF"}, {ExchangeDsync, "DSYNC"}, {ExchangeDryRun, "DRY_RUN"}, {ExchangeFile1Written, "FILE1_WRITTEN"}} {
		if f&x.bit != 0 {
			parts = append(parts, x.name)
			f &^= x.bit
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("%#x", f))
	}
	return strings.Join(parts, "|")
}

// Pattern returns n bytes derived from seed, none of them zero (so that a
// zero-fill bug cannot hide behind written zeros), in a buffer from
// device.AlignedBuf(n+misalign) starting misalign bytes in.
func Pattern(n int, seed byte, misalign int) []byte {
	b := device.AlignedBuf(n + misalign)[misalign:]
	for i := range b {
		v := byte(i*7+i>>9) ^ seed*37
		if v == 0 {
			v = seed | 1
		}
		b[i] = v
	}
	return b
}

// Result is the outcome of an Op: what the tests compare between targets.
type Result struct {
	Errno syscall.Errno
	// N is the byte count of a read or write, the offset Seek returned,
	// or a dedupe's bytes_deduped.
	N    int64
	Data []byte // bytes read, an xattr value, a symlink target
	// Stat is set by the stat operations.
	Stat *Stat
	// Names lists a directory ("name:type") or xattr names.
	Names []string
	// times says String shows Stat's atime and mtime.
	times bool
}

// String renders r canonically: two targets agree on an op when the
// strings are equal. Sizes are shown for regular files and symlinks only
// (a directory's size is the file system's business) and never Blocks;
// times only when the op asked for them.
func (r Result) String() string {
	var b strings.Builder
	if r.Errno != 0 {
		b.WriteString(errnoName(r.Errno))
	} else {
		b.WriteString("ok")
	}
	if r.N != 0 {
		fmt.Fprintf(&b, " n=%d", r.N)
	}
	if r.Data != nil {
		b.WriteString(" data=" + describeBytes(r.Data))
	}
	if r.Stat != nil {
		b.WriteString(" " + formatStat(*r.Stat, r.times))
	}
	if r.Names != nil {
		fmt.Fprintf(&b, " [%s]", strings.Join(r.Names, " "))
	}
	return b.String()
}

func formatStat(s Stat, times bool) string {
	out := fmt.Sprintf("%s %#o nlink=%d uid=%d gid=%d", typeName(s.Mode), s.Mode&0o7777, s.Nlink, s.Uid, s.Gid)
	if t := s.Type(); t == syscall.S_IFREG || t == syscall.S_IFLNK {
		out += fmt.Sprintf(" size=%d", s.Size)
	}
	if times {
		out += fmt.Sprintf(" atime=%d mtime=%d", s.Atime.UnixNano(), s.Mtime.UnixNano())
	}
	return out
}

// describeBytes shows short byte strings whole and longer ones as their
// length, a hash and where their zero and non-zero runs are.
func describeBytes(p []byte) string {
	if len(p) <= 32 {
		return fmt.Sprintf("%q", p)
	}
	h := fnv.New64a()
	h.Write(p)
	return fmt.Sprintf("len=%d fnv=%016x runs=%s", len(p), h.Sum64(), zeroRuns(p))
}

// zeroRuns describes p as alternating runs of non-zero (D) and zero (Z)
// bytes, e.g. "D0-4096,Z4096-8192", capped in length.
func zeroRuns(p []byte) string {
	var parts []string
	start := 0
	for i := 1; i <= len(p); i++ {
		if i == len(p) || (p[i] == 0) != (p[start] == 0) {
			k := "D"
			if p[start] == 0 {
				k = "Z"
			}
			parts = append(parts, fmt.Sprintf("%s%d-%d", k, start, i))
			start = i
			if len(parts) == 8 && i < len(p) {
				parts = append(parts, "...")
				break
			}
		}
	}
	return strings.Join(parts, ",")
}

func errnoName(e syscall.Errno) string {
	if e == NotErrno {
		return "NOT-AN-ERRNO"
	}
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno(%d)", int(e))
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO", syscall.ENXIO: "ENXIO",
	syscall.E2BIG: "E2BIG", syscall.EBADF: "EBADF", syscall.EAGAIN: "EAGAIN", syscall.EACCES: "EACCES",
	syscall.EBUSY: "EBUSY", syscall.EEXIST: "EEXIST", syscall.EXDEV: "EXDEV", syscall.ENODEV: "ENODEV",
	syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR", syscall.EINVAL: "EINVAL", syscall.EFBIG: "EFBIG",
	syscall.ENOSPC: "ENOSPC", syscall.ESPIPE: "ESPIPE", syscall.EROFS: "EROFS", syscall.EMLINK: "EMLINK",
	syscall.ERANGE: "ERANGE", syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.ENOSYS: "ENOSYS",
	syscall.ENOTEMPTY: "ENOTEMPTY", syscall.ELOOP: "ELOOP", syscall.ENODATA: "ENODATA",
	syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.EOVERFLOW: "EOVERFLOW",
	// FIDEDUPERANGE's FILE_DEDUPE_RANGE_DIFFERS (the kernel's -EBADE).
	syscall.EBADE: "EBADE(DIFFERS)",
}

// Runner applies Ops to one Target, keeping its open handles in numbered
// slots.
type Runner struct {
	T       Target
	handles []Handle
}

// NewRunner returns a Runner for t with no open handles.
func NewRunner(t Target) *Runner { return &Runner{T: t} }

// Handle returns the handle in slot i, or nil.
func (r *Runner) Handle(i int) Handle {
	if i < len(r.handles) {
		return r.handles[i]
	}
	return nil
}

// CloseAll closes every handle (a handle closed before stays closed: its
// second Close fails harmlessly) and empties the slots.
func (r *Runner) CloseAll() {
	for i, h := range r.handles {
		if h != nil {
			_ = h.Close()
		}
		r.handles[i] = nil
	}
}

// closedHandle is what an empty slot holds: every call fails with EBADF.
type closedHandle struct{}

func (closedHandle) Pread([]byte, int64) (int, error)     { return 0, syscall.EBADF }
func (closedHandle) Pwrite([]byte, int64) (int, error)    { return 0, syscall.EBADF }
func (closedHandle) Read([]byte) (int, error)             { return 0, syscall.EBADF }
func (closedHandle) Write([]byte) (int, error)            { return 0, syscall.EBADF }
func (closedHandle) Seek(int64, int) (int64, error)       { return 0, syscall.EBADF }
func (closedHandle) Truncate(int64) error                 { return syscall.EBADF }
func (closedHandle) Fallocate(uint32, int64, int64) error { return syscall.EBADF }
func (closedHandle) Fsync() error                         { return syscall.EBADF }
func (closedHandle) Fdatasync() error                     { return syscall.EBADF }
func (closedHandle) Stat() (Stat, error)                  { return Stat{}, syscall.EBADF }
func (closedHandle) ReadDir() ([]DirEntry, error)         { return nil, syscall.EBADF }
func (closedHandle) Close() error                         { return syscall.EBADF }
func (closedHandle) Clone(Handle) error                   { return syscall.EBADF }
func (closedHandle) CloneRange(Handle, int64, int64, int64) error {
	return syscall.EBADF
}
func (closedHandle) DedupeRange(int64, int64, Handle, int64) (int64, error) {
	return 0, syscall.EBADF
}
func (closedHandle) ExchangeRange(Handle, int64, int64, int64, uint64) error {
	return syscall.EBADF
}
func (closedHandle) PwriteAtomic([]byte, int64) (int, error) { return 0, syscall.EBADF }

// Apply runs op and returns its result. A handle op on a slot never
// opened sees a closed handle; one on a slot whose handle was closed
// calls the closed handle (the target answers EBADF itself). The second
// file of a reflink call is passed the same way: a closedHandle for a
// slot never opened, which the target treats as a closed descriptor.
func (r *Runner) Apply(op Op) Result {
	h := r.Handle(op.Slot)
	if h == nil {
		h = closedHandle{}
	}
	h2 := r.Handle(op.Slot2)
	if h2 == nil {
		h2 = closedHandle{}
	}
	t := r.T
	var res Result
	var err error
	switch op.Kind {
	case OpOpen:
		var nh Handle
		nh, err = t.Open(op.Path, op.Flags, op.Perm)
		if err == nil {
			for len(r.handles) <= op.Slot {
				r.handles = append(r.handles, nil)
			}
			if old := r.handles[op.Slot]; old != nil {
				_ = old.Close()
			}
			r.handles[op.Slot] = nh
		}
	case OpClose:
		err = h.Close()
	case OpPread, OpRead:
		buf := device.AlignedBuf(int(op.Len) + op.Misalign)[op.Misalign:]
		var n int
		if op.Kind == OpPread {
			n, err = h.Pread(buf, op.Off)
		} else {
			n, err = h.Read(buf)
		}
		res.N = int64(n)
		if err == nil {
			res.Data = buf[:n]
		}
	case OpPwrite, OpWrite, OpPwriteAtomic:
		buf := Pattern(int(op.Len), op.Seed, op.Misalign)
		var n int
		switch op.Kind {
		case OpPwrite:
			n, err = h.Pwrite(buf, op.Off)
		case OpPwriteAtomic:
			n, err = h.PwriteAtomic(buf, op.Off)
		default:
			n, err = h.Write(buf)
		}
		res.N = int64(n)
	case OpSeek:
		res.N, err = h.Seek(op.Off, op.Flags)
	case OpFtruncate:
		err = h.Truncate(op.Off)
	case OpFallocate:
		err = h.Fallocate(uint32(op.Flags), op.Off, op.Len)
	case OpFsync:
		err = h.Fsync()
	case OpFdatasync:
		err = h.Fdatasync()
	case OpFstat:
		var st Stat
		if st, err = h.Stat(); err == nil {
			res.Stat = &st
		}
	case OpFreadDir:
		var ents []DirEntry
		if ents, err = h.ReadDir(); err == nil {
			res.Names = entryNames(ents)
		}
	case OpStat, OpLstat:
		var st Stat
		if op.Kind == OpStat {
			st, err = t.Stat(op.Path)
		} else {
			st, err = t.Lstat(op.Path)
		}
		if err == nil {
			res.Stat = &st
		}
	case OpMkdir:
		err = t.Mkdir(op.Path, op.Perm)
	case OpReadDir:
		var ents []DirEntry
		if ents, err = t.ReadDir(op.Path); err == nil {
			res.Names = entryNames(ents)
		}
	case OpUnlink:
		err = t.Unlink(op.Path)
	case OpRmdir:
		err = t.Rmdir(op.Path)
	case OpRename:
		err = t.Rename(op.Path, op.Path2, uint32(op.Flags))
	case OpLink:
		err = t.Link(op.Path, op.Path2)
	case OpSymlink:
		err = t.Symlink(op.Path, op.Path2)
	case OpReadlink:
		var s string
		if s, err = t.Readlink(op.Path); err == nil {
			res.Data = []byte(s)
		}
	case OpChmod:
		err = t.Chmod(op.Path, op.Perm)
	case OpChown:
		err = t.Chown(op.Path, op.Uid, op.Gid)
	case OpUtimes:
		err = t.Utimes(op.Path, op.Atime, op.Mtime)
	case OpTruncate:
		err = t.Truncate(op.Path, op.Off)
	case OpGetxattr:
		var v []byte
		if v, err = t.Getxattr(op.Path, op.Name); err == nil {
			res.Data = append([]byte{}, v...)
		}
	case OpSetxattr:
		err = t.Setxattr(op.Path, op.Name, op.Value, op.Flags)
	case OpListxattr:
		var names []string
		if names, err = t.Listxattr(op.Path); err == nil {
			res.Names = append([]string{}, names...)
		}
	case OpRemovexattr:
		err = t.Removexattr(op.Path, op.Name)
	case OpRemount:
		r.CloseAll()
		if m, ok := t.(Remounter); ok {
			err = m.Remount()
		}
	case OpClone:
		err = h.Clone(h2)
	case OpCloneRange:
		err = h.CloneRange(h2, op.Off2, op.Off, op.Len)
	case OpDedupeRange:
		res.N, err = h.DedupeRange(op.Off, op.Len, h2, op.Off2)
	case OpExchangeRange:
		err = h.ExchangeRange(h2, op.Off2, op.Off, op.Len, uint64(op.Flags))
	default:
		panic(fmt.Sprintf("fstest: unknown op %d", op.Kind))
	}
	res.Errno = Errno(err)
	res.times = op.Times
	return res
}

func entryNames(ents []DirEntry) []string {
	names := make([]string, len(ents))
	for i, d := range ents {
		names[i] = d.Name + ":" + typeName(d.Type)
	}
	return names
}

// Tree describes everything reachable from the root of t, one line per
// name in depth-first name order: path, type, permission bits, link count,
// and the size and contents of regular files (a hash for long ones) or
// the target of symlinks. Two targets that hold the same tree give equal
// lines. Directory sizes and times are left out.
func Tree(t Target) ([]string, error) {
	var out []string
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := t.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("readdir %q: %w", dir, err)
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
		for _, d := range ents {
			p := dir + d.Name
			line, err := describePath(t, p)
			if err != nil {
				return err
			}
			if d.Type != 0 && typeName(d.Type) != strings.Fields(line)[1] {
				line += " (entry type " + typeName(d.Type) + ")"
			}
			out = append(out, line)
			if d.Type == syscall.S_IFDIR {
				if err := walk(p + "/"); err != nil {
					return err
				}
			}
		}
		return nil
	}
	root, err := describePath(t, "/")
	if err != nil {
		return nil, err
	}
	out = append(out, root)
	return out, walk("/")
}

func describePath(t Target, p string) (string, error) {
	st, err := t.Lstat(p)
	if err != nil {
		return "", fmt.Errorf("lstat %q: %w", p, err)
	}
	line := fmt.Sprintf("%s %s %#o nlink=%d", p, typeName(st.Mode), st.Mode&0o7777, st.Nlink)
	switch st.Type() {
	case syscall.S_IFREG:
		data, err := ReadFile(t, p)
		if err != nil {
			return "", err
		}
		line += fmt.Sprintf(" size=%d data=%s", st.Size, describeBytes(data))
		if int64(len(data)) != st.Size {
			line += fmt.Sprintf(" (read %d bytes)", len(data))
		}
	case syscall.S_IFLNK:
		s, err := t.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("readlink %q: %w", p, err)
		}
		line += " -> " + s
	}
	return line, nil
}

// ReadFile returns the contents of regular file p, read with pread in
// 64 KiB pieces until a zero-length read.
func ReadFile(t Target, p string) ([]byte, error) {
	h, err := t.Open(p, syscall.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", p, err)
	}
	defer h.Close()
	var data []byte
	buf := device.AlignedBuf(64 << 10)
	for {
		n, err := h.Pread(buf, int64(len(data)))
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", p, err)
		}
		if n == 0 {
			return data, nil
		}
		data = append(data, buf[:n]...)
	}
}
