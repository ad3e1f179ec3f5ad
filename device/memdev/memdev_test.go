package memdev_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/devicetest"
	"github.com/sluicefs/sluice/device/memdev"
)

func newDev(t testing.TB, size int64, ioUnit int) *memdev.Device {
	t.Helper()
	d, err := memdev.New(size, memdev.Options{IOUnit: ioUnit})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, ioUnit int) device.Device {
		return newDev(t, 4<<20, ioUnit)
	})
}

// The conformance suite again, on crash images of a device with history:
// a crash image must be a full device in its own right.
func TestConformanceCrashImage(t *testing.T) {
	devicetest.Run(t, func(t *testing.T, ioUnit int) device.Device {
		d := newDev(t, 4<<20, ioUnit)
		defer d.Close()
		return d.CrashImage(1) // nothing written: zero-filled, as Run requires
	})
}

func TestNewValidation(t *testing.T) {
	for _, c := range []struct {
		size   int64
		ioUnit int
		ok     bool
	}{
		{1 << 20, 0, true},
		{1 << 20, 512, true},
		{1 << 20, 1 << 20, true},
		{512, 0, true},
		{0, 512, false},
		{-512, 512, false},
		{1000, 512, false},
		{4096 + 512, 4096, false},
		{1 << 20, 1000, false},
		{1 << 20, 256, false},
		{4 << 20, 2 << 20, false},
	} {
		d, err := memdev.New(c.size, memdev.Options{IOUnit: c.ioUnit})
		if (err == nil) != c.ok {
			t.Errorf("New(%d, IOUnit %d): err = %v, want ok = %v", c.size, c.ioUnit, err, c.ok)
		}
		if err == nil {
			want := c.ioUnit
			if want == 0 {
				want = device.DefaultIOUnit
			}
			if d.IOUnit() != want || d.Size() != c.size {
				t.Errorf("New(%d, IOUnit %d): got size %d unit %d", c.size, c.ioUnit, d.Size(), d.IOUnit())
			}
		}
	}
	opts := memdev.Options{}
	if s := opts.EnsureDefaults().String(); s != "memdev.Options{IOUnit: 512}" {
		t.Errorf("String = %q", s)
	}
}

// pattern returns n aligned bytes derived from tag, different in every
// sector for different tags.
func pattern(n int, tag byte) []byte {
	p := device.AlignedBuf(n)
	for i := range p {
		p[i] = tag ^ byte(i/memdev.SectorSize*31) ^ byte(i)
	}
	return p
}

func readAll(t testing.TB, d device.Device, off int64, n int) []byte {
	t.Helper()
	p := device.AlignedBuf(n)
	if err := device.ReadAt(d, p, off); err != nil {
		t.Fatal(err)
	}
	return p
}

func write(t testing.TB, d device.Device, p []byte, off int64) {
	t.Helper()
	if err := device.WriteAt(d, p, off); err != nil {
		t.Fatal(err)
	}
}

func flush(t testing.TB, d device.Device) {
	t.Helper()
	if err := device.Flush(d); err != nil {
		t.Fatal(err)
	}
}

func TestPendingAndFlush(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	if n := len(d.Pending()); n != 0 {
		t.Fatalf("fresh device: %d pending", n)
	}
	a, b := pattern(1024, 1), pattern(4096, 2)
	write(t, d, a, 0)
	write(t, d, b, 8192)
	ps := d.Pending()
	if len(ps) != 2 || ps[0].Off != 0 || ps[1].Off != 8192 || !bytes.Equal(ps[0].Data, a) ||
		!bytes.Equal(ps[1].Data, b) || ps[0].Seq >= ps[1].Seq || !ps[0].Completed || ps[1].Sectors() != 8 {
		t.Fatalf("pending = %+v", ps)
	}
	ps[0].Data[0] ^= 0xff // a copy: must not affect the device
	flush(t, d)
	if n := len(d.Pending()); n != 0 {
		t.Fatalf("after flush: %d pending", n)
	}
	c := d.CrashImageWith(func(memdev.PendingWrite) memdev.Fate { t.Fatal("no pending writes expected"); return memdev.Fate{} })
	if !bytes.Equal(readAll(t, c, 0, 1024), a) || !bytes.Equal(readAll(t, c, 8192, 4096), b) {
		t.Fatal("flushed writes missing from crash image")
	}
	write(t, d, a, 4096)
	if ps := d.Pending(); len(ps) != 1 || ps[0].Off != 4096 {
		t.Fatalf("pending after a later write = %+v", ps)
	}
	// Reads do not enter the log.
	readAll(t, d, 0, 1<<20)
	if n := len(d.Pending()); n != 1 {
		t.Fatalf("after read: %d pending", n)
	}
}

