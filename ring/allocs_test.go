package ring

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/directdev"
	"github.com/sluicefs/sluice/volume"
)

// TestColdReadAllocs: W4's cycle on the real data device (directdev), one
// cold buffered read at a time through the ring: Submit's inline attempt
// creates the page, starts its device read and arms the retry; Wait runs
// the retry, which copies, and reaps the completion. It allocates only the
// new page (one object per read); a read of a cached page allocates
// nothing.
func TestColdReadAllocs(t *testing.T) {
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
	fs, err := sluice.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	const pages = 1024
	want := pattern(pages*4096, 5)
	w, err := fs.OpenFile("/f", sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(want, 0); err != nil { // direct: nothing cached
		t.Fatal(err)
	}
	w.Close()
	f, err := fs.OpenFile("/f", sluice.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := New(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 4096)
	cqes := make([]CQE, 1)
	ctx := context.Background()
	var flags CQEFlags
	next := int64(0)
	read := func() {
		// Every other page, so that readahead reads only the page asked
		// for.
		off := next * 4096
		next = (next + 2) % pages
		if err := r.Read(f, buf, off, 0, 7); err != nil {
			t.Fatal(err)
		}
		if n, err := r.Wait(ctx, 1, cqes); n != 1 || err != nil {
			t.Fatalf("Wait: %d, %v", n, err)
		}
		c := cqes[0]
		if c.Err != nil || c.Res != len(buf) || c.Tag != 7 || !bytes.Equal(buf, want[off:off+4096]) {
			t.Fatalf("read at %d: %+v", off, c)
		}
		flags |= c.Flags
	}
	read() // warm the pools and the ring's waiter
	if n := testing.AllocsPerRun(200, read); n > 1 {
		t.Errorf("cold read: %.2f allocations per read, want at most 1 (the page)", n)
	}
	if flags&CQERetried == 0 || flags&CQEPunted != 0 {
		t.Errorf("the cold reads completed with flags %v, want retried ones and no punt", flags)
	}
	next = 0
	if n := testing.AllocsPerRun(200, read); n > 0 {
		t.Errorf("cached read: %.2f allocations per read", n)
	}
}
