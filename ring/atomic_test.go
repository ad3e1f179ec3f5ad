package ring

import (
	"errors"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
)

// TestAtomicWrites: the ring passes sluice.RWFAtomic through: untorn
// O_DIRECT writes complete (their inline attempt, which may not block,
// punts them), out of place over written blocks, and one that breaks the
// rules completes with EINVAL.
func TestAtomicWrites(t *testing.T) {
	const n = 4
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", n*16<<10, 1)
	f := e.open("/f", sluice.O_RDWR|sluice.O_DIRECT)
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	r := e.ring(n+1, nil)
	e.fs.ResetCounters()
	data := device.AlignedBuf(n * 16 << 10)
	for i := range data {
		data[i] = byte(i*13 + 5)
	}
	for i := 0; i < n; i++ {
		if err := r.Write(f, data[i*16<<10:(i+1)*16<<10], int64(i)*16<<10, sluice.RWFAtomic, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Write(f, data[:12<<10], 0, sluice.RWFAtomic, n); err != nil {
		t.Fatal(err)
	}
	for _, c := range reap(t, r, n+1) {
		switch {
		case c.Tag == n:
			if !errors.Is(c.Err, syscall.EINVAL) {
				t.Fatalf("a 12 KiB atomic write: %d %v, want EINVAL", c.Res, c.Err)
			}
		case c.Err != nil || c.Res != 16<<10:
			t.Fatalf("atomic write %d: %d %v", c.Tag, c.Res, c.Err)
		}
	}
	if c := e.fs.Counters(); c["AtomicWritesOutOfPlace"] != n {
		t.Fatalf("AtomicWritesOutOfPlace = %d, want %d", c["AtomicWritesOutOfPlace"], n)
	}
	got := make([]byte, n*16<<10)
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "atomic writes read back", got, data)
}
