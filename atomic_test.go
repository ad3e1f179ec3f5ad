package sluice

import (
	"bytes"
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
)

// Untorn writes (atomic.go). That a crash never tears one is the crash
// harness's TestTargetedAtomicWritesUntorn; these pin the rules and routes.

// TestAtomicWriteChecks: RWFAtomic's argument rules and errors, in Linux
// 6.18's order (XFS's length limits, then generic_atomic_write_valid), and
// the limits reported as statx's STATX_WRITE_ATOMIC does.
func TestAtomicWriteChecks(t *testing.T) {
	e := newEnv(t, envConfig{})
	lim := e.fs.AtomicWriteLimits()
	if lim != (AtomicWriteLimits{UnitMin: 4096, UnitMax: 1 << 20, SegmentsMax: 1}) {
		t.Fatalf("limits %+v", lim)
	}
	d := e.mustCreate("/d", O_DIRECT)
	b := e.mustCreate("/b", 0)
	a := e.mustCreate("/a", O_DIRECT|O_APPEND)
	for _, tc := range []struct {
		what string
		f    *File
		n    int
		off  int64
		want syscall.Errno
	}{
		{"below the minimum", d, 2048, 0, syscall.EINVAL},
		{"above the maximum", d, 2 << 20, 0, syscall.EINVAL},
		{"not a power of two", d, 12 << 10, 0, syscall.EINVAL},
		{"offset not aligned to the length", d, 16 << 10, 4096, syscall.EINVAL},
		{"an append", a, 4096, 0, syscall.EINVAL},
		{"buffered", b, 16 << 10, 0, syscall.EOPNOTSUPP},
		{"buffered, not a power of two", b, 12 << 10, 0, syscall.EINVAL},
		{"whole 1 MiB", d, 1 << 20, 1 << 20, 0},
		{"one block", d, 4096, 4096, 0},
	} {
		n, err := tc.f.Pwrite(device.AlignedBuf(tc.n), tc.off, RWFAtomic)
		if tc.want == 0 {
			if err != nil || n != tc.n {
				t.Errorf("%s: %d, %v", tc.what, n, err)
			}
		} else if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
	if c := e.fs.Counters(); c["AtomicWrites"] != 2 {
		t.Errorf("AtomicWrites = %d, want 2", c["AtomicWrites"])
	}
	off := newEnv(t, envConfig{opts: Options{NoAtomicWrites: true}})
	f := off.mustCreate("/d", O_DIRECT)
	if _, err := f.Pwrite(device.AlignedBuf(4096), 0, RWFAtomic); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("NoAtomicWrites: %v, want EOPNOTSUPP", err)
	}
	if lim := off.fs.AtomicWriteLimits(); lim != (AtomicWriteLimits{}) {
		t.Errorf("NoAtomicWrites: limits %+v", lim)
	}
	if _, err := d.Pwrite(device.AlignedBuf(4096), 0, RWFAtomic|RWFNoWait); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("RWFNoWait: %v, want EAGAIN", err)
	}
}

// fileDevBlock returns the device block that backs file block fb of f.
func fileDevBlock(t *testing.T, f *File, fb uint64) uint64 {
	t.Helper()
	in := f.in
	in.mu.Lock()
	defer in.mu.Unlock()
	m, err := in.extentsLocked()
	if err != nil {
		t.Fatal(err)
	}
	s := m.Lookup(fb, 1, nil)[0]
	if s.Hole {
		t.Fatalf("file block %d is a hole", fb)
	}
	return s.DevBlock
}

