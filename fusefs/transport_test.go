package fusefs

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/fuseserver"
	"github.com/sluicefs/sluice/internal/sys/fuseuring"
)

// transports are the FUSE transports this kernel can run: /dev/fuse
// always, io_uring where the kernel has it.
func transports(t *testing.T) []fuseserver.Transport {
	ts := []fuseserver.Transport{fuseserver.TransportDevFuse}
	if err := fuseuring.Supported(); err != nil {
		t.Logf("io_uring transport not tested: %v", err)
	} else if os.Geteuid() == 0 {
		ts = append(ts, fuseserver.TransportURing)
	}
	return ts
}

// TestRequestsTravelOverURing checks that with the io_uring transport the
// requests of a load arrive as ring completions, not on /dev/fuse, and
// that the owner threads start the aligned O_DIRECT I/O themselves.
func TestRequestsTravelOverURing(t *testing.T) {
	if err := fuseuring.Supported(); err != nil || os.Geteuid() != 0 {
		t.Skipf("FUSE over io_uring needs root and a kernel with it (%v)", err)
	}
	e := newMountEnv(t, envOpts{fuse: Options{Transport: fuseserver.TransportURing}, transportSet: true})
	if tr, why := e.srv.Transport(); tr != fuseserver.TransportURing {
		t.Fatalf("transport %v (%s), want uring", tr, why)
	}
	fd, err := syscall.Open(e.path("f"), syscall.O_CREAT|syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	before := e.srv.Stats()
	b := alignedBuf(4096)
	const n = 500
	for i := range n {
		if _, err := syscall.Pwrite(fd, b, int64(i%64)*4096); err != nil {
			t.Fatal(err)
		}
		if _, err := syscall.Pread(fd, b, int64(i%64)*4096); err != nil {
			t.Fatal(err)
		}
	}
	after := e.srv.Stats()
	ring := after.URingRequests - before.URingRequests
	dev := after.DevFuseRequests - before.DevFuseRequests
	inline := after.URingInline - before.URingInline
	t.Logf("%d requests on io_uring (%d served or started on the owner threads), %d on /dev/fuse", ring, inline, dev)
	if inline < n {
		// The reads at least: aligned O_DIRECT reads of written blocks
		// start on the owner thread (fuseserver.AsyncIO).
		t.Errorf("%d of %d requests served or started on the owner threads, want at least the %d reads", inline, ring, n)
	}
	if ring < 2*n {
		t.Errorf("%d requests on io_uring for %d writes and reads", ring, 2*n)
	}
	if dev > 5 {
		t.Errorf("%d requests on /dev/fuse under io_uring (only FORGET and INTERRUPT belong there)", dev)
	}
}

// TestInterruptReachesBlockedRequest blocks a WRITE at the device (a
// faultdev gate), signals the writing thread, and checks that the kernel's
// INTERRUPT (which travels on /dev/fuse even under io_uring) finds the
// request being served; the write then completes once the gate opens.
func TestInterruptReachesBlockedRequest(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.String(), func(t *testing.T) {
			// Write-through, so that the write reaches the gate.
			e := newMountEnv(t, envOpts{fuse: Options{Transport: tr}, transportSet: true, cacheSet: true})
			fd, err := syscall.Open(e.path("f"), syscall.O_CREAT|syscall.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fd)
			gate := e.fault.NewGate(faultdev.Writes)
			defer gate.Remove()
			tid := make(chan int, 1)
			done := make(chan error, 1)
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				tid <- unix.Gettid()
				_, err := syscall.Pwrite(fd, pattern(4096, 7), 0)
				done <- err
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := gate.WaitHeld(ctx, 1); err != nil {
				t.Fatal(err)
			}
			// SIGURG is the signal the Go runtime ignores; the kernel
			// still sees a pending signal and sends INTERRUPT.
			th := <-tid
			for e.srv.Stats().InterruptsMatched == 0 {
				if ctx.Err() != nil {
					t.Fatalf("no INTERRUPT matched its request: %+v", e.srv.Stats())
				}
				_ = unix.Tgkill(os.Getpid(), th, unix.SIGURG)
				time.Sleep(10 * time.Millisecond)
			}
			gate.Open()
			if err := <-done; err != nil && err != syscall.EINTR {
				t.Fatalf("interrupted write: %v", err)
			}
			t.Logf("%+v", e.srv.Stats())
		})
	}
}

