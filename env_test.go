package sluice

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// testEnv is a file system on a memory device (behind a fault-injecting
// wrapper) and an in-memory, crashable Pebble.
type testEnv struct {
	t     testing.TB
	mem   *memdev.Device
	fault *faultdev.Device
	memfs *vfs.MemFS
	vol   *volume.Volume
	fs    *FS
	opts  Options
}

type envConfig struct {
	size      int64
	ioUnit    int
	blockSize int
	opts      Options
}

func newEnv(t testing.TB, cfg envConfig) *testEnv {
	t.Helper()
	if cfg.size == 0 {
		cfg.size = 64 << 20
	}
	if cfg.ioUnit == 0 {
		cfg.ioUnit = 512
	}
	mem, err := memdev.New(cfg.size, memdev.Options{IOUnit: cfg.ioUnit})
	if err != nil {
		t.Fatal(err)
	}
	memfs := vfs.NewCrashableMem()
	kv, err := meta.OpenPebble("meta", meta.PebbleOptions{FS: memfs, CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := volume.Format(mem, kv, volume.FormatOptions{BlockSize: cfg.blockSize}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}
	return openEnv(t, mem, memfs, cfg.opts)
}

func openEnv(t testing.TB, mem *memdev.Device, memfs *vfs.MemFS, opts Options) *testEnv {
	t.Helper()
	kv, err := meta.OpenPebble("meta", meta.PebbleOptions{FS: memfs})
	if err != nil {
		t.Fatal(err)
	}
	fault := faultdev.New(mem)
	v, err := volume.Attach(fault, kv)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := OpenVolume(v, &opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, mem: mem, fault: fault, memfs: memfs, vol: v, fs: fs, opts: opts}
	t.Cleanup(func() { e.close() })
	return e
}

// close closes the file system and its parts (idempotent).
func (e *testEnv) close() {
	if e.fs == nil {
		return
	}
	e.fs.Close()
	e.vol.KV.Close()
	e.fault.Close()
	e.fs = nil
}

// reopen closes the file system cleanly and opens it again on the same
// device and metadata: a cold cache.
func (e *testEnv) reopen() *testEnv {
	e.t.Helper()
	if err := e.fs.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.vol.KV.Close()
	img := e.mem.CrashImage(0) // everything was flushed: the same bytes
	e.fault.Close()
	e.fs = nil
	return openEnv(e.t, img, e.memfs, e.opts)
}

// crash returns a new environment holding what a power failure now could
// leave: the device's crash image for seed (unflushed writes kept, dropped
// or torn) and the metadata as last synced plus some unsynced part. The
// original environment is abandoned without a clean close.
func (e *testEnv) crash(seed uint64) *testEnv {
	e.t.Helper()
	img := e.mem.CrashImage(seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	memfs := e.memfs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, 9))})
	return openEnv(e.t, img, memfs, e.opts)
}

// mustWrite writes data to path (created or truncated) and returns the
// open file.
func (e *testEnv) mustCreate(path string, flags int) *File {
	e.t.Helper()
	f, err := e.fs.OpenFile(path, O_RDWR|O_CREAT|O_TRUNC|flags, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func mustReadAll(t testing.TB, f *File) []byte {
	t.Helper()
	a, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	buf := device.AlignedBuf(int(roundUp(a.Size, 4096)))
	n, err := f.Pread(buf, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func pattern(n int, seed byte) []byte {
	b := device.AlignedBuf(n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func checkClean(t testing.TB, fs *FS) {
	t.Helper()
	r, err := fs.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Clean() {
		t.Fatalf("Check found problems: %v", r.Problems)
	}
}

var _ = bytes.Equal
