// Package volume creates, opens and describes sluice volumes.
//
// A volume is a directory:
//
//	VOLUME/data   the data device: a sparse (or preallocated) image file, or a
//	              symlink to a block device named at mkfs
//	VOLUME/meta/  the metadata database (Pebble)
//	VOLUME/lock   held with flock while a process has the volume open; it
//	              holds that process's pid
//
// or, for a volume whose metadata lives in etcd (MkfsOptions.Etcd), only
// what is local to the host:
//
//	VOLUME/data       a symlink to the shared data device or image file
//	VOLUME/etcd.json  the pointer to the metadata: the etcd URL
//	                  (etcd://HOST:PORT,.../PREFIX), the TLS files, the
//	                  user name and the cluster's limits; never a password
//	VOLUME/lock       taken shared by every open (mkfs takes it exclusive)
//
// A volume in etcd may have several such directories, one per host (or
// several on one host), all pointing at the same URL and data device.
//
// Block 0 of the data device holds a Header that must agree with the
// metadata's superblock (same UUID and geometry), so a data device paired
// with the wrong metadata is refused. Format writes both; Attach checks
// both. Mkfs and Open do the same for a volume directory on the host, and
// also handle the lock file and the on-disk layout.
//
// # One host at a time
//
// The lock file excludes processes of one host only. What makes one
// process, on any host, the only writer of a volume in etcd is its
// ownership: a read-write Open takes it (etcdkv.KV.Acquire: an owner key
// attached to an etcd lease of LeaseOptions.TTL, kept alive), or fails
// with an *InUseError naming the holder (host, pid, mount point), or, as a
// standby (LeaseOptions.Standby), waits until the holder releases the
// volume or its lease expires. Only then does it read the superblock, so
// that it starts from everything the previous owner committed. The
// ownership fences both halves of the volume:
//
//   - metadata: every commit writes only if the owner key still carries
//     this host's lease (an etcd comparison), and fails with
//     etcdkv.ErrNotOwner and EIO otherwise, writing nothing; the engine
//     then shuts down, as after any failed commit;
//   - data: Dev is wrapped in a fencedev.Device (Volume.Fence) whose
//     window ends at the owner's deadline (the send time of the last
//     confirmed keep-alive + TTL - Margin), so that no data request is
//     submitted once the lease may have expired; the fence closes for
//     good when the lease is lost.
//
// Where the data device has persistent reservations (package
// device/blockpr: a SCSI or NVMe LUN), the ownership also takes one
// (Volume.Reservation): Open registers a key derived from the ownership's
// etcd lease ID (recorded in the owner key and LastOwnerKey, the earlier
// owners' as etcdkv.Holder.Prior), reserves Write Exclusive, and, if an
// earlier owner's key holds the reservation, preempts it with PREEMPT AND
// ABORT, so that the device refuses that host's writes from then on; a
// preemption the device refuses fails Open (nothing is written). Close,
// after the last request of an ownership not lost, releases the
// reservation and unregisters the key. A device without them (an image
// file: ENOTTY; a loop device: EOPNOTSUPP; a partition) is used without,
// and Volume.Reservation says so. The preemption does not shorten the
// takeover wait below.
//
// A host that takes the volume over after its previous owner's lease
// expired or was revoked (a crash, a partition, SIGSTOP) holds its data
// requests until TTL + Margin + IOBound after it acquired the lease (the
// longest of its own and the previous owner's terms, which etcd records):
// by then the previous owner's deadline has passed (it was before the
// acquisition + its TTL) and its last requests are over (its IOBound). Metadata
// operations, which etcd fences, proceed at once. After a clean release
// (Close of the previous owner, after its last request) or a fresh mkfs
// there is no wait (etcdkv.Owner.Clean). What the data fence does not
// cover is in the fencedev package doc. The engine recovers the rest
// itself at open: it frees the previous owner's orphans, and extents it
// allocated but never converted read as zeros.
//
// Read-only opens (fsck, fiemap) of a volume in etcd are refused while a
// host owns it, except with OpenOptions.Shared (stat), which never
// changes anything.
package volume

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/fencedev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
)

