package directdev

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/devicetest"
)

var seedFlag = flag.Uint64("directdev.seed", 0, "seed for the randomized tests (0: time-based)")

// backends are the two concrete backends every behavioural test runs on.
var backends = []Backend{Uring, Pread}

// newImage creates a zero-filled image of size bytes under t.TempDir().
func newImage(t testing.TB, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return path
}

// openDev opens path with opts and closes it at cleanup. A Uring device on a
// host without io_uring skips the test.
func openDev(t testing.TB, path string, opts Options) *Device {
	t.Helper()
	d, err := Open(path, opts)
	if opts.Backend == Uring && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestConformance(t *testing.T) {
	for _, be := range backends {
		t.Run(be.String(), func(t *testing.T) {
			devicetest.Run(t, func(t *testing.T, ioUnit int) device.Device {
				d := openDev(t, newImage(t, 2<<20), Options{IOUnit: ioUnit, Backend: be})
				if d.Backend() != be || !d.Direct() {
					t.Fatalf("backend %s direct %t, want %s with O_DIRECT", d.Backend(), d.Direct(), be)
				}
				return d
			})
		})
	}
}

func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	want := Options{IOUnit: 512, Backend: Auto, Rings: 1, RingEntries: 128, PreadWorkers: 64}
	if o != want {
		t.Errorf("defaults = %+v, want %+v", o, want)
	}
	if err := o.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	if got := o.String(); got != "IOUnit=512 Backend=auto AllowBuffered=false Rings=1 RingEntries=128 PreadWorkers=64 ReadOnly=false" {
		t.Errorf("String() = %q", got)
	}

	bad := Options{IOUnit: 1000, Backend: 7, Rings: -1, RingEntries: 100, PreadWorkers: 1 << 20}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) || len(list.Unwrap()) != 5 {
		t.Errorf("Validate did not report all 5 problems: %v", err)
	}
	for _, field := range []string{"IOUnit 1000", "Backend 7", "Rings -1", "RingEntries 100", "PreadWorkers 1048576"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate error lacks %q: %v", field, err)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Validate error spans lines: %q", err)
	}
	if _, err := Open(newImage(t, 1<<20), bad); err == nil || !strings.Contains(err.Error(), "RingEntries 100") {
		t.Errorf("Open with bad options: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	odd := filepath.Join(dir, "odd")
	os.WriteFile(odd, make([]byte, 4096+512), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	cases := []struct {
		name, path string
		opts       Options
		want       string
	}{
		{"missing", filepath.Join(dir, "missing"), Options{}, "no such file"},
		{"directory", dir, Options{}, "is a directory"},
		{"character device", "/dev/null", Options{AllowBuffered: true}, "not a regular file or block device"},
		{"empty", empty, Options{}, "empty file"},
		{"size not a multiple", odd, Options{IOUnit: 4096}, "not a multiple of the 4096 B I/O unit"},
	}
	for _, c := range cases {
		_, err := Open(c.path, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Open err = %v, want one line containing %q", c.name, err, c.want)
		}
	}
	// The odd-sized file is fine with a 512 B unit.
	d := openDev(t, odd, Options{})
	if d.Size() != 4096+512 {
		t.Errorf("Size = %d", d.Size())
	}
}

func TestAutoFallback(t *testing.T) {
	path := newImage(t, 1<<20)
	testHookUringSetup = func() error { return unix.EPERM }
	defer func() { testHookUringSetup = nil }()

	d := openDev(t, path, Options{})
	if d.Backend() != Pread || !errors.Is(d.Fallback(), unix.EPERM) {
		t.Errorf("Auto with io_uring failing: backend %s, fallback %v; want pread because of EPERM", d.Backend(), d.Fallback())
	}
	buf := device.AlignedBuf(4096)
	buf[0] = 1
	if err := device.WriteAt(d, buf, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{Backend: Uring}); !errors.Is(err, unix.EPERM) {
		t.Errorf("Backend Uring with io_uring failing: %v, want EPERM", err)
	}

	testHookUringSetup = nil
	d2 := openDev(t, path, Options{})
	if _, err := os.Stat("/proc/sys/kernel/io_uring_disabled"); err == nil {
		b, _ := os.ReadFile("/proc/sys/kernel/io_uring_disabled")
		if strings.TrimSpace(string(b)) == "0" && d2.Backend() != Uring {
			t.Errorf("Auto with io_uring enabled chose %s (fallback %v)", d2.Backend(), d2.Fallback())
		}
	}
}

// noDirectDir returns a directory on a file system that refuses O_DIRECT.
// tmpfs used to, but supports O_DIRECT since Linux 6.6; ramfs never has, so
// as root the test mounts one.
func noDirectDir(t *testing.T) string {
	t.Helper()
	refuses := func(dir string) bool {
		p := filepath.Join(dir, "probe")
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			return false
		}
		defer os.Remove(p)
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT, 0)
		if err == nil {
			unix.Close(fd)
		}
		return errors.Is(err, unix.EINVAL)
	}
	if shm, err := os.MkdirTemp("/dev/shm", "directdev"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		if refuses(shm) {
			return shm
		}
	}
	dir := t.TempDir()
	if err := unix.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Skipf("no file system refusing O_DIRECT: tmpfs accepts it and mounting ramfs failed: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, 0) })
	if !refuses(dir) {
		t.Skip("ramfs accepts O_DIRECT on this kernel")
	}
	return dir
}

func TestNoDirectIO(t *testing.T) {
	path := filepath.Join(noDirectDir(t), "img")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	if !errors.Is(err, ErrNoDirectIO) || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("Open on a file system without O_DIRECT: %v, want ErrNoDirectIO and EINVAL", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "AllowBuffered") || !strings.Contains(msg, path) {
		t.Errorf("error should be one line naming the file and the fix: %q", msg)
	}
	t.Logf("error: %v", err)
	for _, be := range backends {
		d := openDev(t, path, Options{AllowBuffered: true, Backend: be})
		if d.Direct() {
			t.Errorf("%s: Direct() = true on a file system without O_DIRECT", be)
		}
		w := device.AlignedBuf(4096)
		copy(w, "buffered")
		if err := device.WriteAt(d, w, 4096); err != nil {
			t.Fatal(err)
		}
		r := device.AlignedBuf(4096)
		if err := device.ReadAt(d, r, 4096); err != nil || !bytes.Equal(r, w) {
			t.Errorf("%s: buffered round trip: %v", be, err)
		}
		if err := device.Flush(d); err != nil {
			t.Error(err)
		}
	}
}

// TestBlockDevice runs the block device path on a loop device (root only).
func TestBlockDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for losetup")
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		t.Skip("no losetup")
	}
	img := newImage(t, 4<<20)
	out, err := exec.Command(losetup, "--find", "--show", "--sector-size", "4096", img).Output()
	if err != nil {
		t.Skipf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(losetup, "--detach", dev).Run() })

	_, err = Open(dev, Options{IOUnit: 512})
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "4096 B logical sector size") {
		t.Errorf("IOUnit 512 on a 4096 B sector device: %v", err)
	}
	for _, be := range backends {
		d := openDev(t, dev, Options{IOUnit: 4096, Backend: be})
		if d.Size() != 4<<20 || !d.blockDev {
			t.Fatalf("size %d blockDev %t", d.Size(), d.blockDev)
		}
		w := device.AlignedBuf(8192)
		for i := range w {
			w[i] = byte(i) ^ byte(be)
		}
		if err := device.WriteAt(d, w, 4<<20-8192); err != nil {
			t.Fatal(err)
		}
		if err := device.Flush(d); err != nil {
			t.Fatal(err)
		}
		r := device.AlignedBuf(8192)
		if err := device.ReadAt(d, r, 4<<20-8192); err != nil || !bytes.Equal(r, w) {
			t.Errorf("%s: block device round trip: %v", be, err)
		}
		d.Close()
	}
}