// A Flush covers only the writes that completed before it was submitted: a
// write submitted after it stays pending, even if the write completes
// before the Flush does.
func TestFlushCoversOnlyEarlierWrites(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	write(t, d, pattern(512, 1), 0)
	release := make(chan struct{})
	flushDone := make(chan error, 1)
	fl := device.Request{Op: device.OpFlush, Done: func(_ *device.Request, err error) { <-release; flushDone <- err }}
	if err := d.Submit(&fl); err != nil {
		t.Fatal(err)
	}
	write(t, d, pattern(512, 2), 4096) // completes while the flush is in flight
	close(release)
	if err := <-flushDone; err != nil {
		t.Fatal(err)
	}
	if ps := d.Pending(); len(ps) != 1 || ps[0].Off != 4096 {
		t.Fatalf("pending = %+v, want only the write submitted after the flush", ps)
	}
}

func TestCrashKeepDropTear(t *testing.T) {
	d := newDev(t, 1<<20, 4096)
	defer d.Close()
	old := pattern(8192, 1)
	write(t, d, old, 0)
	flush(t, d)
	a, b := pattern(4096, 2), pattern(4096, 3)
	write(t, d, a, 0)
	write(t, d, b, 4096)
	crash := func(fa, fb memdev.Fate) []byte {
		t.Helper()
		c := d.CrashImageWith(func(w memdev.PendingWrite) memdev.Fate {
			if w.Off == 0 {
				return fa
			}
			return fb
		})
		defer c.Close()
		if n := len(c.Pending()); n != 0 {
			t.Fatalf("crash image has %d pending writes", n)
		}
		return readAll(t, c, 0, 8192)
	}
	keep, drop := memdev.Fate{Kind: memdev.Keep}, memdev.Fate{Kind: memdev.Drop}
	if got := crash(keep, drop); !bytes.Equal(got[:4096], a) || !bytes.Equal(got[4096:], old[4096:]) {
		t.Error("keep a, drop b: wrong image")
	}
	if got := crash(drop, keep); !bytes.Equal(got[:4096], old[:4096]) || !bytes.Equal(got[4096:], b) {
		t.Error("drop a, keep b: wrong image")
	}
	// Tear a 4 KiB write (one I/O unit) at 512 B sectors 1, 2 and 7.
	sectors := []bool{false, true, true, false, false, false, false, true}
	got := crash(memdev.Fate{Kind: memdev.Tear, Sectors: sectors}, drop)
	for i, kept := range sectors {
		want := old[i*512 : (i+1)*512]
		if kept {
			want = a[i*512 : (i+1)*512]
		}
		if !bytes.Equal(got[i*512:(i+1)*512], want) {
			t.Errorf("torn write: sector %d (kept %v) wrong", i, kept)
		}
	}
	if !bytes.Equal(got[4096:], old[4096:]) {
		t.Error("torn write: dropped write present")
	}
	// The original is untouched and still works.
	if !bytes.Equal(readAll(t, d, 0, 4096), a) || !bytes.Equal(readAll(t, d, 4096, 4096), b) {
		t.Error("original device changed by CrashImageWith")
	}
	if n := len(d.Pending()); n != 2 {
		t.Errorf("original device has %d pending, want 2", n)
	}
	write(t, d, old, 0)
	flush(t, d)
	if n := len(d.Pending()); n != 0 {
		t.Errorf("original device has %d pending after flush, want 0", n)
	}
}

