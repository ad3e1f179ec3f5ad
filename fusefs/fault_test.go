package fusefs

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/device/faultdev"
)

// recorder is an injector that fails nothing and records the device
// ranges written while it is enabled.
type recorder struct {
	mu     sync.Mutex
	ranges []faultdev.Range
}

func (r *recorder) MaybeError(io faultdev.IO) error {
	if io.Op.String() == "write" {
		r.mu.Lock()
		r.ranges = append(r.ranges, faultdev.Range{Off: io.Off, Len: int64(io.Len)})
		r.mu.Unlock()
	}
	return nil
}

func (r *recorder) String() string { return "recorder" }

// TestDeviceReadError: a device read error of one file reaches its reader
// as EIO; the mount keeps serving other files, and the same file once the
// device heals.
func TestDeviceReadError(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	b := writeDirectFile(t, e, "b", 64<<10)
	rec := &recorder{}
	inj := e.fault.Inject(rec)
	a := writeDirectFile(t, e, "a", 64<<10)
	inj.Remove()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ranges) == 0 {
		t.Fatal("no device write recorded for a")
	}
	var preds []faultdev.Predicate
	for _, r := range rec.ranges {
		preds = append(preds, r)
	}
	bad := e.fault.Inject(&faultdev.Fault{When: faultdev.And(faultdev.Reads, faultdev.Or(preds...))})
	read := func(name string) ([]byte, error) {
		fd, err := syscall.Open(e.path(name), syscall.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			return nil, err
		}
		defer syscall.Close(fd)
		buf := alignedBuf(64 << 10)
		n, err := syscall.Pread(fd, buf, 0)
		return buf[:max(n, 0)], err
	}
	if _, err := read("a"); err != syscall.EIO {
		t.Fatalf("read of a with failing device: %v, want EIO", err)
	}
	if got, err := read("b"); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("read of b while a fails: %v", err)
	}
	if !strings.Contains(e.logs.String(), "input/output error") {
		t.Errorf("the I/O error was not logged; log:\n%s", e.logs.String())
	}
	bad.Remove()
	if got, err := read("a"); err != nil || !bytes.Equal(got, a) {
		t.Fatalf("read of a after the device healed: %v", err)
	}
}

// TestDeviceWriteError: a failing device write reaches the writer as EIO
// and the mount keeps serving.
func TestDeviceWriteError(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	writeDirectFile(t, e, "a", 16<<10)
	bad := e.fault.Inject(faultdev.OnOps(faultdev.Writes))
	fd, err := syscall.Open(e.path("a"), syscall.O_WRONLY|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Pwrite(fd, alignedBuf(4096), 0); err != syscall.EIO {
		t.Fatalf("write with failing device: %v, want EIO", err)
	}
	bad.Remove()
	if _, err := syscall.Pwrite(fd, alignedBuf(4096), 0); err != nil {
		t.Fatalf("write after the device healed: %v", err)
	}
	if err := os.WriteFile(e.path("c"), []byte("still serving"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestENOSPC: writing more than fits ends in ENOSPC (after a short write,
// as write(2) may), with exactly the bytes reported written in the file
// and nothing half-written; the volume stays consistent and usable.
func TestENOSPC(t *testing.T) {
	for _, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{size: 8 << 20, fuse: cc.opts})
			if err := os.WriteFile(e.path("small"), []byte("hello"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, flags := range []int{syscall.O_DIRECT, 0} {
				fd, err := syscall.Open(e.path("big"), syscall.O_CREAT|syscall.O_TRUNC|syscall.O_RDWR|flags, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				data := alignedBuf(16 << 20)
				copy(data, pattern(len(data), 3))
				total := 0
				for total < len(data) {
					n, err := syscall.Pwrite(fd, data[total:], int64(total))
					if n > 0 {
						total += n
					}
					if err != nil {
						if !errors.Is(err, syscall.ENOSPC) {
							t.Fatalf("flags %#x: write failed with %v, want ENOSPC", flags, err)
						}
						break
					}
				}
				t.Logf("flags %#x: %d bytes written before the error", flags, total)
				if total == len(data) {
					err := syscall.Fsync(fd)
					if !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("flags %#x: 16 MiB fit in an 8 MiB volume (fsync: %v)", flags, err)
					}
				} else {
					var st syscall.Stat_t
					if err := syscall.Fstat(fd, &st); err != nil || st.Size != int64(total) {
						t.Fatalf("flags %#x: %d bytes written but size %d (%v)", flags, total, st.Size, err)
					}
					got := alignedBuf(total / 4096 * 4096)
					if n, err := syscall.Pread(fd, got, 0); err != nil || n != len(got) || !bytes.Equal(got, data[:len(got)]) {
						t.Fatalf("flags %#x: written part reads back wrong: %d %v", flags, n, err)
					}
				}
				syscall.Close(fd)
				if err := os.Remove(e.path("big")); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := os.ReadFile(e.path("small")); err != nil || string(got) != "hello" {
				t.Fatalf("other file after ENOSPC: %q %v", got, err)
			}
			// The kernel sends RELEASE asynchronously after close(2), and
			// an unlinked file's blocks are freed at its last release: the
			// space comes back within moments, not at once.
			deadline := time.Now().Add(5 * time.Second)
			for {
				err := os.WriteFile(e.path("after"), bytes.Repeat([]byte("x"), 1<<20), 0o644)
				if err == nil {
					break
				}
				if !errors.Is(err, syscall.ENOSPC) || time.Now().After(deadline) {
					t.Fatalf("write after freeing space: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			e.checkClean()
		})
	}
}

// TestPanicBecomesEIO: a handler that panics answers EIO, logs its stack,
// and the mount keeps serving.
func TestPanicBecomesEIO(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	hook := func(name string) {
		if name == "boom" {
			panic("injected panic")
		}
	}
	e.srv.FS().panicHook.Store(&hook)
	if _, err := os.Stat(e.path("boom")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("stat of the panicking name: %v, want EIO", err)
	}
	if !strings.Contains(e.logs.String(), "injected panic") || !strings.Contains(e.logs.String(), "goroutine") {
		t.Fatalf("panic and stack not logged:\n%s", e.logs.String())
	}
	if err := os.WriteFile(e.path("ok"), []byte("x"), 0o644); err != nil {
		t.Fatalf("mount dead after a panic: %v", err)
	}
}
