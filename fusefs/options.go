package fusefs

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/sluicefs/sluice/fuseserver"
	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// CacheMode says who caches the data of files opened without O_DIRECT.
type CacheMode int

const (
	// KernelCache lets the kernel's page cache hold the data of buffered
	// opens (FOPEN_KEEP_CACHE): cached reads never reach the daemon, and the
	// daemon serves the kernel's page-aligned reads and write-through writes
	// on the engine's direct path, so the data is not cached twice. It is
	// the default (see the package doc for the measurements behind it).
	KernelCache CacheMode = iota
	// SluiceCache answers FOPEN_DIRECT_IO on every open, so that every
	// read(2) and write(2) reaches the daemon and buffered opens use the
	// engine's own page cache.
	SluiceCache
)

// String returns "kernel" or "sluice".
func (m CacheMode) String() string {
	switch m {
	case KernelCache:
		return "kernel"
	case SluiceCache:
		return "sluice"
	}
	return fmt.Sprintf("CacheMode(%d)", int(m))
}

// ParseCacheMode parses "kernel" or "sluice".
func ParseCacheMode(s string) (CacheMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "kernel":
		return KernelCache, nil
	case "sluice":
		return SluiceCache, nil
	}
	return 0, fmt.Errorf("unknown cache mode %q: use kernel or sluice", s)
}

// Defaults of Options.
const (
	// DefaultMaxWrite is the largest READ or WRITE request the kernel sends:
	// 1 MiB, the kernel's maximum (max_pages 256).
	DefaultMaxWrite = 1 << 20
	// DefaultMaxBackground caps the background requests the kernel keeps in
	// flight: readahead, writeback and asynchronous direct I/O (libaio and
	// io_uring with CAP_ASYNC_DIO). 128 covers 4 jobs at queue depth 32;
	// go-fuse's default of 12 would cap a QD32 benchmark at 12.
	DefaultMaxBackground = 128
	// DefaultURingDepth is the default number of io_uring entries per
	// kernel queue: a QD32 load on one CPU finds an entry for every
	// request, with room for a second job.
	DefaultURingDepth = 64
	// DefaultEntryTimeout and DefaultAttrTimeout are how long the kernel may
	// trust a name lookup and a file's attributes. The daemon is the only
	// writer of a volume (the volume lock), and every change passes through
	// this kernel, so the timeouts only bound how stale st_blocks, atime and
	// ctime may look.
	DefaultEntryTimeout = time.Second
	DefaultAttrTimeout  = time.Second
	// DefaultReadAhead is the kernel's readahead window on the mount: 2 MiB
	// keeps two 1 MiB READs in flight behind a sequential reader (FUSE's
	// own window is 128 KiB). Measured: 1 MiB cold sequential reads 1.9x
	// (docs/ARCHITECTURE.md, "FUSE").
	DefaultReadAhead = 2 << 20
	// DefaultDirtyRatio is the mount's share of the kernel's dirty page
	// limit, in percent (FUSE gives each mount 1%, strictly enforced).
	DefaultDirtyRatio = 10
	// DefaultNegativeTimeout is how long the kernel may remember that a
	// name does not exist. Safe for the same reason.
	DefaultNegativeTimeout = time.Second
)

// Access says which users may use a mount at all. Within the mount the
// kernel checks every access against the modes and owners that sluice
// reports (the default_permissions mount option, always on), so a mount
// open to every user is as safe as a kernel file system: to keep users
// out, give the directories the modes you would give them on XFS.
type Access int

const (
	// AccessAuto is AccessEveryone when the mount is made by root
	// (effective user ID 0), as for a kernel file system mounted by an
	// administrator, and AccessMounter otherwise, FUSE's own default for
	// a mount through fusermount3.
	AccessAuto Access = iota
	// AccessEveryone lets every user use the mount (allow_other). A user
	// other than root may ask for it only when /etc/fuse.conf has the line
	// user_allow_other; Mount checks that first and says so, rather than
	// leaving fusermount3 to fail.
	AccessEveryone
	// AccessMounter keeps the mount to the user who made it: the kernel
	// answers EACCES to every other user, root included, at the mount
	// point itself.
	AccessMounter
)

