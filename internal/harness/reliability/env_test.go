package reliability

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/volume"
)

// runKnownFailures runs the tests marked as known engine failures instead
// of skipping them: go test ./internal/harness/reliability -run X -known-failures.
var runKnownFailures = flag.Bool("known-failures", false, "run the tests marked as known engine failures (see its issue)")

// knownFailure skips the rest of the test because of engine bug id of
// the issue tracker, unless -known-failures is set. Put it right before
// the check that fails.
func knownFailure(t testing.TB, id, what string) {
	t.Helper()
	if !*runKnownFailures {
		t.Skipf("known engine failure %s: %s; run with -known-failures to check a fix", id, what)
	}
	t.Logf("known engine failure %s: %s: checking anyway (-known-failures)", id, what)
}

// env is a sluice file system on the stack every test here uses:
//
//	sluice.FS
//	  volume.Volume
//	    faultdev.Device (injectors, gates, counts)
//	      [lossyDev: an optional "drive" whose failed flush loses its write cache]
//	        memdev.Device (crashable)
//	    faultKV (fails metadata commits and syncs on demand)
//	      Pebble on a crashable vfs.MemFS
//
// The memdev and the MemFS are a testvol.Disks.
type env struct {
	t     testing.TB
	cfg   envConfig
	disks *testvol.Disks
	lossy *lossyDev // nil unless cfg.lossy
	dev   *faultdev.Device
	kv    *faultKV
	vol   *volume.Volume
	fs    *sluice.FS
}

type envConfig struct {
	// size is the data device size. The default value is 32 MiB.
	size int64
	// blockSize is the file-system block size. The default value is 4096.
	blockSize int
	// lossy puts a lossyDev between faultdev and memdev.
	lossy bool
	// opts are the engine options. The zero value is every default.
	opts sluice.Options
	// beforeMount, if set, runs after the volume is attached and before
	// the engine opens it (to arm metadata faults for the mount).
	beforeMount func(e *env)
}

func (c *envConfig) ensureDefaults() {
	if c.size == 0 {
		c.size = 32 << 20
	}
	if c.blockSize == 0 {
		c.blockSize = 4096
	}
}