// MinSize is the smallest data device mkfs accepts.
const MinSize = 1 << 20

// DefaultBlockSize is the file-system block size unless told otherwise.
const DefaultBlockSize = 4096

// Volume is an opened volume: a data device and its metadata.
type Volume struct {
	// Dir is the volume directory, or "" for a volume attached from parts.
	Dir    string
	Header *Header
	Super  *meta.Superblock
	Dev    device.Device
	KV     meta.KV
	// MetaURL is the etcd URL of a volume whose metadata is in etcd, ""
	// for the embedded Pebble store.
	MetaURL string
	// Owner is the volume's ownership (an etcd lease), taken by a
	// read-write Open of a volume in etcd; nil otherwise. Close releases
	// it. A mount watches Owner.Lost to stop serving.
	Owner *etcdkv.Owner
	// Fence is Dev when Owner is set: the data device behind the fence of
	// that ownership (Fence.Inner is the raw device). Nil otherwise.
	Fence *fencedev.Device
	// Reservation is the persistent reservation this ownership holds on
	// the data device, or why it holds none (Reservation.Held), when
	// Owner is set; nil otherwise. Close releases it.
	Reservation *Reservation

	lock *os.File
}

// FormatOptions configures Format.
type FormatOptions struct {
	// BlockSize is the file-system block size: a power of two between 512 B
	// and 64 KiB. The default value is DefaultBlockSize.
	BlockSize int
	// UUID identifies the volume. The default value is a random UUID.
	UUID [16]byte
	// Size is how much of the device the volume uses, in bytes. The
	// default value is 0: the whole device.
	Size int64
	// DataChecksums makes the volume checksum every file block's data
	// (meta.FeatureDataChecksums). The default value is false.
	DataChecksums bool
}

