package volume

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
)

// ErrInUse is matched (errors.Is) by Open's error when another process
// holds the volume.
var ErrInUse = errors.New("volume in use")

// InUseError says which process holds a volume: for a volume whose
// metadata is in etcd, the host that owns it (its owner key).
type InUseError struct {
	Dir string
	Pid string // "?" when the lock file names none
	// Host, Mount and Since are the owner's host name, mount point and
	// start time, for a volume in etcd; "" otherwise.
	Host, Mount, Since string
}

func (e *InUseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "volume %s is in use by pid %s", e.Dir, e.Pid)
	if e.Host != "" {
		fmt.Fprintf(&b, " on host %s", e.Host)
	}
	if e.Mount != "" {
		fmt.Fprintf(&b, ", mounted on %s", e.Mount)
	}
	if e.Since != "" {
		fmt.Fprintf(&b, " since %s", e.Since)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInUse) hold.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// DeviceOptions configures how Mkfs and Open open a volume directory's data
// device, an image file or block device driven by device/directdev. It is
// directdev.Options under the name of the package that opens the device, so
// that the layers above (the engine's Options) carry it without importing a
// concrete device. Mkfs and Open set IOUnit (from MkfsOptions.IOUnit or the
// header) and ReadOnly (from OpenOptions.ReadOnly) themselves. The zero
// value gives directdev's defaults.
type DeviceOptions = directdev.Options

// DeviceOptions returns the options the data device was opened with,
// defaults filled (its I/O unit included), and true, when it is a directdev
// device, as Open makes it; otherwise (a device attached with Attach, such as
// a memory device) the zero value and false.
func (v *Volume) DeviceOptions() (DeviceOptions, bool) {
	if d, ok := rawDevice(v.Dev).(*directdev.Device); ok {
		return d.Options(), true
	}
	return DeviceOptions{}, false
}

// rawDevice returns the device under dev's wrappers (the fence).
func rawDevice(dev device.Device) device.Device {
	for {
		w, ok := dev.(interface{ Inner() device.Device })
		if !ok {
			return dev
		}
		dev = w.Inner()
	}
}

// MkfsOptions configures Mkfs.
type MkfsOptions struct {
	// Size of the data image in bytes: at least MinSize and a multiple of
	// the block size. Required unless Data names a block device, whose size
	// is then used (a non-zero Size must not exceed it).
	Size int64
	// Data names a block device to use instead of an image file. The
	// default value is "" (an image file VOLUME/data).
	Data string
	// BlockSize is the file-system block size. The default value is
	// DefaultBlockSize.
	BlockSize int
	// IOUnit is the device I/O unit the volume is made for (512 B up to
	// 1 MiB; larger than a page models a block-granular backend). The
	// default value is 512.
	IOUnit int
	// Prealloc allocates the whole image file up front instead of creating
	// it sparse. The default value is false.
	Prealloc bool
	// DataChecksums checksums every file block's data (CRC-32C), verified
	// on every read from the device. The default value is false.
	DataChecksums bool
	// Force overwrites an existing volume directory that is not in use.
	// The default value is false.
	Force bool
	// Device configures how the data device is opened; its IOUnit is
	// IOUnit above. The default value is the zero DeviceOptions.
	Device DeviceOptions
	// Etcd, when set, puts the metadata in etcd instead of the embedded
	// Pebble store VOLUME/meta/: the superblock and every record under
	// the URL's prefix, which must be empty (Force deletes what it holds).
	// Data is then required and names the shared data device: a block
	// device, or an image file (created with Size bytes if it does not
	// exist; an existing one is used whole unless Size is smaller). The
	// volume directory keeps the lock file, the link VOLUME/data and the
	// pointer file VOLUME/etcd.json. The default value is nil.
	Etcd *EtcdOptions
}

// Mkfs creates a volume directory dir.
func Mkfs(dir string, o MkfsOptions) error {
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.IOUnit == 0 {
		o.IOUnit = 512
	}
	if err := validGeometry(o.BlockSize, o.IOUnit); err != nil {
		return err
	}
	if o.Data != "" && o.Size != 0 && o.Size%int64(o.BlockSize) != 0 {
		return fmt.Errorf("size %d is not a multiple of the %d B block size", o.Size, o.BlockSize)
	}
	if o.Etcd != nil {
		if o.Data == "" {
			return errors.New("a volume with its metadata in etcd needs --data: the data device or image file every host reaches")
		}
		if _, _, err := etcdkv.ParseURL(o.Etcd.URL); err != nil {
			return err
		}
		if o.Size != 0 && o.Size < MinSize {
			return fmt.Errorf("size %d is smaller than the minimum of %d bytes (1 MiB)", o.Size, MinSize)
		}
	}
	if o.Data == "" {
		switch {
		case o.Size <= 0:
			return fmt.Errorf("a size is required (e.g. --size 16G)")
		case o.Size < MinSize:
			return fmt.Errorf("size %d is smaller than the minimum of %d bytes (1 MiB)", o.Size, MinSize)
		case o.Size%int64(o.BlockSize) != 0:
			return fmt.Errorf("size %d is not a multiple of the %d B block size", o.Size, o.BlockSize)
		case o.Size%int64(o.IOUnit) != 0:
			return fmt.Errorf("size %d is not a multiple of the %d B I/O unit", o.Size, o.IOUnit)
		}
	}
	if o.Data != "" && !o.Force {
		if h, err := readHeader(o.Data); err == nil {
			return fmt.Errorf("%s already holds sluice volume %s; pass --force to overwrite it", o.Data, UUIDString(h.UUID))
		}
	}
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	if err := prepareDir(dir, o.Force); err != nil {
		return err
	}
	err := mkfsIn(dir, o)
	if err != nil && created {
		// Leave nothing behind, so that a corrected retry is not refused
		// as "not empty".
		os.RemoveAll(dir)
	}
	return err
}