// TestErrors checks validation errors, ErrClosed, and errno propagation from
// real failed I/O on both backends.
func TestErrors(t *testing.T) {
	for _, be := range backends {
		t.Run(be.String(), func(t *testing.T) {
			path := newImage(t, 1<<20)
			d := openDev(t, path, Options{Backend: be})
			buf := device.AlignedBuf(4096)

			// Past the end: validation, Done not called.
			r := &device.Request{Op: device.OpRead, Off: d.Size() - 512, Buf: buf,
				Done: func(*device.Request, error) { t.Error("Done called for a rejected request") }}
			err := d.Submit(r)
			var de *device.Error
			if !errors.Is(err, unix.EINVAL) || !errors.As(err, &de) || de.Off != d.Size()-512 || de.Len != 4096 {
				t.Errorf("read past the end: %v", err)
			}
			if err := d.Submit(&device.Request{Op: device.OpRead, Buf: buf}); !errors.Is(err, unix.EINVAL) {
				t.Errorf("nil Done: %v", err)
			}

			// A real errno: write through a read-only descriptor.
			ro := openDev(t, path, Options{Backend: be, ReadOnly: true})
			if err := device.WriteAt(ro, buf, 0); !errors.Is(err, syscall.EROFS) {
				t.Errorf("write to a ReadOnly device: %v, want EROFS", err)
			}
			ro.readOnly = false // let the write reach the kernel
			err = device.WriteAt(ro, buf, 4096)
			if !errors.Is(err, unix.EBADF) || !errors.As(err, &de) || de.Op != device.OpWrite || de.Off != 4096 || de.Len != 4096 {
				t.Errorf("write to an O_RDONLY descriptor: %v, want *device.Error wrapping EBADF", err)
			}
			if err := device.ReadAt(ro, buf, 0); err != nil {
				t.Errorf("read after a failed write: %v", err)
			}

			// A file that shrinks under the device: reads beyond the new
			// end transfer nothing (EIO), and a read straddling it is
			// short, resubmitted, then fails.
			if err := os.Truncate(path, 512<<10+512); err != nil {
				t.Fatal(err)
			}
			if err := device.ReadAt(d, buf, 768<<10); !errors.Is(err, unix.EIO) {
				t.Errorf("read beyond EOF: %v, want EIO", err)
			}
			if err := device.ReadAt(d, buf, 512<<10); !errors.Is(err, unix.EIO) {
				t.Errorf("read across EOF: %v, want EIO", err)
			}
			if be == Uring && d.Stats().ShortIOs == 0 {
				t.Errorf("no short I/O counted: %+v", d.Stats())
			}

			// Closed.
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			for name, err := range map[string]error{
				"ReadAt":  device.ReadAt(d, buf, 0),
				"WriteAt": device.WriteAt(d, buf, 0),
				"Flush":   device.Flush(d),
				"Close":   d.Close(),
			} {
				if !errors.Is(err, device.ErrClosed) {
					t.Errorf("%s after Close: %v, want ErrClosed", name, err)
				}
			}
		})
	}
}

