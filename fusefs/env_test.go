package fusefs

import (
	"github.com/sluicefs/sluice/fuseserver"

	"bytes"
	"log"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/volume"
)

// requireFUSE skips the test when this machine cannot mount FUSE file
// systems (no /dev/fuse, or no permission to open it).
func requireFUSE(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("skipping: FUSE is not available here (%v); these tests need /dev/fuse and root (or fusermount3)", err)
	}
	f.Close()
}

// mountEnv is a sluice engine on a memory device behind a fault-injecting
// wrapper, with in-memory metadata (testvol, not crashable), mounted on a
// temporary directory.
type mountEnv struct {
	t     testing.TB
	mem   *memdev.Device
	fault *faultdev.Device
	vol   *volume.Volume
	eng   *sluice.FS
	srv   *Server
	dir   string
	logs  *syncBuffer
}

type envOpts struct {
	size   int64
	ioUnit int // device I/O unit; 512 if 0
	engine sluice.Options
	fuse   Options
	// transportSet: the test chose fuse.Transport itself, and
	// SLUICE_FUSE_TRANSPORT does not override it.
	transportSet bool
	// cacheSet: the test chose the cache mode itself, and
	// SLUICE_FUSE_CACHE does not override it.
	cacheSet bool
	// public puts the mount point in a directory every user may enter
	// (t.TempDir is its user's only), for tests that use the mount as
	// another user.
	public bool
}

// syncBuffer collects log output for assertions.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// openFaultEngine opens the engine on d's volume through a faultdev
// device, so that the test can inject device faults and gates.
func openFaultEngine(t testing.TB, d *testvol.Disks, o *sluice.Options) (*faultdev.Device, *volume.Volume, *sluice.FS) {
	t.Helper()
	kv, err := d.OpenKV()
	if err != nil {
		t.Fatal(err)
	}
	fault := faultdev.New(d.Mem)
	v, err := volume.Attach(fault, kv)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sluice.OpenVolume(v, o)
	if err != nil {
		t.Fatal(err)
	}
	return fault, v, eng
}

func newMountEnv(t testing.TB, o envOpts) *mountEnv {
	t.Helper()
	requireFUSE(t)
	if o.size == 0 {
		o.size = 256 << 20
	}
	d, err := testvol.Format(testvol.Config{DeviceBytes: o.size, IOUnit: o.ioUnit, BlockSize: max(o.ioUnit, volume.DefaultBlockSize), NotCrashable: true})
	if err != nil {
		t.Fatal(err)
	}
	fault, v, eng := openFaultEngine(t, d, &o.engine)
	e := &mountEnv{t: t, mem: d.Mem, fault: fault, vol: v, eng: eng, logs: &syncBuffer{}}
	parent := t.TempDir()
	if o.public {
		parent = publicTempDir(t.(*testing.T))
	}
	e.dir = filepath.Join(parent, "mnt")
	if err := os.Mkdir(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fo := o.fuse
	if tr := os.Getenv("SLUICE_FUSE_TRANSPORT"); tr != "" && !o.transportSet {
		// CI runs the suite once per transport.
		if fo.Transport, err = fuseserver.ParseTransport(tr); err != nil {
			t.Fatal(err)
		}
	}
	if c := os.Getenv("SLUICE_FUSE_CACHE"); c != "" && fo.Cache == KernelCache && !fo.WritebackCache && !o.cacheSet {
		// CI runs the suite once more in each other cache mode.
		switch c {
		case "writeback":
			fo.WritebackCache = true
		case "sluice":
			fo.Cache = SluiceCache
		default:
			t.Fatalf("SLUICE_FUSE_CACHE=%s: want writeback or sluice", c)
		}
	}
	if fo.Logger == nil {
		fo.Logger = log.New(e.logs, "", 0)
	}
	e.srv, err = Mount(eng, e.dir, &fo)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}

// close unmounts (forcing if files are still open) and closes the engine.
func (e *mountEnv) close() {
	if e.srv != nil {
		if err := e.srv.Unmount(); err != nil {
			e.t.Logf("unmount: %v; forcing", err)
			if err := e.srv.UnmountWith(UnmountOptions{Force: true}); err != nil {
				e.t.Errorf("forced unmount: %v", err)
			}
		}
		e.srv = nil
	}
	if e.eng != nil {
		if err := e.eng.Close(); err != nil {
			e.t.Errorf("closing the engine: %v", err)
		}
		e.vol.KV.Close()
		e.fault.Close()
		e.eng = nil
	}
}

func (e *mountEnv) path(name string) string { return filepath.Join(e.dir, name) }

// checkClean fails the test if the engine finds problems in the volume.
func (e *mountEnv) checkClean() {
	e.t.Helper()
	r, err := e.eng.Check()
	if err != nil {
		e.t.Fatal(err)
	}
	if !r.Clean() {
		e.t.Fatalf("check found problems: %v", r.Problems)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31+i/4096) ^ seed
	}
	return b
}

// alignedBuf returns a 4 KiB-aligned buffer for O_DIRECT system calls.
func alignedBuf(n int) []byte { return device.AlignedBuf(n) }

// cacheConfigs are the buffered-I/O configurations the battery tests run
// in: the default (kernel page cache, write-through), the engine's page
// cache, and the kernel's writeback cache.
var cacheConfigs = []struct {
	name string
	opts Options
}{
	{"kernel", Options{Cache: KernelCache}},
	{"sluice", Options{Cache: SluiceCache}},
	{"writeback", Options{Cache: KernelCache, WritebackCache: true}},
}
