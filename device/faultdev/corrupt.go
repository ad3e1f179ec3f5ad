package faultdev

import (
	"fmt"
	"math"
	"syscall"

	"github.com/sluicefs/sluice/device"
)

// Corruption is the Injector that corrupts data silently, for testing data
// checksums: the reads it selects run on the inner device as usual and,
// once the inner device has completed one successfully, it flips bits in
// the data read, just before the submitter's Done runs. The read reports
// success. The stored data is untouched: a read it does not select (or a
// read after Disable or Remove) returns the good data. To corrupt the
// stored data itself, use Device.CorruptStored.
//
// Which reads: those that touch Range and that When matches. Where: Range
// is cut into pieces of Unit bytes, the first starting at Range.Off, and a
// selected read gets one bit flipped in each piece it touches, in one byte
// of the part of the piece it reads. The byte is chosen by Seed and the
// device offset of that part, the bit by Seed and the byte's device
// offset, so the same reads of the same data always come back corrupted
// the same way, and a read that covers a whole piece always has the same
// bit flipped in it. A bit is always flipped: the data returned always
// differs from the data stored.
//
// The device decides which reads to corrupt, and where, at the injector
// stage (see the package documentation), on the submitting goroutine; it
// flips the bits when the inner device completes the read. A read failed
// by an injector or by the inner device is not corrupted, nor is one that
// a Fault with AfterIO fails after the I/O. Several Corruptions that select
// the same read all flip their bits, in installation order (so two that
// flip the same bit cancel out). Disabling a Corruption spares the reads
// submitted afterwards; a read it has already selected is still corrupted.
//
// The device recognizes a Corruption by its type: MaybeError always returns
// nil, so a Corruption wrapped inside another Injector corrupts nothing.
// Its fields must not change once it is installed.
type Corruption struct {
	// When selects, among the reads that touch Range, the ones to corrupt.
	// It is evaluated only for those reads (so Nth(2, Reads) means the
	// second read of Range) and never for a write or a flush. The default
	// value (nil) selects every read of Range.
	When Predicate
	// Range is the device range whose bytes may be corrupted: reads that
	// do not touch it are left alone, and the bits flipped all lie in it.
	// The default value (the zero Range) means the whole device.
	Range Range
	// Unit is the size in bytes of the pieces Range is cut into, each of
	// which gets one bit flipped in a selected read that touches it: the
	// file system block size, to corrupt every block read. The default
	// value (0) makes Range one piece: one bit per selected read.
	Unit int64
	// Seed chooses the bytes and the bits flipped. The default value is 0.
	Seed uint64
}

// CorruptRange returns a Corruption of every read that touches
// [off, off+n): one bit flipped in one byte of the part of the range each
// such read covers. With n the block size, it corrupts exactly one block.
func CorruptRange(off, n int64) *Corruption {
	return &Corruption{Range: Range{Off: off, Len: n}}
}

// MaybeError returns nil: a Corruption never fails a request.
func (c *Corruption) MaybeError(IO) error { return nil }

// String returns e.g. "corrupt reads of [0, +8192): one bit per 4096 B,
// seed 1, on the 2nd reads".
func (c *Corruption) String() string {
	s := "corrupt reads"
	if c.Range != (Range{}) {
		s += " of " + c.Range.String()
	}
	s += ": one bit"
	if c.Unit > 0 {
		s += fmt.Sprintf(" per %d B", c.Unit)
	}
	s += fmt.Sprintf(", seed %d", c.Seed)
	if c.When != nil {
		s += ", on " + c.When.String()
	}
	return s
}

// flip is one bit to flip in a read's data.
type flip struct {
	off  int64 // the byte's device offset
	mask byte  // the bit
}

// corruption is the work one Corruption's Injection left for the end of a
// read.
type corruption struct {
	i     *Injection
	flips []flip
}

// flips returns the bits c flips in the data of io, or nil if c does not
// select io.
func (c *Corruption) flips(io IO) []flip {
	if io.Op != device.OpRead {
		return nil
	}
	if c.Range != (Range{}) && !c.Range.Evaluate(io) {
		return nil
	}
	if c.When != nil && !c.When.Evaluate(io) {
		return nil
	}
	return c.flipsIn(io.Off, io.Off+int64(io.Len))
}