func TestResultOf(t *testing.T) {
	read := &device.Request{Op: device.OpRead, Off: 4096, Buf: make([]byte, 8192)}
	flush := &device.Request{Op: device.OpFlush}
	cases := []struct {
		name     string
		r        *device.Request
		done     int
		res      int32
		wantDone int
		wantMore bool
		wantErr  error
	}{
		{"complete", read, 0, 8192, 8192, false, nil},
		{"short", read, 0, 4096, 4096, true, nil},
		{"rest of short", read, 4096, 4096, 8192, false, nil},
		{"zero bytes", read, 4096, 0, 4096, false, unix.EIO},
		{"errno", read, 0, -int32(unix.EIO), 0, false, unix.EIO},
		{"bad fd", read, 0, -int32(unix.EBADF), 0, false, unix.EBADF},
		{"EAGAIN retries", read, 512, -int32(unix.EAGAIN), 512, true, unix.EAGAIN},
		{"EINTR retries", read, 0, -int32(unix.EINTR), 0, true, unix.EINTR},
		{"flush ok", flush, 0, 0, 0, false, nil},
		{"flush fails", flush, 0, -int32(unix.EIO), 0, false, unix.EIO},
	}
	for _, c := range cases {
		done, more, err := resultOf(c.r, c.done, c.res)
		if done != c.wantDone || more != c.wantMore || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Errorf("%s: resultOf = %d, %t, %v; want %d, %t, %v", c.name, done, more, err, c.wantDone, c.wantMore, c.wantErr)
		}
		var de *device.Error
		if err != nil && (!errors.As(err, &de) || de.Op != c.r.Op) {
			t.Errorf("%s: %v is not a *device.Error for the request", c.name, err)
		}
	}
}

// op is one request of the randomized tests.
type op struct {
	kind  device.Op
	off   int64
	units int
}