// mkfsIn makes the volume in the prepared directory dir.
func mkfsIn(dir string, o MkfsOptions) error {
	lock, err := takeLock(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if o.Etcd != nil {
		// The processes that open it take the lock shared and write no
		// pid: leave none that would name this one.
		defer lock.Truncate(0)
	}
	if err := os.RemoveAll(metaPath(dir)); err != nil {
		return err
	}
	if err := os.Remove(etcdPath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if o.Etcd != nil {
		return mkfsEtcdIn(dir, o)
	}
	if err := makeData(dir, o); err != nil {
		return err
	}
	kv, err := meta.OpenPebble(metaPath(dir), meta.PebbleOptions{CreateIfMissing: true})
	if err != nil {
		return err
	}
	defer kv.Close()
	return formatData(dir, o, kv)
}

// formatData opens dir's data device with o's I/O unit and formats the
// volume on it, its metadata in kv.
func formatData(dir string, o MkfsOptions, kv meta.KV) error {
	devOpts := o.Device
	devOpts.IOUnit = o.IOUnit
	dev, err := directdev.Open(dataPath(dir), devOpts)
	if err != nil {
		return err
	}
	defer dev.Close()
	_, err = Format(dev, kv, FormatOptions{BlockSize: o.BlockSize, Size: o.Size, DataChecksums: o.DataChecksums})
	return err
}

// mkfsEtcdIn makes the volume in the prepared and locked directory dir,
// with its metadata in etcd.
func mkfsEtcdIn(dir string, o MkfsOptions) error {
	eo := *o.Etcd
	kv, err := openEtcd(&eo)
	if err != nil {
		return err
	}
	defer kv.Close()
	if err := prepareEtcd(kv, &eo, o.Force); err != nil {
		return err
	}
	if err := makeSharedData(dir, o); err != nil {
		return err
	}
	if err := formatData(dir, o, kv); err != nil {
		return err
	}
	// The volume has never had an owner: its first need not wait.
	if err := kv.MarkReleased(etcdkv.Holder{Mount: "(mkfs " + dir + ")"}); err != nil {
		return err
	}
	return writePointer(dir, eo.pointer())
}

// prepareDir makes sure dir exists and is empty (or may be overwritten).
func prepareDir(dir string, force bool) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a directory", dir)
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(1)
	f.Close()
	if err != nil && err != io.EOF {
		return err
	}
	if len(names) > 0 && !force {
		return fmt.Errorf("%s exists and is not empty; pass --force to overwrite it", dir)
	}
	return nil
}

func makeData(dir string, o MkfsOptions) error {
	p := dataPath(dir)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if o.Data != "" {
		abs, err := filepath.Abs(o.Data)
		if err != nil {
			return err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return fmt.Errorf("data device: %w", err)
		}
		if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
			return fmt.Errorf("--data %s is not a block device", o.Data)
		}
		return os.Symlink(abs, p)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if o.Prealloc {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, o.Size); err != nil {
			return fmt.Errorf("preallocating %d bytes for %s: %w", o.Size, p, err)
		}
	} else if err := f.Truncate(o.Size); err != nil {
		return err
	}
	return f.Sync()
}

// takeLock opens VOLUME/lock and takes an exclusive flock on it, or reports
// the pid of the process that holds it.
func takeLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(lockPath(dir), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if pid == "" {
				pid = "?"
			}
			return nil, &InUseError{Dir: dir, Pid: pid}
		}
		return nil, fmt.Errorf("locking volume %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// takeSharedLock opens VOLUME/lock and takes a shared flock on it: the
// lock of a volume whose metadata is in etcd, which keeps mkfs (which
// takes it exclusive) off while it is open.
func takeSharedLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(lockPath(dir), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, Pid: "? (mkfs)"}
		}
		return nil, fmt.Errorf("locking volume %s: %w", dir, err)
	}
	return f, nil
}