// TestSyncfsReachesDaemon records whether the kernel forwards syncfs(2) to
// the server. Linux sends FUSE_SYNCFS only to servers it marks sync_fs
// (virtiofs); on other kernels the test checks that it reaches SyncFS.
func TestSyncfsReachesDaemon(t *testing.T) {
	m := NewMetrics()
	e := newMountEnv(t, envOpts{fuse: Options{Metrics: m}})
	if err := os.WriteFile(e.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(e.dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs: %v", err)
	}
	if n := m.ops[opSyncfs].count.Load(); n == 0 {
		t.Skip("this kernel does not forward syncfs(2) to FUSE servers (fc->sync_fs is set only for virtiofs); fsync and fsync of a directory are the durable paths")
	}
}

// TestQuickRequestsServedInline checks that under io_uring (with the
// default owner issuer) a quick request, a SETATTR of times, is served on
// its queue's owner thread, a truncating SETATTR is handed to its entry's
// goroutine (fuseserver's handler.quick; Stats.URingInline), and MKDIRs
// made one at a time are served on the owner (handler.commits), as are
// unaligned WRITEs (fusefs TryWrite through the buffered companion).
func TestQuickRequestsServedInline(t *testing.T) {
	if err := fuseuring.Supported(); err != nil || os.Geteuid() != 0 {
		t.Skipf("FUSE over io_uring needs root and a kernel with it (%v)", err)
	}
	e := newMountEnv(t, envOpts{fuse: Options{Transport: fuseserver.TransportURing}, transportSet: true,
		cacheSet: true}) // write-through: every pwrite below is a WRITE
	f, err := os.Create(e.path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	const n = 200
	before := e.srv.Stats()
	for i := range n {
		ts := []unix.Timespec{{Sec: int64(i + 1)}, {Sec: int64(i + 1)}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), ts, 0); err != nil {
			t.Fatal(err)
		}
	}
	mid := e.srv.Stats()
	for i := range n {
		if err := unix.Ftruncate(fd, int64(i+1)*512); err != nil {
			t.Fatal(err)
		}
	}
	after := e.srv.Stats()
	inline := mid.URingInline - before.URingInline
	t.Logf("utimes: %d requests, %d inline; ftruncate: %d requests, %d inline",
		mid.URingRequests-before.URingRequests, inline,
		after.URingRequests-mid.URingRequests, after.URingInline-mid.URingInline)
	if inline < n {
		t.Errorf("%d of %d utimes served on the owner thread", inline, n)
	}
	if handed := (after.URingRequests - mid.URingRequests) - (after.URingInline - mid.URingInline); handed < n {
		t.Errorf("%d requests handed off for %d truncates", handed, n)
	}
	// Metadata commits made one at a time are served on the owner too.
	for i := range n {
		if err := unix.Mkdir(e.path(fmt.Sprintf("d%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	last := e.srv.Stats()
	reqs, inl := last.URingRequests-after.URingRequests, last.URingInline-after.URingInline
	t.Logf("mkdir: %d requests, %d inline", reqs, inl)
	if inl < n {
		t.Errorf("%d of %d mkdirs (%d requests) served on the owner thread", inl, n, reqs)
	}
	// Unaligned buffered writes (the last page of a small file written
	// back, a WAL frame) go to the engine's cache through the buffered
	// companion there, answered at once; a few may find the page or the
	// I/O lock taken by the engine's flusher and go to a goroutine.
	buf := make([]byte, 100)
	for i := range n {
		buf[0] = byte(i)
		if _, err := unix.Pwrite(fd, buf, int64(i)*int64(len(buf))); err != nil {
			t.Fatal(err)
		}
	}
	end := e.srv.Stats()
	reqs, inl = end.URingRequests-last.URingRequests, end.URingInline-last.URingInline
	t.Logf("unaligned writes: %d requests, %d inline", reqs, inl)
	if inl < n*9/10 {
		t.Errorf("%d of %d unaligned writes (%d requests) served on the owner thread", inl, n, reqs)
	}
}