// genRounds makes rounds of requests in which no write overlaps another
// request of its round, so every round's outcome is deterministic however
// its requests are reordered.
func genRounds(rng *rand.Rand, size int64, unit, rounds, perRound int) [][]op {
	nUnits := int(size / int64(unit))
	out := make([][]op, rounds)
	for i := range out {
		read := make([]bool, nUnits)
		written := make([]bool, nUnits)
		for len(out[i]) < perRound {
			o := op{kind: device.OpRead, units: 1 + rng.IntN(32)}
			switch k := rng.IntN(20); {
			case k == 0:
				out[i] = append(out[i], op{kind: device.OpFlush})
				continue
			case k < 10:
				o.kind = device.OpWrite
			}
			start := rng.IntN(nUnits - o.units + 1)
			// Sometimes 4 KiB aligned, sometimes not.
			if rng.IntN(2) == 0 {
				start &^= 7
			}
			o.off = int64(start) * int64(unit)
			ok := true
			for u := start; u < start+o.units && ok; u++ {
				ok = !written[u] && (o.kind == device.OpRead || !read[u])
			}
			if !ok {
				continue
			}
			for u := start; u < start+o.units; u++ {
				if o.kind == device.OpWrite {
					written[u] = true
				} else {
					read[u] = true
				}
			}
			out[i] = append(out[i], o)
		}
	}
	return out
}

// runRounds applies rounds to d with every request of a round in flight at
// once, submitted by several goroutines with callbacks, and returns the data
// of every read in order and the final contents.
func runRounds(t *testing.T, d *Device, rounds [][]op, seed uint64) [][]byte {
	t.Helper()
	const submitters = 8
	var reads [][]byte
	for ri, round := range rounds {
		bufs := make([][]byte, len(round))
		for i, o := range round {
			if o.kind == device.OpFlush {
				continue
			}
			bufs[i] = device.AlignedBuf(o.units * d.IOUnit())
			if o.kind == device.OpWrite {
				fill(bufs[i], seed, uint64(ri), uint64(i))
			}
		}
		errs := make([]error, len(round))
		var wg sync.WaitGroup
		wg.Add(len(round))
		var sub sync.WaitGroup
		for g := range submitters {
			sub.Add(1)
			go func() {
				defer sub.Done()
				for i := g; i < len(round); i += submitters {
					r := &device.Request{Op: round[i].kind, Off: round[i].off, Buf: bufs[i],
						Done: func(_ *device.Request, err error) { errs[i] = err; wg.Done() }}
					if err := d.Submit(r); err != nil {
						errs[i] = err
						wg.Done()
					}
				}
			}()
		}
		sub.Wait()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d request %d (%+v): %v", ri, i, round[i], err)
			}
			if round[i].kind == device.OpRead {
				reads = append(reads, bufs[i])
			}
		}
	}
	all := device.AlignedBuf(int(d.Size()))
	if err := device.ReadAt(d, all, 0); err != nil {
		t.Fatal(err)
	}
	return append(reads, all)
}

// fill writes deterministic pseudo-random bytes.
func fill(p []byte, a, b, c uint64) {
	rng := rand.New(rand.NewPCG(a^b<<20, c+1))
	for i := 0; i+8 <= len(p); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			p[i+j] = byte(v >> (8 * j))
		}
	}
}

// model applies rounds to an in-memory image.
func model(rounds [][]op, size int64, unit int, seed uint64) [][]byte {
	img := make([]byte, size)
	var reads [][]byte
	for ri, round := range rounds {
		// Reads of a round see the image before its writes: no read
		// overlaps a write of its round.
		for _, o := range round {
			if o.kind == device.OpRead {
				reads = append(reads, bytes.Clone(img[o.off:o.off+int64(o.units*unit)]))
			}
		}
		for i, o := range round {
			if o.kind == device.OpWrite {
				fill(img[o.off:o.off+int64(o.units*unit)], seed, uint64(ri), uint64(i))
			}
		}
	}
	return append(reads, img)
}

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -directdev.seed=%d)", seed, seed)
	return seed
}

// TestBackendsAgree runs the same seeded mix of reads, writes and flushes,
// hundreds of requests in flight at a time, on both backends and on a model,
// and compares every read and the final image.
func TestBackendsAgree(t *testing.T) {
	seed := testSeed(t)
	const size, unit = 4 << 20, 512
	rounds := genRounds(rand.New(rand.NewPCG(seed, 0)), size, unit, 8, 300)
	want := model(rounds, size, unit, seed)
	results := map[Backend][][]byte{}
	for _, be := range backends {
		d := openDev(t, newImage(t, size), Options{Backend: be, RingEntries: 256})
		results[be] = runRounds(t, d, rounds, seed)
		t.Logf("%s: %+v", be, d.Stats())
	}
	for _, be := range backends {
		got := results[be]
		if len(got) != len(want) {
			t.Fatalf("%s: %d results, want %d", be, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%s: result %d of %d differs from the model (seed %d)", be, i, len(want), seed)
			}
		}
	}
}

