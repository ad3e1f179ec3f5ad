package fstest

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

// EngineConfig describes a sluice file system on a memory data device and
// its metadata in an in-memory Pebble or in etcd.
type EngineConfig struct {
	// Name names the target in test output. The default value is
	// "sluice/" followed by the policy ("sluice-etcd/" with Etcd).
	Name string
	// DeviceBytes is the size of the (sparse) memory data device. The
	// default value is 64 MiB.
	DeviceBytes int64
	// IOUnit is the data device's I/O unit (memdev.Options.IOUnit): the
	// alignment O_DIRECT needs. The default value is 512.
	IOUnit int
	// BlockSize is the file-system block size
	// (volume.FormatOptions.BlockSize). The default value is 4096.
	BlockSize int
	// Options configures the engine. The default value is the zero
	// Options (every default).
	Options sluice.Options
	// Etcd, when set, keeps the metadata in etcd instead: NewEngine
	// formats the volume under Etcd.Prefix, which must hold no keys, and
	// every mount opens an etcdkv.KV with these options (give several
	// engines one Client and a Prefix each, so that one cluster serves
	// them all). The volume is attached as a test volume is
	// (volume.Attach): no ownership lease, no fence. The client's limits
	// (MaxTxnOps, MaxRequestBytes) must be the cluster's, which should be
	// etcdkv.VolumeMaxTxnOps and VolumeMaxRequestBytes. The default value
	// is nil: an in-memory Pebble (testvol, not crashable).
	Etcd *etcdkv.Options
}

// Engine is a Target over a sluice file system formatted on a memdev data
// device and an in-memory Pebble (testvol, not crashable) or etcd
// (EngineConfig.Etcd), through the engine's path API.
type Engine struct {
	name string
	mem  *memdev.Device // the data device. Immutable.
	// openKV opens the metadata store, at NewEngine and each Remount.
	// Immutable.
	openKV func() (meta.KV, error)
	opts   sluice.Options
	kv     meta.KV
	fs     *sluice.FS
	// past sums the counters of the file systems before the last Remount.
	past sluice.CounterValues
	// closed is a closed file: the second file of a reflink call whose
	// slot was never opened (closedFile).
	closed *sluice.File
}

var _ Target = (*Engine)(nil)
var _ Remounter = (*Engine)(nil)

// NewEngine formats and opens a file system as cfg says.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	tc := testvol.Config{DeviceBytes: cfg.DeviceBytes, IOUnit: cfg.IOUnit, BlockSize: cfg.BlockSize, NotCrashable: true}
	e := &Engine{name: cfg.Name, opts: cfg.Options}
	prefix := "sluice/"
	if cfg.Etcd != nil {
		o := *cfg.Etcd
		mem, err := formatEtcd(tc, o)
		if err != nil {
			return nil, err
		}
		e.mem = mem
		e.openKV = func() (meta.KV, error) { return etcdkv.Open(o) }
		prefix = "sluice-etcd/"
	} else {
		d, err := testvol.Format(tc)
		if err != nil {
			return nil, err
		}
		e.mem, e.openKV = d.Mem, d.OpenKV
	}
	if err := e.open(); err != nil {
		e.mem.Close()
		return nil, err
	}
	if e.name == "" {
		e.name = prefix + e.fs.Policy().String()
	}
	return e, nil
}

// formatEtcd makes a memory data device as tc says and formats a volume on
// it with its metadata in etcd under o.Prefix, which must hold no keys.
func formatEtcd(tc testvol.Config, o etcdkv.Options) (*memdev.Device, error) {
	tc.EnsureDefaults()
	kv, err := etcdkv.Open(o)
	if err != nil {
		return nil, err
	}
	defer kv.Close()
	mem, err := memdev.New(tc.DeviceBytes, memdev.Options{IOUnit: tc.IOUnit})
	if err != nil {
		return nil, err
	}
	if err := testvol.FormatOn(mem, kv, tc.BlockSize); err != nil {
		mem.Close()
		return nil, fmt.Errorf("etcd prefix %q: %w", o.Prefix, err)
	}
	return mem, nil
}

