package fusefs

import (
	"bytes"
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// writeDirectFile creates name through the mount with n bytes of pattern
// written O_DIRECT and fsynced, so that later writes inside it are
// overwrites of written blocks.
func writeDirectFile(t *testing.T, e *mountEnv, name string, n int) []byte {
	t.Helper()
	fd, err := syscall.Open(e.path(name), syscall.O_CREAT|syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	b := alignedBuf(n)
	copy(b, pattern(n, 7))
	if k, err := syscall.Pwrite(fd, b, 0); err != nil || k != n {
		t.Fatalf("pwrite: %d %v", k, err)
	}
	if err := syscall.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	return b
}

// overlap runs two non-extending 4 KiB O_DIRECT writers on one file with a
// gate holding the engine's device writes, and returns how many writes the
// gate held at once and the engine's MaxDirectInFlightFile.
func overlap(t *testing.T, pol sluice.Policy) (held int, maxInFlight int64) {
	e := newMountEnv(t, envOpts{engine: sluice.Options{Policy: &pol}})
	writeDirectFile(t, e, "f", 64<<10)
	fds := make([]int, 2)
	for i := range fds {
		fd, err := syscall.Open(e.path("f"), syscall.O_WRONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		fds[i] = fd
	}
	e.eng.ResetCounters()
	gate := e.fault.NewGate(faultdev.Writes)
	defer gate.Remove()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, fd := range fds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := alignedBuf(4096)
			copy(b, pattern(4096, byte(i)))
			if _, err := syscall.Pwrite(fd, b, int64(i)*16384); err != nil {
				errs <- err
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The second writer either reaches the device too (the engine let
	// both in) or stays queued in the kernel; give it time to arrive.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	_ = gate.WaitHeld(ctx2, 2)
	held = gate.Held()
	maxInFlight = e.eng.Counters()["MaxDirectInFlightFile"]
	gate.Open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return held, maxInFlight
}

// TestParallelDirectWritesOverlap: with the concurrent policy the open is
// answered FOPEN_PARALLEL_DIRECT_WRITES, the kernel passes both writes
// through, and both are in flight in the engine at once.
func TestParallelDirectWritesOverlap(t *testing.T) {
	requireFUSE(t)
	held, max := overlap(t, sluice.Concurrent())
	if held != 2 || max < 2 {
		t.Fatalf("concurrent policy: %d writes held at the gate, MaxDirectInFlightFile %d; want both in flight", held, max)
	}
}

// TestClassicDirectWritesSerialised: under the classic policy the open
// does not say FOPEN_PARALLEL_DIRECT_WRITES, so the kernel takes the inode
// lock exclusive for each direct write and the engine sees one at a time.
func TestClassicDirectWritesSerialised(t *testing.T) {
	requireFUSE(t)
	held, max := overlap(t, sluice.Classic())
	if held != 1 || max != 1 {
		t.Fatalf("classic policy: %d writes held at the gate, MaxDirectInFlightFile %d; want exactly one", held, max)
	}
}

// TestDirectIONotCached: O_DIRECT data through the mount never enters the
// engine's page cache.
func TestDirectIONotCached(t *testing.T) {
	for _, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: cc.opts})
			e.eng.ResetCounters()
			want := writeDirectFile(t, e, "f", 1<<20)
			fd, err := syscall.Open(e.path("f"), syscall.O_RDONLY|syscall.O_DIRECT, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			got := alignedBuf(1 << 20)
			if n, err := syscall.Pread(fd, got, 0); err != nil || n != len(got) {
				t.Fatalf("pread: %d %v", n, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("read back differs")
			}
			c := e.eng.Counters()
			if c["CachePagesCreated"] != 0 || c["BufferedReads"] != 0 || c["BufferedWrites"] != 0 {
				t.Fatalf("O_DIRECT I/O touched the page cache: %v", c)
			}
			if c["DirectWrites"] == 0 || c["DirectReads"] == 0 {
				t.Fatalf("no direct I/O reached the engine: %v", c)
			}
		})
	}
}

// TestUnalignedDirectIO: O_DIRECT reads and writes at byte offsets work
// through the mount (the fallback path) and stay coherent with aligned
// direct and buffered I/O; StrictDirectIO refuses them with EINVAL.
func TestUnalignedDirectIO(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	base := writeDirectFile(t, e, "f", 16384)
	fd, err := syscall.Open(e.path("f"), syscall.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	msg := []byte("unaligned direct write")
	if n, err := syscall.Pwrite(fd, msg, 1003); err != nil || n != len(msg) {
		t.Fatalf("unaligned pwrite: %d %v", n, err)
	}
	want := append([]byte(nil), base...)
	copy(want[1003:], msg)
	// Unaligned direct read.
	got := make([]byte, 100)
	if n, err := syscall.Pread(fd, got, 990); err != nil || n != 100 {
		t.Fatalf("unaligned pread: %d %v", n, err)
	}
	if !bytes.Equal(got, want[990:1090]) {
		t.Fatalf("unaligned read: got %q", got)
	}
	// Aligned direct read sees the unaligned write.
	all := alignedBuf(16384)
	if n, err := syscall.Pread(fd, all, 0); err != nil || n != len(all) {
		t.Fatalf("pread: %d %v", n, err)
	}
	if !bytes.Equal(all, want) {
		t.Fatal("aligned direct read does not see the unaligned write")
	}
	// So does a buffered read.
	b, err := os.ReadFile(e.path("f"))
	if err != nil || !bytes.Equal(b, want) {
		t.Fatalf("buffered read does not see the unaligned write: %v", err)
	}
	// Extending unaligned write.
	if n, err := syscall.Pwrite(fd, msg, 16384+5); err != nil || n != len(msg) {
		t.Fatalf("extending unaligned pwrite: %d %v", n, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Size != 16384+5+int64(len(msg)) {
		t.Fatalf("size after extending unaligned write: %d %v", st.Size, err)
	}
	e.checkClean()

	s := newMountEnv(t, envOpts{fuse: Options{StrictDirectIO: true}})
	writeDirectFile(t, s, "f", 4096)
	sfd, err := syscall.Open(s.path("f"), syscall.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(sfd)
	if _, err := syscall.Pwrite(sfd, msg, 3); err != syscall.EINVAL {
		t.Fatalf("strict: unaligned pwrite: %v, want EINVAL", err)
	}
	if _, err := syscall.Pread(sfd, got, 3); err != syscall.EINVAL {
		t.Fatalf("strict: unaligned pread: %v, want EINVAL", err)
	}
}