// TestBackPressure submits 200 requests back to back to a ring of 4
// entries (8 slots, one per CQ entry): the submitter blocks instead of overflowing the CQ,
// and every request completes correctly. One goroutine submits them all
// (a Submit costs far less than a write, so it outruns the device; 200
// goroutines would each submit one request as they got scheduled, and a
// loaded machine can spread that out enough for nothing to block).
func TestBackPressure(t *testing.T) {
	for _, be := range backends {
		t.Run(be.String(), func(t *testing.T) {
			d := openDev(t, newImage(t, 1<<20), Options{Backend: be, RingEntries: 4, PreadWorkers: 2})
			const n = 200
			bufs := make([][]byte, n)
			var wg sync.WaitGroup
			for i := range n {
				bufs[i] = device.AlignedBuf(4096)
				fill(bufs[i], 1, 2, uint64(i))
			}
			wg.Add(n)
			for i := range n {
				r := &device.Request{Op: device.OpWrite, Off: int64(i) * 4096, Buf: bufs[i],
					Done: func(_ *device.Request, err error) {
						if err != nil {
							t.Error(err)
						}
						wg.Done()
					}}
				if err := d.Submit(r); err != nil {
					t.Error(err)
					wg.Done()
				}
			}
			wg.Wait()
			got := device.AlignedBuf(4096)
			for i := range n {
				if err := device.ReadAt(d, got, int64(i)*4096); err != nil || !bytes.Equal(got, bufs[i]) {
					t.Fatalf("block %d: %v / differs", i, err)
				}
			}
			s := d.Stats()
			t.Logf("%+v", s)
			if s.Blocked == 0 {
				t.Errorf("no Submit blocked with %d requests on a tiny queue", n)
			}
			if be == Uring {
				o := d.be.(*uringBackend).rings[0]
				if o.ring.CQOverflow() != 0 || len(o.slots) != 8 {
					t.Errorf("CQ overflow %d, slots %d", o.ring.CQOverflow(), len(o.slots))
				}
			}
		})
	}
}

// TestDoneMaySubmit chains requests from Done callbacks on a saturated tiny
// queue: the device must not deadlock waiting for itself.
func TestDoneMaySubmit(t *testing.T) {
	for _, be := range backends {
		t.Run(be.String(), func(t *testing.T) {
			d := openDev(t, newImage(t, 1<<20), Options{Backend: be, RingEntries: 2, PreadWorkers: 1})
			const total = 2000
			var started, finished atomic.Int64
			all := make(chan struct{})
			var submit func()
			submit = func() {
				if started.Add(1) > total {
					return
				}
				buf := device.AlignedBuf(512)
				r := &device.Request{Op: device.OpRead, Off: int64(started.Load()%2048) * 512, Buf: buf}
				r.Done = func(_ *device.Request, err error) {
					if err != nil {
						t.Error(err)
					}
					// Each completion starts two more, so the queue
					// stays full.
					submit()
					submit()
					if finished.Add(1) == total {
						close(all)
					}
				}
				if err := d.Submit(r); err != nil {
					t.Error(err)
				}
			}
			for range 8 {
				go submit()
			}
			select {
			case <-all:
			case <-time.After(20 * time.Second):
				t.Fatalf("deadlock: %d of %d finished, stats %+v", finished.Load(), total, d.Stats())
			}
		})
	}
}