func TestCrashWithBadTearPanics(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	write(t, d, pattern(1024, 1), 0)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a tear with the wrong number of sectors")
		}
	}()
	d.CrashImageWith(func(memdev.PendingWrite) memdev.Fate {
		return memdev.Fate{Kind: memdev.Tear, Sectors: []bool{true}}
	})
}

// Over many seeds, every sector of a crash image holds either its durable
// content or the content of a pending write to it, flushed data is always
// there, and every fate (whole, absent, torn) occurs.
func TestCrashImageSectors(t *testing.T) {
	for _, unit := range []int{512, 4096} {
		t.Run(fmt.Sprint(unit), func(t *testing.T) {
			const size = 64 << 10
			d := newDev(t, 1<<20, unit)
			defer d.Close()
			old := pattern(size, 1)
			write(t, d, old, 0)
			flush(t, d)
			flushed := pattern(8192, 7) // flushed after being written over old
			write(t, d, flushed, size)
			flush(t, d)
			news := pattern(size, 2)
			write(t, d, news, 0)
			var whole, absent, torn int
			for seed := range uint64(200) {
				c := d.CrashImage(seed)
				got := readAll(t, c, 0, size+8192)
				c.Close()
				if !bytes.Equal(got[size:], flushed) {
					t.Fatalf("seed %d: flushed data missing", seed)
				}
				var nOld, nNew int
				for s := 0; s < size; s += memdev.SectorSize {
					switch sec := got[s : s+memdev.SectorSize]; {
					case bytes.Equal(sec, news[s:s+memdev.SectorSize]):
						nNew++
					case bytes.Equal(sec, old[s:s+memdev.SectorSize]):
						nOld++
					default:
						t.Fatalf("seed %d: sector %d is neither old nor new", seed, s/memdev.SectorSize)
					}
				}
				switch {
				case nOld == 0:
					whole++
				case nNew == 0:
					absent++
				default:
					torn++
				}
			}
			if whole == 0 || absent == 0 || torn == 0 {
				t.Fatalf("fates over 200 seeds: whole %d, absent %d, torn %d", whole, absent, torn)
			}
		})
	}
}

func TestCrashImageDeterministic(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		off := int64(rng.IntN(256)) * 512
		write(t, d, pattern(512*(1+rng.IntN(16)), byte(i)), off)
		if i%10 == 4 {
			flush(t, d)
		}
	}
	images := map[string]bool{}
	for seed := range uint64(20) {
		a := readAll(t, d.CrashImage(seed), 0, 1<<20)
		b := readAll(t, d.CrashImage(seed), 0, 1<<20)
		if !bytes.Equal(a, b) {
			t.Fatalf("seed %d: two crash images differ", seed)
		}
		images[string(a)] = true
	}
	if len(images) < 10 {
		t.Fatalf("20 seeds gave only %d distinct images", len(images))
	}
}

