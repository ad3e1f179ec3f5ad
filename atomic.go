package sluice

import (
	"math/bits"
	"syscall"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// Untorn (atomic) writes: RWFAtomic, the kernel's RWF_ATOMIC. A write of
// n bytes (a power of two between AtomicWriteLimits' UnitMin and UnitMax,
// at an offset aligned to n, O_DIRECT) is, after any crash, either all old
// or all new. It needs no device support: it is the copy-on-write path
// (cow.go) applied to every written block of the range, shared or not.
//
//   - Holes and unwritten blocks of the range are written in place and
//     converted; written blocks (durable, or a pending remap) are written
//     to staging blocks and remapped. The conversions and remaps of one
//     write are made in core together, with one epoch (convertWritten),
//     so the sync point that persists them does so in one transaction,
//     after the device flush that made the data durable: a crash before
//     it finds the records as before the write (the old blocks, or
//     unwritten: zeros, which is what the range held), after it the new
//     data whole. A torn device write can only tear staging blocks or
//     unwritten ones, which no record exposes until that flush.
//   - A block of the range whose conversion is still pending (written in
//     place by an earlier write, its record still unwritten) is remapped
//     too: its record keeps saying unwritten until the sync point, which
//     then names the new block and frees the old one (extmap's
//     OldUnwritten). Writing it in place instead could leave a crash after
//     the next sync point with part of the new write.
//   - The write holds its blocks' range (iolock.RangeLock) until its remap
//     is made, so two atomic writes of one block take turns, and the
//     second copies again the block the first remapped (the first's
//     staging block is freed).
//
// Where the hardware has an atomic write unit (NVMe AWUPF, SCSI WRITE
// ATOMIC), an in-place write of one device request would be cheaper; no
// device sluice drives reports one (directdev opens files and loop
// devices, which have none), so every write to written blocks goes out of
// place. AtomicWritesInPlace counts the writes that found no written block
// (their conversion is the switch), AtomicWritesOutOfPlace the others.

// atomicWriteMax is the largest untorn write: 1 MiB, the bounce-free
// direct write of 256 staging blocks at 4 KiB (one staging refill), and
// XFS's software atomic writes' order of magnitude. It must be a power of
// two, and at least 64 KiB.
const atomicWriteMax = 1 << 20

// AtomicWriteLimits describes the untorn writes a file system takes, as
// statx(2) reports them with STATX_WRITE_ATOMIC: a write of n bytes is
// untorn when n is a power of two in [UnitMin, UnitMax] at an offset
// aligned to n, in one buffer (SegmentsMax 1). Zero values mean none.
type AtomicWriteLimits struct {
	UnitMin, UnitMax, SegmentsMax int64
}

// AtomicWriteLimits reports the untorn writes the file system takes:
// from one block to 1 MiB (none with Options.NoAtomicWrites).
func (fs *FS) AtomicWriteLimits() AtomicWriteLimits {
	if fs.opts.NoAtomicWrites {
		return AtomicWriteLimits{}
	}
	return AtomicWriteLimitsOf(fs.blockSize)
}

// AtomicWriteLimitsOf returns the untorn writes a volume of blocks of
// blockSize bytes takes (sluice stat shows them).
func AtomicWriteLimitsOf(blockSize int64) AtomicWriteLimits {
	return AtomicWriteLimits{UnitMin: blockSize, UnitMax: max(blockSize, atomicWriteMax), SegmentsMax: 1}
}

// atomicWriteCheck applies RWFAtomic's rules before any write path runs,
// with Linux 6.18's errors in its order (kiocb_set_rw_flags, then XFS's
// xfs_file_write_iter and generic_atomic_write_valid): EOPNOTSUPP if atomic
// writes are off; EINVAL for a length outside the limits, not a power of
// two, or at an offset not aligned to it; EOPNOTSUPP for a buffered write.
// An append gets EINVAL: sluice takes none (the offset, EOF, is known only
// under the lock, after the caller committed to the write; Linux checks
// it then).
func (fs *FS) atomicWriteCheck(k *kiocb) error {
	lim := fs.AtomicWriteLimits()
	n := int64(len(k.buf))
	switch {
	case lim.UnitMax == 0:
		return errnof(syscall.EOPNOTSUPP, "atomic writes are off (Options.NoAtomicWrites)")
	case n < lim.UnitMin || n > lim.UnitMax:
		return errnof(syscall.EINVAL, "atomic write of %d bytes: the limits are %d to %d", n, lim.UnitMin, lim.UnitMax)
	case bits.OnesCount64(uint64(n)) != 1:
		return errnof(syscall.EINVAL, "atomic write of %d bytes: not a power of two", n)
	case k.append:
		return errnof(syscall.EINVAL, "sluice takes no atomic appends")
	case k.off%n != 0:
		return errnof(syscall.EINVAL, "atomic write of %d bytes at offset %d: not aligned to its length", n, k.off)
	case !k.direct:
		return errnof(syscall.EOPNOTSUPP, "an atomic write needs O_DIRECT")
	}
	fs.counters.AtomicWrites.Add(1)
	return nil
}

// writesOutOfPlace reports whether direct write k puts every written block
// it covers out of place: an untorn write, or any write on a checksummed
// volume (sums.go).
func (in *inode) writesOutOfPlace(k *kiocb) bool { return k.atomic || in.fs.sums != nil }

// cowSegsLocked returns the written segments of segs (the mapping of a
// range, holes already allocated), which an untorn or checksummed write
// puts out of place: durable blocks, pending remaps and pending
// conversions alike (extmap Remap takes them all).
//
// Preconditions: in.mu is held; the extents are loaded.
func cowSegsLocked(segs []extmap.Segment) (cow []extmap.Segment) {
	for _, s := range segs {
		if !s.Hole && s.State == meta.Written {
			cow = append(cow, s)
		}
	}
	return cow
}
