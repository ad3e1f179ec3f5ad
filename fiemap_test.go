package sluice

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// TestFiemap: FS_IOC_FIEMAP as XFS reports it: written and unwritten
// extents with their device byte offsets, dirty pages over a hole as one
// delayed allocation (Physical 0, DELALLOC|UNKNOWN) until FIEMAP_FLAG_SYNC
// writes them back, LAST on the last extent of the range, ranges trimmed
// to their blocks, and ioctl_fiemap's errors.
func TestFiemap(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	const bs = 4096
	if _, err := f.WriteAt(pattern(2*bs, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil { // allocate blocks 0-1
		t.Fatal(err)
	}
	if err := f.Fallocate(FallocKeepSize, 4*bs, 4*bs); err != nil { // unwritten 4-7
		t.Fatal(err)
	}
	if _, err := f.WriteAt(pattern(2*bs, 2), 10*bs); err != nil { // dirty over a hole: 10-11
		t.Fatal(err)
	}
	dev := func(fb uint64) uint64 {
		f.in.mu.Lock()
		defer f.in.mu.Unlock()
		x, ok := f.in.ext.At(fb)
		if !ok {
			t.Fatalf("block %d not mapped", fb)
		}
		return (x.DevBlock + fb - x.FileBlock) * bs
	}
	show := func(es []FiemapExtent) string {
		s := ""
		for _, x := range es {
			s += fmt.Sprintf("[%d+%d @%d %#x]", x.Logical, x.Length, x.Physical, x.Flags)
		}
		return s
	}
	check := func(name string, got []FiemapExtent, err error, want []FiemapExtent) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if show(got) != show(want) {
			t.Fatalf("%s:\n got %s\nwant %s", name, show(got), show(want))
		}
	}

	got, err := f.Fiemap(0, ^uint64(0), 0)
	check("whole file", got, err, []FiemapExtent{
		{0, dev(0), 2 * bs, 0},
		{4 * bs, dev(4), 4 * bs, FiemapExtentUnwritten},
		{10 * bs, 0, 2 * bs, FiemapExtentDelalloc | FiemapExtentUnknown | FiemapExtentLast},
	})
	got, err = f.Fiemap(bs+100, 4*bs, 0) // bytes in blocks 1-5
	check("range", got, err, []FiemapExtent{
		{bs, dev(1), bs, 0},
		{4 * bs, dev(4), 2 * bs, FiemapExtentUnwritten | FiemapExtentLast},
	})
	got, err = f.Fiemap(2*bs, 2*bs, 0)
	check("hole", got, err, nil)

	got, err = f.Fiemap(0, ^uint64(0), FiemapFlagSync)
	if err != nil {
		t.Fatal(err)
	}
	check("after FIEMAP_FLAG_SYNC", got, err, []FiemapExtent{
		{0, dev(0), 2 * bs, 0},
		{4 * bs, dev(4), 4 * bs, FiemapExtentUnwritten},
		{10 * bs, dev(10), 2 * bs, FiemapExtentLast},
	})
	if len(f.in.delalloc) != 0 {
		t.Fatalf("reservations left after FIEMAP_FLAG_SYNC: %v", f.in.delalloc)
	}

	got, err = f.Fiemap(0, ^uint64(0), FiemapFlagXattr)
	check("xattr fork", got, err, nil)
	for _, c := range []struct {
		start, length uint64
		flags         uint32
		want          error
	}{
		{0, 0, 0, syscall.EINVAL},
		{1 << 63, 1, 0, syscall.EFBIG},
		{0, 1, 0x4, syscall.EBADR}, // FIEMAP_FLAG_CACHE is ext4's
	} {
		if _, err := f.Fiemap(c.start, c.length, c.flags); !errors.Is(err, c.want) {
			t.Errorf("Fiemap(%d, %d, %#x) = %v, want %v", c.start, c.length, c.flags, err, c.want)
		}
	}
	if err := e.fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := e.fs.OpenFile("/d", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err = d.Fiemap(0, ^uint64(0), 0)
	check("directory", got, err, nil)
	checkClean(t, e.fs)
}
