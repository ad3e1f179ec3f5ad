package memdev

import (
	"testing"

	"github.com/sluicefs/sluice/device"
)

// A device of many GiB allocates storage only for the chunks written.
func TestSparse(t *testing.T) {
	const size = 64 << 30
	d, err := New(size, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := device.AlignedBuf(4096)
	p[0], p[4095] = 1, 2
	for _, off := range []int64{0, size / 2, size - 4096} {
		if err := device.WriteAt(d, p, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := device.Flush(d); err != nil {
		t.Fatal(err)
	}
	if n := d.cur.allocated(); n != 3*chunkSize {
		t.Fatalf("current image: %d bytes allocated, want %d", n, 3*chunkSize)
	}
	// A write straddling two chunks allocates both.
	q := device.AlignedBuf(8192)
	if err := device.WriteAt(d, q, 5*chunkSize-4096); err != nil {
		t.Fatal(err)
	}
	if n := d.cur.allocated(); n != 5*chunkSize {
		t.Fatalf("after a straddling write: %d bytes allocated, want %d", n, 5*chunkSize)
	}
	r := device.AlignedBuf(4096)
	if err := device.ReadAt(d, r, size-4096); err != nil || r[0] != 1 || r[4095] != 2 {
		t.Fatalf("read back at the end: %v %d %d", err, r[0], r[4095])
	}
	if err := device.ReadAt(d, r, size/4); err != nil || r[0] != 0 {
		t.Fatalf("unwritten chunk: %v %d", err, r[0])
	}
	c := d.CrashImage(1)
	if n := c.cur.allocated(); n < 3*chunkSize || n > 5*chunkSize {
		t.Fatalf("crash image: %d bytes allocated, want %d to %d", n, 3*chunkSize, 5*chunkSize)
	}
}
