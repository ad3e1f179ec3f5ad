package faultdev_test

import (
	"bytes"
	"errors"
	"math/bits"
	"slices"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

const blk = 4096

// flippedBits returns the positions (byte offset*8 + bit) of the bits in
// which got differs from want.
func flippedBits(got, want []byte) []int64 {
	var fs []int64
	for i := range got {
		x := got[i] ^ want[i]
		for x != 0 {
			b := bits.TrailingZeros8(x)
			fs = append(fs, int64(i)*8+int64(b))
			x &^= 1 << b
		}
	}
	return fs
}

// perBlock returns the number of flipped bits in each block of n bytes.
func perBlock(fs []int64, n int64) map[int64]int {
	m := map[int64]int{}
	for _, f := range fs {
		m[f/8/n]++
	}
	return m
}

// fill writes nblocks blocks of distinct data at 0 through the inner
// device and returns them.
func fill(t *testing.T, d *faultdev.Device, nblocks int) []byte {
	t.Helper()
	p := device.AlignedBuf(nblocks * blk)
	for i := range p {
		p[i] = byte(i*7 + i/blk)
	}
	if err := device.WriteAt(d.Inner(), p, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAt reads n bytes at off through dev, failing the test on an error.
func readAt(t *testing.T, dev device.Device, off int64, n int) []byte {
	t.Helper()
	p := device.AlignedBuf(n)
	if err := device.ReadAt(dev, p, off); err != nil {
		t.Fatalf("read [%d, +%d): %v", off, n, err)
	}
	return p
}

// A Corruption of one block flips one bit in that block of every read
// that touches it, and nothing else; the stored data stays good, and
// disabling or removing the injection heals the device.
func TestCorruptRange(t *testing.T) {
	d, m := newDev(t)
	good := fill(t, d, 4)
	inj := d.Inject(faultdev.CorruptRange(blk, blk))

	all := readAt(t, d, 0, 4*blk)
	fs := flippedBits(all, good)
	if len(fs) != 1 || fs[0]/8/blk != 1 {
		t.Fatalf("read of 4 blocks: flipped bits %v, want one in block 1", fs)
	}
	// The block read alone: the same bit.
	if got := flippedBits(readAt(t, d, blk, blk), good[blk:2*blk]); !slices.Equal(got, []int64{fs[0] - blk*8}) {
		t.Fatalf("read of block 1: flipped bits %v, want [%d]", got, fs[0]-blk*8)
	}
	// Any part of it: one bit in that part.
	for off := int64(blk); off < 2*blk; off += 512 {
		if got := flippedBits(readAt(t, d, off, 512), good[off:off+512]); len(got) != 1 {
			t.Fatalf("read [%d, +512): flipped bits %v, want one", off, got)
		}
	}
	// The neighbours, read alone, are good.
	for _, off := range []int64{0, 2 * blk, 3 * blk} {
		if !bytes.Equal(readAt(t, d, off, blk), good[off:off+blk]) {
			t.Fatalf("read of the block at %d corrupted", off)
		}
	}
	// The stored data is good.
	if !bytes.Equal(readAt(t, m, 0, 4*blk), good) {
		t.Fatal("stored data changed")
	}
	const corrupted = 1 + 1 + 8
	s := d.Stats()
	if s.Read.Corrupted != corrupted || s.Read.Completed != corrupted+3 || s.Read.Failed != 0 || s.Read.Injected != 0 ||
		inj.Injected() != corrupted {
		t.Fatalf("stats: %v; injection: %v", s, inj)
	}

	inj.Disable()
	if !bytes.Equal(readAt(t, d, 0, 4*blk), good) {
		t.Fatal("read corrupted while the corruption is disabled")
	}
	inj.Enable()
	if got := flippedBits(readAt(t, d, 0, 4*blk), good); !slices.Equal(got, fs) {
		t.Fatalf("re-enabled: flipped bits %v, want %v", got, fs)
	}
	inj.Remove()
	if !bytes.Equal(readAt(t, d, 0, 4*blk), good) {
		t.Fatal("read corrupted after Remove")
	}
	if s := d.Stats(); s.Read.Corrupted != corrupted+1 || inj.Injected() != corrupted+1 {
		t.Fatalf("stats: %v; injection: %v", s, inj)
	}
}

// With a Unit, a read gets one bit flipped in every piece of the range it
// touches; the seed decides where.
func TestCorruptionUnit(t *testing.T) {
	d, _ := newDev(t)
	good := fill(t, d, 8)
	c := &faultdev.Corruption{Range: faultdev.Range{Off: blk, Len: 4 * blk}, Unit: blk, Seed: 7}
	inj := d.Inject(c)

	fs := flippedBits(readAt(t, d, 0, 8*blk), good)
	if got := perBlock(fs, blk); len(got) != 4 || got[1] != 1 || got[2] != 1 || got[3] != 1 || got[4] != 1 {
		t.Fatalf("flipped bits per block %v, want one in each of blocks 1 to 4", got)
	}
	// A read straddling blocks 1 and 2: one bit in each half.
	off := int64(blk + blk/2)
	got := flippedBits(readAt(t, d, off, blk), good[off:off+blk])
	if pb := perBlock(got, blk/2); len(got) != 2 || pb[0] != 1 || pb[1] != 1 {
		t.Fatalf("straddling read: flipped bits %v, want one in each half", got)
	}
	// Another seed flips other bits.
	inj.Remove()
	d.Inject(&faultdev.Corruption{Range: c.Range, Unit: blk, Seed: 8})
	if other := flippedBits(readAt(t, d, 0, 8*blk), good); len(other) != 4 || slices.Equal(other, fs) {
		t.Fatalf("seed 8 flipped bits %v, seed 7 %v", other, fs)
	}
}

// When selects among the reads; writes are never corrupted.
func TestCorruptionWhen(t *testing.T) {
	d, m := newDev(t)
	good := fill(t, d, 2)
	d.Inject(&faultdev.Corruption{When: faultdev.Nth(2, faultdev.AnyOp)})
	// The write is not seen by When, nor corrupted.
	w := buf(blk, 3)
	if err := device.WriteAt(d, w, blk); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAt(t, m, blk, blk), w) {
		t.Fatal("write corrupted")
	}
	copy(good[blk:], w)
	for i := range 3 {
		fs := flippedBits(readAt(t, d, 0, 2*blk), good)
		want := 0
		if i == 1 {
			want = 1
		}
		if len(fs) != want {
			t.Fatalf("read %d: flipped bits %v, want %d", i+1, fs, want)
		}
	}
	if s := d.Stats(); s.Read.Corrupted != 1 || s.Write.Corrupted != 0 {
		t.Fatalf("stats: %v", s)
	}
}

// A read that fails, before or after the I/O, is not corrupted.
func TestCorruptionOfFailedReads(t *testing.T) {
	d, _ := newDev(t)
	good := fill(t, d, 1)
	corrupt := d.Inject(faultdev.CorruptRange(0, blk))
	fault := d.Inject(faultdev.OnOps(faultdev.Reads))
	mustErr(t, device.ReadAt(d, device.AlignedBuf(blk), 0), device.OpRead, 0, syscall.EIO)
	fault.Remove()
	d.Inject(&faultdev.Fault{When: faultdev.Reads, AfterIO: true})
	p := device.AlignedBuf(blk)
	mustErr(t, device.ReadAt(d, p, 0), device.OpRead, 0, syscall.EIO)
	if !bytes.Equal(p, good) {
		t.Fatal("read failed after the I/O came back corrupted")
	}
	if s := d.Stats(); s.Read.Corrupted != 0 || s.Read.Failed != 2 || corrupt.Injected() != 0 {
		t.Fatalf("stats: %v; injection %v", s, corrupt)
	}
}

// CorruptStored changes what every later read returns, through the wrapper
// or not: the data a read through the equivalent Corruption returned over
// the good data. It bypasses the injectors, gates and counters.
func TestCorruptStored(t *testing.T) {
	d, m := newDev(t)
	good := fill(t, d, 4)
	r := faultdev.Range{Off: blk, Len: 2 * blk}
	inj := d.Inject(&faultdev.Corruption{Range: r, Unit: 512, Seed: 5})
	want := readAt(t, d, r.Off, int(r.Len))
	inj.Remove()
	d.ResetStats()

	fault := d.Inject(faultdev.OnOps(faultdev.AnyOp))
	gate := d.NewGate(faultdev.AnyOp)
	if err := d.CorruptStored(r, 512, 5); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(); s != (faultdev.Stats{}) || fault.Injected() != 0 || gate.Held() != 0 {
		t.Fatalf("CorruptStored was counted, failed or held: %v; %v; %v", s, fault, gate)
	}
	fault.Remove()
	gate.Remove()

	for range 2 {
		for _, dev := range []device.Device{d, m} {
			got := readAt(t, dev, 0, 4*blk)
			if !bytes.Equal(got[r.Off:r.Off+r.Len], want) {
				t.Fatal("stored data is not what the equivalent Corruption returned")
			}
			if pb := perBlock(flippedBits(got, good), 512); len(pb) != 16 {
				t.Fatalf("flipped bits per sector %v, want one in each of sectors 8 to 23", pb)
			}
		}
	}
	if s := d.Stats(); s.Read.Corrupted != 0 || s.Read.Completed != 2 {
		t.Fatalf("stats: %v", s)
	}
	// Once more: other bits flip.
	if err := d.CorruptStored(faultdev.Range{Off: 0, Len: blk}, 0, 6); err != nil {
		t.Fatal(err)
	}
	if fs := flippedBits(readAt(t, d, 0, blk), good[:blk]); len(fs) != 1 {
		t.Fatalf("flipped bits %v, want one", fs)
	}
}

func TestCorruptStoredErrors(t *testing.T) {
	d, m := newDev(t)
	for _, r := range []faultdev.Range{
		{Off: 0, Len: 0},
		{Off: 0, Len: -512},
		{Off: -512, Len: 512},
		{Off: 100, Len: 512},
		{Off: 0, Len: 100},
		{Off: d.Size(), Len: 512},
		{Off: d.Size() - 512, Len: 1024},
	} {
		if err := d.CorruptStored(r, 0, 1); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("CorruptStored(%v) = %v, want EINVAL", r, err)
		}
	}
	if len(m.Pending()) != 0 {
		t.Fatal("a refused CorruptStored wrote")
	}
	if err := d.CorruptStored(faultdev.Range{Off: d.Size() - 512, Len: 512}, 0, 1); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := d.CorruptStored(faultdev.Range{Off: 0, Len: 512}, 0, 1); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("CorruptStored after Close = %v, want ErrClosed", err)
	}
}

