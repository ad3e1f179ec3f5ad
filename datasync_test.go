package sluice

import (
	"bytes"
	"testing"

	"github.com/sluicefs/sluice/device"
)

// TestFdatasyncFlushOnly: fdatasync and O_DSYNC writes sync no metadata
// when what reads the data back is durable already (an overwrite of
// written blocks, only the times changed): a device flush, and a crash
// after it keeps the data. A change the data needs (a new size, a
// conversion, a truncate committed but not synced) takes a sync point, and
// O_SYNC always does.
func TestFdatasyncFlushOnly(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", O_DIRECT)
	if _, err := f.Pwrite(device.AlignedBuf(3*4096), 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	c := &e.fs.counters
	step := func(what string, write func() error, wantFlushOnly bool) {
		t.Helper()
		points, flushes := c.SyncPoints.Load(), c.DataSyncsFlushOnly.Load()
		if err := write(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		gotFlushOnly := c.DataSyncsFlushOnly.Load()-flushes == 1 && c.SyncPoints.Load() == points
		gotPoint := c.DataSyncsFlushOnly.Load() == flushes && c.SyncPoints.Load() > points
		if wantFlushOnly && !gotFlushOnly || !wantFlushOnly && !gotPoint {
			t.Errorf("%s: %d flush-only syncs, %d sync points; want a flush only: %v",
				what, c.DataSyncsFlushOnly.Load()-flushes, c.SyncPoints.Load()-points, wantFlushOnly)
		}
	}
	pattern4k := func(seed byte) []byte {
		b := device.AlignedBuf(4096)
		copy(b, pattern(4096, seed))
		return b
	}
	overwrite := func(seed byte, off int64, flags RWFlags) func() error {
		return func() error { _, err := f.Pwrite(pattern4k(seed), off, flags); return err }
	}
	fdatasync := func(w func() error) func() error {
		return func() error {
			if err := w(); err != nil {
				return err
			}
			return f.Fdatasync()
		}
	}

	step("overwrite + fdatasync", fdatasync(overwrite(1, 0, 0)), true)
	c1 := openEnv(t, e.disks.CrashWith(nil, 1, 0), e.opts)
	if g, err := c1.fs.OpenFile("/f", O_RDONLY, 0); err != nil {
		t.Fatal(err)
	} else if got := mustReadAll(t, g); !bytes.Equal(got[:4096], pattern(4096, 1)) || len(got) != 3*4096 {
		t.Errorf("after a crash: %d bytes, the first block as written: %v", len(got), bytes.Equal(got[:4096], pattern(4096, 1)))
	}
	c1.close()

	step("RWF_DSYNC overwrite", overwrite(2, 4096, RWFDsync), true)
	step("RWF_SYNC overwrite", overwrite(3, 4096, RWFSync), false)
	step("extending write + fdatasync", fdatasync(overwrite(4, 3*4096, 0)), false)
	if err := f.Fallocate(FallocKeepSize, 4*4096, 4096); err != nil {
		t.Fatal(err)
	}
	step("write into a preallocated block + fdatasync", fdatasync(overwrite(5, 4*4096, 0)), false)
	// A truncate commits without syncing: the size the data needs.
	if err := f.Truncate(2 * 4096); err != nil {
		t.Fatal(err)
	}
	step("overwrite after a truncate + fdatasync", fdatasync(overwrite(6, 0, 0)), false)
	c2 := openEnv(t, e.disks.CrashWith(nil, 2, 0), e.opts)
	if a, err := c2.fs.Lstat("/f"); err != nil || a.Size != 2*4096 {
		t.Errorf("after a crash: %+v %v, want the truncated size %d", a, err, 2*4096)
	}
	checkClean(t, c2.fs)
	c2.close()
	step("overwrite + fdatasync again", fdatasync(overwrite(7, 0, 0)), true)

	// Buffered: the writeback of an overwrite converts nothing.
	g, err := e.fs.OpenFile("/f", O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	step("buffered overwrite + fdatasync", func() error {
		if _, err := g.Pwrite(pattern(100, 8), 10, 0); err != nil {
			return err
		}
		return g.Fdatasync()
	}, true)
	// An extending write inside the written EOF block changes only the
	// size, which the data needs.
	if _, err := g.Pwrite(pattern(100, 9), 2*4096, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Fsync(); err != nil {
		t.Fatal(err)
	}
	step("buffered write that extends inside the EOF block + fdatasync", func() error {
		if _, err := g.Pwrite(pattern(100, 10), 2*4096+100, 0); err != nil {
			return err
		}
		return g.Fdatasync()
	}, false)
	g.Close()
	f.Close()
	e.close()
}