// TestAtomicWriteRoutes: an atomic write into holes is written in place
// and converted; one over written blocks (a pending conversion, a pending
// remap of an earlier atomic write) goes to staging blocks, with no sync
// point. Every route leaves
// the data whole, and the volume clean after a reopen.
func TestAtomicWriteRoutes(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", O_DIRECT)
	const n = 64 << 10
	e.fs.ResetCounters()
	if _, err := f.Pwrite(pattern(n, 1), 0, RWFAtomic); err != nil {
		t.Fatal(err)
	}
	c := e.fs.Counters()
	if c["AtomicWritesInPlace"] != 1 || c["AtomicWritesOutOfPlace"] != 0 || c["CowStagedBlocks"] != 0 {
		t.Fatalf("into holes: %v", c)
	}
	// Over a pending conversion: out of place, no sync point.
	e.fs.ResetCounters()
	before := fileDevBlock(t, f, 0)
	if _, err := f.Pwrite(pattern(16<<10, 2), 0, RWFAtomic); err != nil {
		t.Fatal(err)
	}
	c = e.fs.Counters()
	if c["SyncPoints"] != 0 || c["AtomicWritesOutOfPlace"] != 1 || c["CowStagedBlocks"] != 4 {
		t.Fatalf("over a pending conversion: %v", c)
	}
	if after := fileDevBlock(t, f, 0); after == before {
		t.Fatalf("file block 0 still at device block %d: written in place", after)
	}
	// Over the pending remap it left: out of place again, no sync point.
	e.fs.ResetCounters()
	if _, err := f.Pwrite(pattern(16<<10, 3), 0, RWFAtomic); err != nil {
		t.Fatal(err)
	}
	c = e.fs.Counters()
	if c["AtomicWritesOutOfPlace"] != 1 || c["SyncPoints"] != 0 {
		t.Fatalf("over a pending remap: %v", c)
	}
	want := pattern(n, 1)
	copy(want, pattern(16<<10, 3))
	wantBytes(t, "after the atomic writes", f, want)
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	checkClean(t, e.fs)
	f.Close()
	e = e.reopen()
	g, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantBytes(t, "after a reopen", g, want)
	checkClean(t, e.fs)
}

// TestAtomicWritesOfOneRangeTakeTurns: atomic writes hold their blocks'
// range until their remap, so writes of one range reach the device one at
// a time (the second copies the block the first remapped), and writes of
// disjoint ranges all at once. Without the range, two writes of one block
// would both stage it and remap over each other's pending remap.
func TestAtomicWritesOfOneRangeTakeTurns(t *testing.T) {
	const n = 4
	for _, sameRange := range []bool{true, false} {
		name := "disjoint"
		if sameRange {
			name = "same-range"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envConfig{})
			f := e.mustCreate("/f", O_DIRECT)
			if _, err := f.Pwrite(pattern(n*4096, 9), 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
			// Fill the staging pool first, so that no refill commits
			// while the writes are held.
			if _, err := f.Pwrite(pattern(4096, 8), 0, RWFAtomic); err != nil {
				t.Fatal(err)
			}
			e.fault.ResetStats()
			g := e.fault.NewGate(faultdev.Writes)
			bufs := make([][]byte, n)
			var wg sync.WaitGroup
			for i := range n {
				bufs[i] = bytes.Repeat([]byte{byte(i + 1)}, 4096)
				buf := device.AlignedBuf(4096)
				copy(buf, bufs[i])
				off := int64(0)
				if !sameRange {
					off = int64(i) * 4096
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := f.Pwrite(buf, off, RWFAtomic); err != nil {
						t.Error(err)
					}
				}()
			}
			passGate(t, g, n, !sameRange, "atomic writes", nil)
			wg.Wait()
			g.Remove()
			want := int64(n)
			if sameRange {
				want = 1
			}
			if got := e.fault.Stats().Write.MaxInFlight; got != want {
				t.Fatalf("max writes in flight = %d, want %d", got, want)
			}
			got := mustReadAll(t, f)
			if sameRange {
				whole := false
				for _, b := range bufs {
					whole = whole || bytes.Equal(got[:4096], b)
				}
				if !whole {
					t.Fatalf("block 0 is no one write whole")
				}
			}
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
			checkClean(t, e.fs)
		})
	}
}