// Overlapping pending writes are applied in the order they were written,
// each with its own fate.
func TestCrashOverlapping(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	const n = 8 * memdev.SectorSize
	old := pattern(n, 1)
	write(t, d, old, 0)
	flush(t, d)
	a := pattern(n, 2)
	b := pattern(n/2, 3) // over the middle of a
	write(t, d, a, 0)
	write(t, d, b, n/4)
	// b after a: keeping both gives what the device reads now.
	c := d.CrashImageWith(func(memdev.PendingWrite) memdev.Fate { return memdev.Fate{Kind: memdev.Keep} })
	if !bytes.Equal(readAll(t, c, 0, n), readAll(t, d, 0, n)) {
		t.Fatal("keeping every pending write does not give the current image")
	}
	// Over random seeds, each sector holds old, a or (inside b's range) b.
	for seed := range uint64(200) {
		got := readAll(t, d.CrashImage(seed), 0, n)
		for s := 0; s < n; s += memdev.SectorSize {
			sec := got[s : s+memdev.SectorSize]
			ok := bytes.Equal(sec, old[s:s+memdev.SectorSize]) || bytes.Equal(sec, a[s:s+memdev.SectorSize])
			if s >= n/4 && s < n/4+n/2 {
				ok = ok || bytes.Equal(sec, b[s-n/4:s-n/4+memdev.SectorSize])
			}
			if !ok {
				t.Fatalf("seed %d: sector %d holds data no write put there", seed, s/memdev.SectorSize)
			}
		}
	}
	// Keep a, tear b to its first sector only.
	c = d.CrashImageWith(func(w memdev.PendingWrite) memdev.Fate {
		if w.Off == 0 {
			return memdev.Fate{Kind: memdev.Keep}
		}
		s := make([]bool, w.Sectors())
		s[0] = true
		return memdev.Fate{Kind: memdev.Tear, Sectors: s}
	})
	want := bytes.Clone(a)
	copy(want[n/4:], b[:memdev.SectorSize])
	if !bytes.Equal(readAll(t, c, 0, n), want) {
		t.Fatal("keep a, tear b: wrong image")
	}
}

// A crash image is an independent device: writing to it does not touch the
// original, and vice versa.
func TestCrashImageIndependent(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	a := pattern(4096, 1)
	write(t, d, a, 0)
	flush(t, d)
	c := d.CrashImage(0)
	defer c.Close()
	write(t, c, pattern(4096, 2), 0)
	if !bytes.Equal(readAll(t, d, 0, 4096), a) {
		t.Fatal("write to crash image changed the original")
	}
	write(t, d, pattern(4096, 3), 0)
	if !bytes.Equal(readAll(t, c, 0, 4096), pattern(4096, 2)) {
		t.Fatal("write to original changed the crash image")
	}
	if n := len(c.Pending()); n != 1 {
		t.Fatalf("crash image: %d pending, want 1", n)
	}
}

// Many goroutines writing, reading, flushing and taking crash images at
// once: under -race this checks the locking; the final flushed state must be
// in every crash image.
func TestConcurrentCrash(t *testing.T) {
	d := newDev(t, 1<<20, 512)
	defer d.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			buf := device.AlignedBuf(8192)
			for i := range 300 {
				off := int64(rng.IntN(1<<20/8192)) * 8192
				switch {
				case i%7 == 0:
					if err := device.Flush(d); err != nil {
						t.Error(err)
					}
				case i%50 == 1:
					d.CrashImage(uint64(i))
				case i%2 == 0:
					if err := device.ReadAt(d, buf, off); err != nil {
						t.Error(err)
					}
				default:
					if err := device.WriteAt(d, buf, off); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	flush(t, d)
	if n := len(d.Pending()); n != 0 {
		t.Fatalf("%d pending after a final flush", n)
	}
	if !bytes.Equal(readAll(t, d.CrashImage(9), 0, 1<<20), readAll(t, d, 0, 1<<20)) {
		t.Fatal("crash image after a final flush differs from the device")
	}
}

func BenchmarkParallel4K(b *testing.B) {
	for _, op := range []string{"read", "write"} {
		b.Run(op, func(b *testing.B) {
			d := newDev(b, 64<<20, 512)
			defer d.Close()
			b.SetBytes(4096)
			b.RunParallel(func(pb *testing.PB) {
				buf := device.AlignedBuf(4096)
				rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
				n := 0
				for pb.Next() {
					off := int64(rng.IntN(64<<20/4096)) * 4096
					var err error
					if op == "read" {
						err = device.ReadAt(d, buf, off)
					} else {
						err = device.WriteAt(d, buf, off)
						if n++; n%64 == 0 {
							err = device.Flush(d)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