// newEnv formats a fresh volume and opens it.
func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	cfg.ensureDefaults()
	d, err := testvol.Format(testvol.Config{DeviceBytes: cfg.size, BlockSize: cfg.blockSize})
	if err != nil {
		t.Fatal(err)
	}
	e, err := openEnv(t, cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// openEnv opens the file system held by d.
func openEnv(t testing.TB, cfg envConfig, d *testvol.Disks) (*env, error) {
	t.Helper()
	cfg.ensureDefaults()
	pkv, err := d.OpenKV()
	if err != nil {
		return nil, err
	}
	e := &env{t: t, cfg: cfg, disks: d, kv: newFaultKV(pkv)}
	var inner device.Device = d.Mem
	if cfg.lossy {
		e.lossy = newLossyDev(d.Mem)
		inner = e.lossy
	}
	e.dev = faultdev.New(inner)
	e.vol, err = volume.Attach(e.dev, e.kv)
	if err != nil {
		pkv.Close()
		return nil, err
	}
	if cfg.beforeMount != nil {
		cfg.beforeMount(e)
	}
	opts := cfg.opts
	e.fs, err = sluice.OpenVolume(e.vol, &opts)
	if err != nil {
		pkv.Close()
		return nil, err
	}
	t.Cleanup(e.abandon)
	return e, nil
}

// abandon stops the file system without making anything durable that is
// not already, as far as the engine allows (Close syncs unless shut
// down), and releases the metadata. Idempotent.
func (e *env) abandon() {
	if e.fs == nil {
		return
	}
	fs := e.fs
	e.fs = nil
	e.kv.Heal()
	for _, i := range e.dev.Injections() {
		i.Remove()
	}
	for _, g := range e.dev.Gates() {
		g.Remove()
	}
	// A call stuck in the engine (a bug the test reported) would hold
	// Close for ever: give up on the file system after a while.
	if !closeWithin(fs, 10*time.Second) {
		e.t.Logf("abandon: FS.Close did not return within 10s (calls stuck in the engine); leaking it")
		return
	}
	e.kv.Close()
	e.dev.Close()
}

// closeWithin closes fs and reports whether Close returned within d.
func closeWithin(fs *sluice.FS, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		fs.Close()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// crash returns the environment a power failure now could leave: the data
// device's crash image for seed and the metadata as last synced plus a
// seeded part of what was not (testvol.Disks.Crash). The original keeps
// running (the caller usually abandons it).
func (e *env) crash(seed uint64) *env {
	e.t.Helper()
	e2, err := e.tryCrash(seed)
	if err != nil {
		e.t.Fatalf("reopening after a crash (seed %d): %v", seed, err)
	}
	return e2
}

func (e *env) tryCrash(seed uint64) (*env, error) {
	cfg := e.cfg
	cfg.lossy = false
	return openEnv(e.t, cfg, e.disks.Crash(seed))
}

// checkVolume runs sluice.CheckVolume on the volume held by d without
// mounting it (so orphans are not yet freed, nothing is changed).
func checkVolume(d *testvol.Disks) (*sluice.CheckReport, error) {
	v, err := d.Attach()
	if err != nil {
		return nil, err
	}
	defer v.KV.Close()
	return sluice.CheckVolume(v)
}

// reopen closes the file system cleanly and opens it again on copies of
// its devices.
func (e *env) reopen() *env {
	e.t.Helper()
	if err := e.fs.Close(); err != nil {
		e.t.Fatalf("close: %v", err)
	}
	e.abandon()
	return e.copyAfterClose()
}

// copyAfterClose opens copies of the devices of a closed file system.
func (e *env) copyAfterClose() *env {
	e.t.Helper()
	cfg := e.cfg
	cfg.lossy = false
	e2, err := openEnv(e.t, cfg, e.disks.Copy())
	if err != nil {
		e.t.Fatalf("reopen: %v", err)
	}
	return e2
}

// create creates (or truncates) path with extra open flags.
func (e *env) create(path string, flags int) *sluice.File {
	e.t.Helper()
	f, err := e.fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_TRUNC|flags, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// open opens an existing path.
func (e *env) open(path string, flags int) *sluice.File {
	e.t.Helper()
	f, err := e.fs.OpenFile(path, flags, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// readFile returns the whole content of path, read through a fresh
// buffered handle.
func readFile(fs *sluice.FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f)
}

// readEnds returns the first and last 4 KiB of path, of size size.
func readEnds(fs *sluice.FS, path string, size int64) (string, error) {
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	a, b := make([]byte, 4096), make([]byte, 4096)
	if _, err := f.Pread(a, 0, 0); err != nil {
		return "", err
	}
	n, err := f.Pread(b, size-4096, 0)
	return string(a) + string(b[:n]), err
}

// readAll reads the whole file through f (direct or buffered).
func readAll(f *sluice.File) ([]byte, error) {
	a, err := f.Stat()
	if err != nil {
		return nil, err
	}
	buf := device.AlignedBuf(int(roundUp(a.Size, 4096)))
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

func roundUp(x, to int64) int64 { return (x + to - 1) / to * to }

// pattern returns n aligned bytes that depend on seed.
func pattern(n int, seed uint64) []byte {
	b := device.AlignedBuf(n)
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := range b {
		if i%8 == 0 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		b[i] = byte(x >> (8 * (i % 8)))
	}
	return b
}

// checkClean runs FS.Check and fails the test on any problem.
func checkClean(t testing.TB, fs *sluice.FS) *sluice.CheckReport {
	t.Helper()
	r, err := fs.Check()
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !r.Clean() {
		t.Fatalf("Check found problems: %v", r.Problems)
	}
	return r
}

// errnoOf returns the syscall.Errno in err's chain, or 0.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return 0
}

// wantErrno fails unless err carries errno want, inside an *os.PathError or
// *os.LinkError.
func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want %v", what, want)
		return
	}
	if got := errnoOf(err); got != want {
		t.Errorf("%s: %v (errno %d %v), want %v", what, err, int(got), got, want)
	}
	var pe *os.PathError
	var le *os.LinkError
	if !errors.As(err, &pe) && !errors.As(err, &le) {
		t.Errorf("%s: %T is neither *os.PathError nor *os.LinkError", what, err)
	}
}

// isEIO reports whether err is an I/O error as the engine promises to
// report device and metadata failures.
func isEIO(err error) bool { return errors.Is(err, syscall.EIO) }

// withTimeout runs fn and fails the test if it does not return within d
// (the goroutine is left behind: a hang is a bug to report, and the test
// binary must not wait for it).
func withTimeout(t testing.TB, d time.Duration, what string, fn func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		t.Errorf("%s did not return within %v", what, d)
		return false
	}
}

// Snapshot of a whole tree, for "the failed call changed nothing".

type nodeSnap struct {
	Mode, Nlink, Uid, Gid uint32
	Size                  int64
	Blocks                int64
	Mtime, Ctime          int64
	Ino                   sluice.Ino
	Target                string
	Xattrs                map[string]string
	Data                  string // the bytes themselves (the first and last 4 KiB of a huge file)
}

type treeSnap map[string]nodeSnap

// snapshot walks the tree from the root with Lstat, ReadDir, Readlink,
// Listxattr/Getxattr and reads every regular file. Atimes are left out
// (reads change them).
func snapshot(t testing.TB, fs *sluice.FS) treeSnap {
	t.Helper()
	s := treeSnap{}
	var walk func(p string)
	walk = func(p string) {
		a, err := fs.Lstat(p)
		if err != nil {
			t.Fatalf("snapshot: lstat %s: %v", p, err)
		}
		n := nodeSnap{Mode: a.Mode, Nlink: a.Nlink, Uid: a.Uid, Gid: a.Gid, Size: a.Size, Blocks: a.Blocks,
			Mtime: a.Mtime.UnixNano(), Ctime: a.Ctime.UnixNano(), Ino: a.Ino, Xattrs: map[string]string{}}
		switch a.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			n.Target, err = fs.Readlink(p)
			if err != nil {
				t.Fatalf("snapshot: readlink %s: %v", p, err)
			}
		case syscall.S_IFREG:
			if a.Size > 1<<20 {
				// A huge sparse file: its first and last 4 KiB.
				n.Data, err = readEnds(fs, p, a.Size)
			} else {
				var b []byte
				b, err = readFile(fs, p)
				n.Data = string(b)
			}
			if err != nil {
				t.Fatalf("snapshot: read %s: %v", p, err)
			}
		}
		if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			names, err := fs.Listxattr(p)
			if err != nil {
				t.Fatalf("snapshot: listxattr %s: %v", p, err)
			}
			for _, x := range names {
				v, err := fs.Getxattr(p, x)
				if err != nil {
					t.Fatalf("snapshot: getxattr %s %s: %v", p, x, err)
				}
				n.Xattrs[x] = string(v)
			}
		}
		s[p] = n
		if a.IsDir() {
			ents, err := fs.ReadDir(p)
			if err != nil {
				t.Fatalf("snapshot: readdir %s: %v", p, err)
			}
			for _, d := range ents {
				walk(strings.TrimSuffix(p, "/") + "/" + d.Name)
			}
		}
	}
	walk("/")
	return s
}