// flipsIn returns the bits c flips in the data of [lo, hi), a range of the
// device that c selects.
func (c *Corruption) flipsIn(lo, hi int64) []flip {
	start, end := int64(0), int64(math.MaxInt64)
	if c.Range != (Range{}) {
		start, end = c.Range.Off, c.Range.Off+c.Range.Len
	}
	lo, hi = max(lo, start), min(hi, end)
	if lo >= hi {
		return nil
	}
	unit := c.Unit
	if unit <= 0 {
		unit = end - start
	}
	var fs []flip
	for p := start + (lo-start)/unit*unit; ; p += unit {
		// [a, b) is the part of the piece at p that [lo, hi) covers.
		a, b := max(lo, p), hi
		if unit < hi-p {
			b = p + unit
		}
		at := a + int64(mix(c.Seed, a)%uint64(b-a))
		fs = append(fs, flip{off: at, mask: 1 << (mix(c.Seed^bitSalt, at) & 7)})
		if b == hi {
			return fs
		}
	}
}

// bitSalt separates the choice of a bit from the choice of a byte.
const bitSalt = 0x626974 // "bit"

// mix hashes x under seed (the SplitMix64 finalizer).
func mix(seed uint64, x int64) uint64 {
	z := seed + 0x9e3779b97f4a7c15*(uint64(x)+1)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// apply flips fs in buf, the data of the device range starting at off.
func apply(buf []byte, off int64, fs []flip) {
	for _, f := range fs {
		buf[f.off-off] ^= f.mask
	}
}

// applyCorruption flips, in the data of st's read, the bits its Corruptions chose,
// and counts them. It runs when the inner device has completed the read
// successfully, before the submitter's Done.
func (st *ioState) applyCorruption() {
	for _, c := range st.corrupt {
		apply(st.r.Buf, st.r.Off, c.flips)
		c.i.injected.Add(1)
	}
	st.d.stats.op[device.OpRead].corrupted.Add(1)
}

// CorruptStored flips bits in the inner device's stored data in r, so that
// every later read of them, through the wrapper or not, returns corrupted
// data: the same data a read of exactly r returns through an installed
// Corruption{Range: r, Unit: unit, Seed: seed}, over the good data (one bit
// in each piece of unit bytes; unit 0 makes r one piece). r must be
// non-empty, inside the device and aligned to its I/O unit; otherwise
// CorruptStored changes nothing and returns an error wrapping EINVAL.
//
// It reads r from the inner device and writes it back, synchronously,
// bypassing the injectors, latencies, gates and counters. It is not atomic
// with respect to I/O: the caller must not let writes to r run
// concurrently. The corrupting write is an ordinary write to the inner
// device, durable only after a flush: memdev, for one, keeps it pending (a
// crash image may drop it) until the next flush through the wrapper or the
// inner device. After Close it returns an error wrapping device.ErrClosed.
func (d *Device) CorruptStored(r Range, unit int64, seed uint64) error {
	u := int64(d.ioUnit)
	switch {
	case r.Len <= 0 || r.Off < 0 || r.Off > d.size-r.Len:
		return fmt.Errorf("faultdev: corrupt stored %v: not a non-empty range of the %d B device: %w", r, d.size, syscall.EINVAL)
	case r.Off%u != 0 || r.Len%u != 0:
		return fmt.Errorf("faultdev: corrupt stored %v: not aligned to the %d B I/O unit: %w", r, u, syscall.EINVAL)
	}
	if !d.life.Enter() {
		return fmt.Errorf("faultdev: corrupt stored %v: %w", r, device.ErrClosed)
	}
	defer d.life.Exit()
	buf := device.AlignedBuf(int(r.Len))
	if err := device.ReadAt(d.inner, buf, r.Off); err != nil {
		return fmt.Errorf("faultdev: corrupt stored %v: %w", r, err)
	}
	c := Corruption{Range: r, Unit: unit, Seed: seed}
	apply(buf, r.Off, c.flipsIn(r.Off, r.Off+r.Len))
	if err := device.WriteAt(d.inner, buf, r.Off); err != nil {
		return fmt.Errorf("faultdev: corrupt stored %v: %w", r, err)
	}
	return nil
}