// TestDoneSubmitsAcrossDevices chains requests between two saturated
// io_uring devices from Done callbacks: neither owner may wait for the other.
func TestDoneSubmitsAcrossDevices(t *testing.T) {
	devs := [2]*Device{
		openDev(t, newImage(t, 1<<20), Options{Backend: Uring, RingEntries: 2}),
		openDev(t, newImage(t, 1<<20), Options{Backend: Uring, RingEntries: 2}),
	}
	const total = 4000
	var started, finished atomic.Int64
	all := make(chan struct{})
	var submit func(to int)
	submit = func(to int) {
		n := started.Add(1)
		if n > total {
			return
		}
		r := &device.Request{Op: device.OpRead, Off: n % 2048 * 512, Buf: device.AlignedBuf(512)}
		r.Done = func(_ *device.Request, err error) {
			if err != nil {
				t.Error(err)
			}
			submit(1 - to) // the other device
			submit(1 - to)
			if finished.Add(1) == total {
				close(all)
			}
		}
		if err := devs[to].Submit(r); err != nil {
			t.Error(err)
		}
	}
	for i := range 8 {
		go submit(i % 2)
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
		t.Fatalf("deadlock: %d of %d finished", finished.Load(), total)
	}
}

// TestBatching holds the ring's owner inside a Done callback while 100
// requests arrive: their submitters publish SQEs without entering the
// kernel (the owner is running, so it will), and the owner then submits
// them all with one or two io_uring_enter calls.
func TestBatching(t *testing.T) {
	d := openDev(t, newImage(t, 1<<20), Options{Backend: Uring})
	gate := make(chan struct{})
	first := make(chan struct{})
	buf := device.AlignedBuf(512)
	r := &device.Request{Op: device.OpRead, Buf: buf, Done: func(*device.Request, error) { close(first); <-gate }}
	if err := d.Submit(r); err != nil {
		t.Fatal(err)
	}
	<-first // the owner is blocked in Done
	o := d.be.(*uringBackend).rings[0]
	base := o.accepted.Load()
	before := d.Stats()
	const n = 100
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go func() {
			if err := d.Submit(&device.Request{Op: device.OpRead, Off: int64(i) * 4096, Buf: device.AlignedBuf(4096),
				Done: func(*device.Request, error) { wg.Done() }}); err != nil {
				t.Error(err)
			}
		}()
	}
	for o.accepted.Load()-base < n {
		time.Sleep(100 * time.Microsecond)
	}
	close(gate)
	wg.Wait()
	after := d.Stats()
	batches, sqes := after.Batches-before.Batches, after.SQEs-before.SQEs
	t.Logf("%d SQEs in %d submitting enters (%d enters)", sqes, batches, after.Enters-before.Enters)
	if sqes != n || batches > 2 {
		t.Errorf("%d SQEs in %d submitting io_uring_enter calls, want %d in at most 2", sqes, batches, n)
	}
}

// TestBatchingUnderLoad reports how many requests each io_uring_enter
// submits with 64 goroutines reading concurrently.
func TestBatchingUnderLoad(t *testing.T) {
	d := openDev(t, newImage(t, 4<<20), Options{Backend: Uring})
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := device.AlignedBuf(4096)
			for i := range 50 {
				if err := device.ReadAt(d, buf, int64((g*50+i)%1024)*4096); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := d.Stats()
	t.Logf("%+v: %.1f SQEs per submitting enter, %.2f enters per request", s, float64(s.SQEs)/float64(s.Batches), float64(s.Enters)/float64(s.Requests))
	if s.Requests != 64*50 || s.DepthNanos == 0 {
		t.Errorf("%d requests completed (want %d), depth integral %d", s.Requests, 64*50, s.DepthNanos)
	}
}

// TestDeferredSubmit fills a ring with deferSubmitDepth reads of an empty
// pipe, which stay in the kernel until it is written, then submits more
// while the owner sleeps in io_uring_enter: the first deferSubmitBatch-1
// Submits leave their SQEs to the owner (no io_uring_enter of their own),
// the next one submits the batch, and the owner submits the rest after the
// first completion wakes it, so every read completes.
func TestDeferredSubmit(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	d := &Device{path: "pipe", fd: p[0], blockDev: true, opts: *(&Options{}).EnsureDefaults()}
	o, err := startRingOwner(d)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	const deferred = deferSubmitBatch - 1
	const n = deferSubmitDepth + deferred + 2
	const size = 512
	b := &uringBackend{rings: []*ringOwner{o}}
	d.be = b
	defer func() {
		unix.Write(p[1], make([]byte, n*size)) // on failure, let every read end
		b.close()
	}()
	var wg sync.WaitGroup
	wg.Add(n)
	read := func() {
		r := &device.Request{Op: device.OpRead, Buf: make([]byte, size), Done: func(r *device.Request, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		}}
		b.submit(r)
	}
	// The owner is asleep in the kernel with n-1 reads there.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; stats %+v", what, d.Stats())
			}
		}
	}
	for range deferSubmitDepth {
		read()
	}
	inKernel := func() int {
		o.sq.Lock()
		defer o.sq.Unlock()
		return o.inflight - int(o.ring.SQPending())
	}
	waitFor("the reads to reach the kernel", func() bool { return o.state.Load() == sleepKernel && inKernel() == deferSubmitDepth })
	s0 := d.Stats()
	for range deferred {
		read()
	}
	s1 := d.Stats()
	if s1.Deferred-s0.Deferred != deferred || s1.Enters != s0.Enters {
		t.Errorf("%d Submits: %d deferred, %d io_uring_enter calls; want %d and 0", deferred, s1.Deferred-s0.Deferred, s1.Enters-s0.Enters, deferred)
	}
	read() // makes a batch
	s2 := d.Stats()
	if k := inKernel(); s2.Deferred != s1.Deferred || s2.Batches != s1.Batches+1 || k != deferSubmitDepth+deferSubmitBatch {
		t.Errorf("the Submit that makes a batch: %d deferred, %d submitting enters, %d reads in the kernel; want 0, 1, %d",
			s2.Deferred-s1.Deferred, s2.Batches-s1.Batches, k, deferSubmitDepth+deferSubmitBatch)
	}
	read() // deferred again
	if s3 := d.Stats(); s3.Deferred != s2.Deferred+1 {
		t.Errorf("the last Submit was not deferred: %+v", s3)
	}
	if _, err := unix.Write(p[1], make([]byte, n*size)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the deferred read never completed; stats %+v", d.Stats())
	}
}