// withoutTimes returns s with the times cleared.
func (s treeSnap) withoutTimes() treeSnap {
	out := treeSnap{}
	for p, n := range s {
		n.Mtime, n.Ctime = 0, 0
		out[p] = n
	}
	return out
}

// diff describes how b differs from a, or returns "".
func (a treeSnap) diff(b treeSnap) string {
	var out []string
	for p, x := range a {
		y, ok := b[p]
		switch {
		case !ok:
			out = append(out, "removed "+p)
		case x.Data != y.Data:
			out = append(out, fmt.Sprintf("%s: content changed (%d -> %d bytes)", p, len(x.Data), len(y.Data)))
		default:
			xd, yd := x, y
			xd.Data, yd.Data = "", ""
			if fmt.Sprint(xd) != fmt.Sprint(yd) {
				out = append(out, fmt.Sprintf("%s: %+v -> %+v", p, xd, yd))
			}
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, "added "+p)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// findOnDevice returns the device offset of the first ioUnit-aligned copy
// of needle (at least 512 bytes) in the current image of mem, or -1.
func findOnDevice(t testing.TB, mem device.Device, needle []byte) int64 {
	t.Helper()
	const chunk = 1 << 20
	buf := device.AlignedBuf(chunk)
	for off := int64(0); off < mem.Size(); off += chunk {
		if err := device.ReadAt(mem, buf, off); err != nil {
			t.Fatal(err)
		}
		for i := 0; i+len(needle) <= chunk; i += 512 {
			if bytes.Equal(buf[i:i+len(needle)], needle) {
				return off + int64(i)
			}
		}
	}
	return -1
}