func TestCorruptionStrings(t *testing.T) {
	for _, c := range []struct {
		c    *faultdev.Corruption
		want string
	}{
		{&faultdev.Corruption{}, "corrupt reads: one bit, seed 0"},
		{faultdev.CorruptRange(4096, 4096), "corrupt reads of [4096, +4096): one bit, seed 0"},
		{&faultdev.Corruption{Range: faultdev.Range{Off: 0, Len: 8192}, Unit: 4096, Seed: 1, When: faultdev.Nth(2, faultdev.Reads)},
			"corrupt reads of [0, +8192): one bit per 4096 B, seed 1, on the 2nd reads"},
	} {
		if got := c.c.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
	d, _ := newDev(t)
	inj := d.Inject(faultdev.CorruptRange(0, 512))
	if err := device.ReadAt(d, device.AlignedBuf(512), 0); err != nil {
		t.Fatal(err)
	}
	if got, want := inj.String(), "corrupt reads of [0, +512): one bit, seed 0 (enabled, 1 corrupted)"; got != want {
		t.Errorf("Injection.String() = %q, want %q", got, want)
	}
	if got, want := d.Stats().Read.String(), "1 submitted, 1 completed, 0 failed, 0 injected, 1 corrupted, 512 bytes, in flight 0 (max 1)"; got != want {
		t.Errorf("OpStats.String() = %q, want %q", got, want)
	}
}