func (e *Engine) open() error {
	kv, err := e.openKV()
	if err != nil {
		return err
	}
	v, err := volume.Attach(e.mem, kv)
	if err != nil {
		kv.Close()
		return err
	}
	opts := e.opts
	fs, err := sluice.OpenVolume(v, &opts)
	if err != nil {
		kv.Close()
		return err
	}
	e.kv, e.fs = kv, fs
	return nil
}

// FS returns the file system (it changes at each Remount).
func (e *Engine) FS() *sluice.FS { return e.fs }

// Remount closes the file system cleanly and opens it again on the same
// devices. Handles must have been closed.
func (e *Engine) Remount() error {
	err := errors.Join(e.fs.Close(), e.kv.Close())
	e.past = e.Counters()
	e.fs, e.kv = nil, nil
	if err != nil {
		return fmt.Errorf("remount: closing: %w", err)
	}
	if err := e.open(); err != nil {
		return fmt.Errorf("remount: opening: %w", err)
	}
	return nil
}

// Counters returns the engine's counters (FS.Counters) summed over every
// mount since NewEngine.
func (e *Engine) Counters() sluice.CounterValues {
	out := sluice.CounterValues{}
	for k, v := range e.past {
		out[k] += v
	}
	if e.fs != nil {
		for k, v := range e.fs.Counters() {
			out[k] += v
		}
	}
	return out
}

// Close closes the file system and its devices.
func (e *Engine) Close() error {
	var err error
	if e.fs != nil {
		err = errors.Join(e.fs.Close(), e.kv.Close())
		e.fs, e.kv = nil, nil
	}
	return errors.Join(err, e.mem.Close())
}

// Name implements Target.
func (e *Engine) Name() string { return e.name }

// Open implements Target.
func (e *Engine) Open(path string, flag int, perm uint32) (Handle, error) {
	f, err := e.fs.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return engineHandle{f: f, e: e}, nil
}

// Stat implements Target.
func (e *Engine) Stat(path string) (Stat, error) {
	a, err := e.fs.Stat(path)
	return statOfAttr(a), err
}

// Lstat implements Target.
func (e *Engine) Lstat(path string) (Stat, error) {
	a, err := e.fs.Lstat(path)
	return statOfAttr(a), err
}

// Mkdir implements Target.
func (e *Engine) Mkdir(path string, perm uint32) error { return e.fs.Mkdir(path, perm) }

// ReadDir implements Target.
func (e *Engine) ReadDir(path string) ([]DirEntry, error) {
	ents, err := e.fs.ReadDir(path)
	return dirEntriesOf(ents), err
}

// Unlink implements Target.
func (e *Engine) Unlink(path string) error { return e.fs.Unlink(path) }

// Rmdir implements Target.
func (e *Engine) Rmdir(path string) error { return e.fs.Rmdir(path) }

// Rename implements Target.
func (e *Engine) Rename(oldpath, newpath string, flags uint32) error {
	return e.fs.Rename(oldpath, newpath, flags)
}

// Link implements Target.
func (e *Engine) Link(oldpath, newpath string) error { return e.fs.Link(oldpath, newpath) }

// Symlink implements Target.
func (e *Engine) Symlink(target, newpath string) error { return e.fs.Symlink(target, newpath) }

// Readlink implements Target.
func (e *Engine) Readlink(path string) (string, error) { return e.fs.Readlink(path) }

// Chmod implements Target.
func (e *Engine) Chmod(path string, mode uint32) error { return e.fs.Chmod(path, mode) }

// Chown implements Target.
func (e *Engine) Chown(path string, uid, gid int) error { return e.fs.Chown(path, uid, gid) }

// Utimes implements Target.
func (e *Engine) Utimes(path string, atime, mtime time.Time) error {
	return e.fs.Utimes(path, atime, mtime)
}

// Truncate implements Target.
func (e *Engine) Truncate(path string, size int64) error { return e.fs.Truncate(path, size) }

// Getxattr implements Target.
func (e *Engine) Getxattr(path, name string) ([]byte, error) { return e.fs.Getxattr(path, name) }

// Setxattr implements Target.
func (e *Engine) Setxattr(path, name string, value []byte, flags int) error {
	return e.fs.Setxattr(path, name, value, flags)
}