// TestCloseWaitsForInflight closes the device with hundreds of requests in
// flight, while other goroutines keep submitting: every accepted request
// completes before Close returns, and later ones fail with ErrClosed.
func TestCloseWaitsForInflight(t *testing.T) {
	for _, be := range backends {
		t.Run(be.String(), func(t *testing.T) {
			d := openDev(t, newImage(t, 4<<20), Options{Backend: be, RingEntries: 16})
			var accepted, completed, rejected atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						r := &device.Request{Op: device.OpRead, Off: int64((g*997+i)%1024) * 4096, Buf: device.AlignedBuf(4096),
							Done: func(*device.Request, error) { completed.Add(1) }}
						if err := d.Submit(r); err != nil {
							if !errors.Is(err, device.ErrClosed) {
								t.Error(err)
							}
							rejected.Add(1)
							return
						}
						accepted.Add(1)
					}
				}()
			}
			time.Sleep(20 * time.Millisecond)
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if a, c := accepted.Load(), completed.Load(); a != c {
				t.Errorf("Close returned with %d of %d accepted requests completed", c, a)
			}
			close(stop)
			wg.Wait()
			if a, c := accepted.Load(), completed.Load(); a != c {
				t.Errorf("%d accepted, %d completed", a, c)
			}
			t.Logf("accepted %d, rejected %d", accepted.Load(), rejected.Load())
		})
	}
}

func TestString(t *testing.T) {
	d := openDev(t, newImage(t, 1<<20), Options{Backend: Pread})
	if s := d.String(); !strings.Contains(s, "backend pread") || !strings.Contains(s, fmt.Sprint(1<<20)) {
		t.Errorf("String() = %q", s)
	}
}

// TestAllocs checks that the hot paths do not allocate: device.ReadAt on both
// backends, and Submit with a reused Request on io_uring.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, be := range backends {
		d := openDev(t, newImage(t, 1<<20), Options{Backend: be})
		buf := device.AlignedBuf(4096)
		device.ReadAt(d, buf, 0) // warm the pools
		if n := testing.AllocsPerRun(200, func() {
			if err := device.ReadAt(d, buf, 4096); err != nil {
				t.Fatal(err)
			}
		}); n > 0 {
			t.Errorf("%s: ReadAt allocates %.1f times per call", be, n)
		}
		done := make(chan error, 1)
		r := &device.Request{Op: device.OpRead, Off: 8192, Buf: buf, Done: func(_ *device.Request, err error) { done <- err }}
		if n := testing.AllocsPerRun(200, func() {
			if err := d.Submit(r); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}); n > 0 {
			t.Errorf("%s: Submit allocates %.1f times per request", be, n)
		}
	}
}