// OpenOptions configures Open.
type OpenOptions struct {
	// ReadOnly opens the data device and the metadata without writing.
	// The default value is false.
	ReadOnly bool
	// Device configures the data device (backend, buffered fallback); its
	// IOUnit is taken from the header and its ReadOnly from ReadOnly above.
	// The default value is the zero DeviceOptions.
	Device DeviceOptions
	// Etcd overrides what the pointer file VOLUME/etcd.json of a volume
	// whose metadata is in etcd says: each field set here replaces the
	// file's (a URL must be the file's), and Password, which the file
	// never holds, comes only from here. It is ignored for a volume on
	// the embedded Pebble store. The default value is nil: the file alone.
	Etcd *EtcdOptions
	// Lease configures the ownership a read-write open of a volume in etcd
	// takes. The default value is the zero LeaseOptions.
	Lease LeaseOptions
	// Shared lets a read-only open of a volume in etcd proceed while a
	// host owns it (sluice stat); otherwise such an open fails with an
	// *InUseError naming the holder, as a Pebble volume in use does. The
	// default value is false.
	Shared bool
}

// Open opens the volume directory dir: it takes the lock, reads the header,
// opens the data device and the metadata and checks that they agree.
//
// For a volume whose metadata is in etcd, the lock is shared (the etcd
// lease, not the lock file, decides who writes), and a read-write Open
// first takes the volume's ownership (LeaseOptions: at once, or waiting
// as a standby), then reads the superblock (which the previous owner may
// have changed until then), and wraps the data device in the fence of that
// ownership (Volume.Fence).
func Open(dir string, o OpenOptions) (*Volume, error) {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("volume %s does not exist (create it with: sluice mkfs %s --size 16G)", dir, dir)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a volume directory", dir)
	}
	dfi, err := os.Stat(dataPath(dir))
	if err != nil {
		return nil, fmt.Errorf("%s is not a sluice volume: its data device: %w", dir, err)
	}
	ptr, onEtcd, err := readPointer(dir)
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", dir, err)
	}
	if _, err := os.Stat(metaPath(dir)); err != nil && !onEtcd {
		return nil, fmt.Errorf("volume %s: the metadata directory meta/ is missing", dir)
	} else if err == nil && onEtcd {
		return nil, fmt.Errorf("volume %s has both a metadata directory meta/ and a pointer to etcd etcd.json; remove the one that is stale", dir)
	}
	var eo EtcdOptions
	if onEtcd {
		if eo, err = ptr.merge(o.Etcd); err != nil {
			return nil, fmt.Errorf("volume %s: %w", dir, err)
		}
	}
	var lock *os.File
	if onEtcd {
		lock, err = takeSharedLock(dir)
	} else {
		lock, err = takeLock(dir)
	}
	if err != nil {
		return nil, err
	}
	v, err := openLocked(dir, dfi, o, onEtcd, &eo)
	if err != nil {
		lock.Close()
		return nil, err
	}
	v.Dir, v.lock = dir, lock
	return v, nil
}

// openLocked is Open once the lock is held.
func openLocked(dir string, dfi os.FileInfo, o OpenOptions, onEtcd bool, eo *EtcdOptions) (v *Volume, err error) {
	h, err := readHeader(dataPath(dir))
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", dir, err)
	}
	if dfi.Mode().IsRegular() && uint64(dfi.Size()) < h.DeviceBytes {
		return nil, fmt.Errorf("volume %s: the data image is %d bytes but the header says %d: truncated image", dir, dfi.Size(), h.DeviceBytes)
	}
	var kv meta.KV
	var owner *etcdkv.Owner
	if onEtcd {
		ekv, oerr := openEtcd(eo)
		if oerr != nil {
			return nil, fmt.Errorf("volume %s: %w", dir, oerr)
		}
		kv = ekv
		// On the named result err: a later failure (the device, the
		// header, the reservation) gives the ownership back too.
		defer func() {
			if err != nil {
				if owner != nil {
					owner.Revoke()
				}
				ekv.Close()
			}
		}()
		switch {
		case !o.ReadOnly:
			if owner, err = acquireOwner(dir, ekv, o.Lease); err != nil {
				return nil, err
			}
		case !o.Shared:
			holder, err := ekv.OwnerOf()
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", dir, err)
			}
			if holder != nil {
				return nil, holderInUse(dir, holder)
			}
		}
	} else {
		if kv, err = meta.OpenPebble(metaPath(dir), meta.PebbleOptions{ReadOnly: o.ReadOnly}); err != nil {
			return nil, fmt.Errorf("volume %s: %w", dir, err)
		}
		defer func() {
			if err != nil {
				kv.Close()
			}
		}()
	}
	devOpts := o.Device
	devOpts.IOUnit = int(h.IOUnit)
	devOpts.ReadOnly = o.ReadOnly
	dev, err := directdev.Open(dataPath(dir), devOpts)
	if err != nil {
		return nil, err
	}
	v, err = Attach(dev, kv)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("volume %s: %w", dir, err)
	}
	if onEtcd {
		v.MetaURL = eo.URL
	}
	if owner != nil {
		res, err := reserve(dataPath(dir), owner, o.Lease.ReservationIoctl)
		if err != nil {
			dev.Close()
			return nil, fmt.Errorf("volume %s: %w", dir, err)
		}
		v.Owner, v.Reservation = owner, res
		v.Fence = fence(dev, owner, o.Lease)
		v.Dev = v.Fence
	}
	return v, nil
}

// readHeader reads the header with a plain read, before the device is
// opened with the I/O unit it names.
func readHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, HeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("reading the header: %w (truncated image?)", err)
	}
	return DecodeHeader(b)
}