// Listxattr implements Target.
func (e *Engine) Listxattr(path string) ([]string, error) { return e.fs.Listxattr(path) }

// Removexattr implements Target.
func (e *Engine) Removexattr(path, name string) error { return e.fs.Removexattr(path, name) }

// engineHandle adapts *sluice.File to Handle.
type engineHandle struct {
	f *sluice.File
	e *Engine
}

func (h engineHandle) Pread(p []byte, off int64) (int, error) { return h.f.Pread(p, off, 0) }
func (h engineHandle) Pwrite(p []byte, off int64) (int, error) {
	return h.f.Pwrite(p, off, 0)
}
func (h engineHandle) PwriteAtomic(p []byte, off int64) (int, error) {
	return h.f.Pwrite(p, off, sluice.RWFAtomic)
}

func (h engineHandle) Read(p []byte) (int, error) {
	n, err := h.f.Read(p)
	if err == io.EOF {
		err = nil
	}
	return n, err
}

func (h engineHandle) Write(p []byte) (int, error)               { return h.f.Write(p) }
func (h engineHandle) Seek(off int64, whence int) (int64, error) { return h.f.Seek(off, whence) }
func (h engineHandle) Truncate(size int64) error                 { return h.f.Truncate(size) }
func (h engineHandle) Fallocate(mode uint32, off, n int64) error { return h.f.Fallocate(mode, off, n) }
func (h engineHandle) Fsync() error                              { return h.f.Fsync() }
func (h engineHandle) Fdatasync() error                          { return h.f.Fdatasync() }
func (h engineHandle) Close() error                              { return h.f.Close() }
func (h engineHandle) Stat() (Stat, error)                       { a, err := h.f.Stat(); return statOfAttr(a), err }
func (h engineHandle) ReadDir() ([]DirEntry, error) {
	e, err := h.f.ReadDir()
	return dirEntriesOf(e), err
}

func (h engineHandle) Clone(src Handle) error { return h.f.Clone(h.e.fileOf(src)) }

func (h engineHandle) CloneRange(src Handle, srcOff, dstOff, n int64) error {
	return h.f.CloneRange(h.e.fileOf(src), srcOff, dstOff, n)
}

// DedupeRange reports sluice.ErrRangesDiffer as EBADE, the kernel's
// errno for FILE_DEDUPE_RANGE_DIFFERS.
func (h engineHandle) DedupeRange(srcOff, n int64, dst Handle, dstOff int64) (int64, error) {
	got, err := h.f.DedupeRange(srcOff, n, h.e.fileOf(dst), dstOff)
	if errors.Is(err, sluice.ErrRangesDiffer) {
		err = errors.Join(err, syscall.EBADE)
	}
	return got, err
}

func (h engineHandle) ExchangeRange(file1 Handle, off1, off2, n int64, flags uint64) error {
	return h.f.ExchangeRange(h.e.fileOf(file1), off1, off2, n, flags)
}

// fileOf returns the engine file of h, or a closed one if h is not an
// engine handle (a slot never opened).
func (e *Engine) fileOf(h Handle) *sluice.File {
	if eh, ok := h.(engineHandle); ok {
		return eh.f
	}
	if e.closed == nil {
		// A closed file fails every call with EBADF, whichever file
		// system it came from.
		f, err := e.fs.OpenFile("/", sluice.O_RDONLY, 0)
		if err != nil {
			panic(fmt.Sprintf("fstest: opening the root: %v", err))
		}
		_ = f.Close()
		e.closed = f
	}
	return e.closed
}

func statOfAttr(a sluice.Attr) Stat {
	return Stat{
		Ino: uint64(a.Ino), Mode: a.Mode, Nlink: a.Nlink, Uid: a.Uid, Gid: a.Gid,
		Size: a.Size, Blocks: a.Blocks, Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime,
	}
}

func dirEntriesOf(ents []sluice.DirEntry) []DirEntry {
	if ents == nil {
		return nil
	}
	out := make([]DirEntry, len(ents))
	for i, d := range ents {
		out[i] = DirEntry{Name: d.Name, Type: d.Type}
	}
	return out
}
