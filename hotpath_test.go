package sluice

import (
	"bytes"
	"errors"
	"path/filepath"
	"runtime/metrics"
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
	fs := deviceFS(t)
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

// TestBufferedReadAsyncAllocs checks what a cold buffered read through
// File.ReadAsync allocates (W4's path, on the real data device): the
// inline attempt that creates the page, starts its device read and arms
// the retry, then the retried attempt that copies from it, allocate only
// the new page (one object); a read of a cached page allocates nothing.
func TestBufferedReadAsyncAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	fs := deviceFS(t)
	const pages = 1024
	want := pattern(pages*4096, 3)
	w, err := fs.OpenFile("/f", O_RDWR|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(want, 0); err != nil { // direct: nothing cached
		t.Fatal(err)
	}
	w.Close()
	f, err := fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	retried := make(chan struct{}, 1)
	retry := func() { retried <- struct{}{} }
	done := func(int, error) { t.Error("a buffered read was queued") }
	// Every other page, so that readahead sees no sequential reader and
	// reads only the page asked for.
	next := int64(0)
	read := func() int64 {
		off := next * 4096
		next = (next + 2) % pages
		n, err := f.ReadAsync(buf, off, 0, retry, done)
		if err == ErrRetryArmed {
			<-retried
			n, err = f.ReadAsync(buf, off, 0, retry, done)
		}
		if err != nil || n != len(buf) || !bytes.Equal(buf, want[off:off+4096]) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
		return off
	}
	read() // warm the pools
	if n := testing.AllocsPerRun(200, func() { read() }); n > 1 {
		t.Errorf("cold read: %.2f allocations per read, want at most 1 (the page)", n)
	}
	if fs.Counters()["AsyncReadCallbacksArmed"] == 0 {
		t.Error("no read armed a retry: the test measured no cold read")
	}
	next = 0
	if n := testing.AllocsPerRun(200, func() { read() }); n > 0 {
		t.Errorf("cached read: %.2f allocations per read", n)
	}
}

// TestSyncDirectCompletionInWaiter: the completion work of a synchronous
// direct write that may block (converting unwritten extents, publishing
// appends) runs in the waiting caller, not on a goroutine started per
// request: a stream of O_DIRECT appends (ParallelAppends) and of 512 B
// writes into unwritten blocks (BlockRangeExclusion) starts almost no
// goroutines besides the memory device's (before: one per write, two per
// append).
func TestSyncDirectCompletionInWaiter(t *testing.T) {
	pol := Concurrent()
	e := newEnv(t, envConfig{size: 256 << 20, opts: Options{Policy: &pol}})
	app, err := e.fs.OpenFile("/log", O_WRONLY|O_APPEND|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	fresh, err := e.fs.OpenFile("/fresh", O_RDWR|O_CREAT|O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	const writes = 200
	if err := fresh.Fallocate(0, 0, writes*4096); err != nil {
		t.Fatal(err)
	}
	buf := device.AlignedBuf(4096)
	for _, c := range []struct {
		name string
		op   func(i int) error
	}{
		{"O_DIRECT append", func(int) error { _, err := app.Write(buf); return err }},
		{"512 B into an unwritten block", func(i int) error { _, err := fresh.WriteAt(buf[:512], int64(i)*4096+512); return err }},
	} {
		before, reqs := goroutinesCreated(), uint64(e.fs.Counters()["DeviceWrites"])
		for i := range writes {
			if err := c.op(i); err != nil {
				t.Fatal(err)
			}
		}
		// The memory device completes each request on a goroutine of
		// its own: those are not the engine's.
		reqs = uint64(e.fs.Counters()["DeviceWrites"]) - reqs
		if n := goroutinesCreated() - before - reqs; n > writes/10 {
			t.Errorf("%s: %d goroutines started over %d synchronous writes (besides the device's %d)", c.name, n, writes, reqs)
		}
	}
}

// goroutinesCreated is the process's count of goroutines started so far.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// deviceFS opens a new 64 MiB volume over the real data device
// (directdev), closed at the end of the test; it skips where the host
// refuses O_DIRECT.
func deviceFS(t *testing.T) *FS {
	t.Helper()
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
	t.Cleanup(func() { fs.Close() })
	return fs
}