// String returns "auto", "everyone" or "mounter".
func (a Access) String() string {
	switch a {
	case AccessAuto:
		return "auto"
	case AccessEveryone:
		return "everyone"
	case AccessMounter:
		return "mounter"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Options configures Mount and New. The zero value is valid: every field
// has a default.
type Options struct {
	// Cache selects who caches buffered data. The default value is
	// KernelCache.
	Cache CacheMode
	// WritebackCache asks the kernel for CAP_WRITEBACK_CACHE with
	// KernelCache: write(2) lands in the kernel's page cache and the kernel
	// writes pages back later. The default value is false (write-through);
	// `sluice mount` turns it on, chosen by measurement (docs/ARCHITECTURE.md,
	// "Buffered opens").
	WritebackCache bool
	// StrictDirectIO makes O_DIRECT reads and writes whose offset or length
	// is not a multiple of the engine's I/O unit fail with EINVAL, as XFS
	// does. The default value is false: they are served coherently by a
	// bounce buffer (reads) and the engine's buffered path (writes), as
	// FUSE applications expect (see the package doc).
	StrictDirectIO bool
	// MaxWrite is the largest READ or WRITE request. The default value is
	// DefaultMaxWrite.
	MaxWrite int
	// MaxBackground is the kernel's limit on background requests. The
	// default value is DefaultMaxBackground.
	MaxBackground int
	// EntryTimeout, AttrTimeout and NegativeTimeout are the kernel's cache
	// lifetimes for lookups, attributes and failed lookups. The default
	// values are DefaultEntryTimeout, DefaultAttrTimeout and
	// DefaultNegativeTimeout; a negative value means 0 (no caching).
	EntryTimeout    time.Duration
	AttrTimeout     time.Duration
	NegativeTimeout time.Duration
	// ReadAhead is the kernel's readahead window on the mount, in bytes,
	// and DirtyRatio the mount's share of the kernel's dirty page limit, in
	// percent; both are set through the mount's bdi in /sys/class/bdi, so
	// only when the mount is made by root. The default values are
	// DefaultReadAhead and DefaultDirtyRatio; a negative value keeps the
	// kernel's (128 KiB and 1%).
	ReadAhead  int
	DirtyRatio int
	// Access says which users may use the mount at all; within it, the
	// kernel checks every access against the modes and owners sluice
	// reports (default_permissions is always on), as it does on XFS. The
	// default value is AccessAuto: every user when the mount is made by
	// root, only the mounting user otherwise. See Access.
	Access Access
	// ReadOnly mounts read-only (MS_RDONLY), as "ro" in MountOptions
	// does. The engine should be opened read-only too. The default value
	// is false.
	ReadOnly bool
	// MountOptions are mount(8)-style options (sluice mount -o):
	//
	//   - allow_other: Access = AccessEveryone;
	//   - default_permissions: accepted; it is always on;
	//   - ro, rw, nosuid, suid, nodev, dev, noexec, exec, noatime, atime,
	//     sync, async, dirsync: mount flags, as for any file system;
	//   - nodiratime, diratime, relatime, strictatime, lazytime,
	//     nolazytime, nosymfollow, symfollow: mount flags, for a mount
	//     made by root only (fusermount3 does not take them).
	//
	// Without options a mount is nosuid and nodev, as every FUSE mount is
	// unless root asks for suid or dev (fusermount3 ignores them for other
	// users; Mount refuses them). Any other option is refused by Validate.
	// The default value is none.
	MountOptions []string
	// FsName is the mount's source as /proc/mounts shows it; `sluice mount`
	// puts the volume's absolute path there, so that `sluice umount` can
	// find the volume. The default value is "sluice".
	FsName string
	// Transport is how FUSE requests travel: io_uring when the kernel
	// offers it, /dev/fuse otherwise (TransportAuto), /dev/fuse only
	// (TransportDevFuse), or io_uring only (TransportURing). The default
	// value is TransportAuto, chosen by measurement (see
	// fuseserver.TransportAuto).
	Transport fuseserver.Transport
	// URingDepth is the number of io_uring entries per kernel queue (one
	// queue per possible CPU). The default value is DefaultURingDepth.
	URingDepth int
	// URingIssuer chooses the thread that issues io_uring commands (see
	// fuseuring.Issuer). The default value is fuseuring.IssueOwner: one
	// owner thread per queue, which also serves the quick requests.
	URingIssuer fuseuring.Issuer
	// URingNoLend keeps the engine's device I/O off the io_uring queues'
	// rings (fuseserver.Config.URingNoLend). The default value is false:
	// an owner thread lends its ring to the device reads and writes of
	// the READs and WRITEs it starts, when the device is directdev.
	URingNoLend bool
	// Debug logs every FUSE request and reply. The default value is false.
	Debug bool
	// Logger receives errors, panics and debug output. The default value is
	// log.Default().
	Logger *log.Logger
	// Metrics, when set, records the latency of every FUSE operation. The
	// default value is nil (no recording).
	Metrics *Metrics
}

// EnsureDefaults fills unset fields with their defaults and returns o. A nil
// o gives all defaults.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	if o.MaxWrite == 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	if o.MaxBackground == 0 {
		o.MaxBackground = DefaultMaxBackground
	}
	if o.URingDepth == 0 {
		o.URingDepth = DefaultURingDepth
	}
	if o.ReadAhead == 0 {
		o.ReadAhead = DefaultReadAhead
	}
	if o.DirtyRatio == 0 {
		o.DirtyRatio = DefaultDirtyRatio
	}
	for _, p := range []struct {
		d   *time.Duration
		def time.Duration
	}{{&o.EntryTimeout, DefaultEntryTimeout}, {&o.AttrTimeout, DefaultAttrTimeout}, {&o.NegativeTimeout, DefaultNegativeTimeout}} {
		switch {
		case *p.d == 0:
			*p.d = p.def
		case *p.d < 0:
			*p.d = 0
		}
	}
	if o.FsName == "" {
		o.FsName = "sluice"
	}
	if o.Logger == nil {
		o.Logger = log.Default()
	}
	return o
}