// Format writes a new, empty file system to dev and kv: the header in block
// 0 of dev and, in kv, the superblock, the root directory and one free
// extent covering the data area. Both are made durable before it returns.
func Format(dev device.Device, kv meta.KV, o FormatOptions) (*Header, error) {
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.UUID == ([16]byte{}) {
		if _, err := rand.Read(o.UUID[:]); err != nil {
			return nil, err
		}
		o.UUID[6] = o.UUID[6]&0x0f | 0x40 // version 4
		o.UUID[8] = o.UUID[8]&0x3f | 0x80
	}
	if err := validGeometry(o.BlockSize, dev.IOUnit()); err != nil {
		return nil, err
	}
	bs := uint64(o.BlockSize)
	size := dev.Size()
	if o.Size > size {
		return nil, fmt.Errorf("the device is %d bytes, smaller than the %d bytes asked for", size, o.Size)
	}
	if o.Size > 0 {
		size = o.Size
	}
	h := &Header{
		Format:      HeaderFormat,
		UUID:        o.UUID,
		BlockSize:   uint32(o.BlockSize),
		IOUnit:      uint32(dev.IOUnit()),
		DeviceBytes: uint64(size) / bs * bs,
	}
	headerBytes := max(o.BlockSize, dev.IOUnit())
	h.DataStart = uint64(headerBytes) / bs
	if h.DeviceBytes < MinSize || h.DataStart >= h.DeviceBytes/bs {
		return nil, fmt.Errorf("device of %d bytes is too small: the minimum is %d bytes", dev.Size(), MinSize)
	}
	buf := device.AlignedBuf(headerBytes)
	copy(buf, h.Encode())
	if err := device.WriteAt(dev, buf, 0); err != nil {
		return nil, fmt.Errorf("writing the volume header: %w", err)
	}
	if err := device.Flush(dev); err != nil {
		return nil, fmt.Errorf("flushing the volume header: %w", err)
	}
	now := time.Now().UnixNano()
	sb := &meta.Superblock{
		Format:      meta.FormatVersion,
		UUID:        h.UUID,
		BlockSize:   h.BlockSize,
		SectorSize:  h.IOUnit,
		DeviceBytes: h.DeviceBytes,
		DataStart:   h.DataStart,
		NextIno:     meta.RootIno + 1,
	}
	if o.DataChecksums {
		sb.Features |= meta.FeatureDataChecksums
	}
	root := &meta.Inode{Ino: meta.RootIno, Parent: meta.RootIno, Mode: 0o040755, Nlink: 2, Atime: now, Mtime: now, Ctime: now, Gen: 1,
		Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	tx := kv.NewTxn()
	tx.Set(meta.SuperKey(), meta.EncodeSuperblock(sb))
	tx.Set(meta.InodeKey(meta.RootIno), meta.EncodeInode(root))
	tx.Set(meta.FreeKey(h.DataStart), meta.EncodeFree(h.DeviceBytes/bs-h.DataStart))
	if err := tx.Commit(true); err != nil {
		return nil, fmt.Errorf("writing the initial metadata: %w", err)
	}
	return h, nil
}

// Attach checks that dev and kv hold the same file system and returns the
// volume made of them. It does not take ownership of dev and kv on error.
func Attach(dev device.Device, kv meta.KV) (*Volume, error) {
	buf := device.AlignedBuf(dev.IOUnit())
	if err := device.ReadAt(dev, buf, 0); err != nil {
		return nil, fmt.Errorf("reading the volume header: %w", err)
	}
	h, err := DecodeHeader(buf)
	if err != nil {
		return nil, err
	}
	v, err := kv.Get(meta.SuperKey())
	if errors.Is(err, meta.ErrNotFound) {
		return nil, fmt.Errorf("the metadata holds no superblock: it was never formatted, or it belongs to something else")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the superblock: %w", err)
	}
	sb, err := meta.DecodeSuperblock(v)
	if err != nil {
		return nil, err
	}
	if sb.Format != meta.FormatVersion {
		return nil, fmt.Errorf("metadata format %d, this sluice reads format %d", sb.Format, meta.FormatVersion)
	}
	if sb.UUID != h.UUID {
		return nil, fmt.Errorf("the data device (volume %s) does not belong to this metadata (volume %s)",
			UUIDString(h.UUID), UUIDString(sb.UUID))
	}
	if sb.BlockSize != h.BlockSize || sb.DeviceBytes != h.DeviceBytes || sb.DataStart != h.DataStart || sb.SectorSize != h.IOUnit {
		return nil, fmt.Errorf("the data device header and the superblock disagree on the geometry (header %+v, superblock %+v)", *h, *sb)
	}
	if uint64(dev.Size()) < h.DeviceBytes {
		return nil, fmt.Errorf("the data device is %d bytes but the volume needs %d: truncated image", dev.Size(), h.DeviceBytes)
	}
	if int(h.IOUnit) != dev.IOUnit() {
		return nil, fmt.Errorf("the data device was opened with a %d B I/O unit but the volume was made with %d B", dev.IOUnit(), h.IOUnit)
	}
	return &Volume{Header: h, Super: sb, Dev: dev, KV: kv}, nil
}

// Close closes the device (waiting for its requests), releases the data
// device's reservation and the ownership (Owner) if there are, closes the
// metadata and releases the lock.
func (v *Volume) Close() error {
	var errs []error
	if v.Dev != nil {
		errs = append(errs, v.Dev.Close())
	}
	if v.Reservation != nil {
		errs = append(errs, v.Reservation.release(v.Owner == nil || v.Owner.Err() == nil))
	}
	if v.Owner != nil {
		errs = append(errs, v.releaseOwner())
	}
	if v.KV != nil {
		errs = append(errs, v.KV.Close())
	}
	if v.lock != nil {
		errs = append(errs, v.lock.Close())
	}
	return errors.Join(errs...)
}

// Paths inside a volume directory.
func dataPath(dir string) string { return filepath.Join(dir, "data") }
func metaPath(dir string) string { return filepath.Join(dir, "meta") }
func lockPath(dir string) string { return filepath.Join(dir, "lock") }

// ParseSize parses a size such as 4096, 512K, 64M, 16G or 1T (binary units;
// an optional trailing "iB" or "B" is accepted).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: use a number of bytes with an optional K, M, G or T suffix", s)
	}
	return n * mult, nil
}
