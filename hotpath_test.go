package sluice

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/volume"
)

// TestDirectIONoAllocs checks that a synchronous O_DIRECT read, an aligned
// overwrite and a sub-block overwrite (the W1 and W2 paths) allocate
// nothing, on a volume over the real data device (directdev).
func TestDirectIONoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := volume.Mkfs(dir, volume.MkfsOptions{Size: 64 << 20}); err != nil {
		if errors.Is(err, directdev.ErrNoDirectIO) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	fs, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	f, err := fs.OpenFile("/f", O_RDWR|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(pattern(1<<20, 1), 0); err != nil {
		t.Fatal(err)
	}
	buf := device.AlignedBuf(4096)
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"read 512 B", func() error { _, err := f.ReadAt(buf[:512], 8192+512); return err }},
		{"read 4 KiB", func() error { _, err := f.ReadAt(buf, 8192); return err }},
		{"write 4 KiB", func() error { _, err := f.WriteAt(buf, 8192); return err }},
		{"write 512 B", func() error { _, err := f.WriteAt(buf[:512], 8192+512); return err }},
	} {
		if err := c.op(); err != nil { // warm the pools
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(200, func() {
			if err := c.op(); err != nil {
				t.Fatal(err)
			}
		}); n > 0 {
			t.Errorf("%s: %.2f allocations per call", c.name, n)
		}
	}
}