// Validate reports every problem with o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Cache != KernelCache && o.Cache != SluiceCache {
		errs = append(errs, fmt.Errorf("unknown cache mode %d", o.Cache))
	}
	if o.WritebackCache && o.Cache != KernelCache {
		errs = append(errs, errors.New("WritebackCache needs the kernel cache mode"))
	}
	if o.MaxWrite < 4096 || o.MaxWrite > 1<<20 || o.MaxWrite%4096 != 0 {
		errs = append(errs, fmt.Errorf("MaxWrite %d is not a multiple of 4 KiB in [4 KiB, 1 MiB]", o.MaxWrite))
	}
	if o.MaxBackground < 1 || o.MaxBackground > 65535 {
		errs = append(errs, fmt.Errorf("MaxBackground %d is not in [1, 65535]", o.MaxBackground))
	}
	if o.ReadAhead > 1<<30 || (o.ReadAhead > 0 && o.ReadAhead%4096 != 0) {
		errs = append(errs, fmt.Errorf("ReadAhead %d is not a multiple of 4 KiB up to 1 GiB", o.ReadAhead))
	}
	if o.DirtyRatio > 100 {
		errs = append(errs, fmt.Errorf("DirtyRatio %d is over 100 percent", o.DirtyRatio))
	}
	if o.Access != AccessAuto && o.Access != AccessEveryone && o.Access != AccessMounter {
		errs = append(errs, fmt.Errorf("unknown access %d", o.Access))
	}
	for _, name := range o.MountOptions {
		if err := checkMountOption(name); err != nil {
			errs = append(errs, err)
		}
		if name == "allow_other" && o.Access == AccessMounter {
			errs = append(errs, errors.New("mount option allow_other contradicts AccessMounter"))
		}
	}
	return errors.Join(errs...)
}

// String renders o on one line, so that a benchmark or a test can record
// what it ran with.
func (o *Options) String() string {
	return fmt.Sprintf("cache=%s writeback_cache=%t strict_dio=%t max_write=%d max_background=%d read_ahead=%d dirty_ratio=%d entry_timeout=%v attr_timeout=%v negative_timeout=%v access=%s ro=%t options=%s",
		o.Cache, o.WritebackCache, o.StrictDirectIO, o.MaxWrite, o.MaxBackground, o.ReadAhead, o.DirtyRatio, o.EntryTimeout, o.AttrTimeout,
		o.NegativeTimeout, o.Access, o.ReadOnly, strings.Join(o.MountOptions, ","))
}
