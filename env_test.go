package sluice

import (
	"testing"

	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/volume"
)

// testEnv is a file system on a memory device (behind a fault-injecting
// wrapper) and an in-memory, crashable Pebble, built by testvol.
type testEnv struct {
	t     testing.TB
	disks *testvol.Disks
	fault *faultdev.Device
	vol   *volume.Volume
	fs    *FS
	opts  Options
}

type envConfig struct {
	size      int64 // testvol.Config.DeviceBytes; 64 MiB if 0
	ioUnit    int   // testvol.Config.IOUnit; 512 if 0
	blockSize int   // testvol.Config.BlockSize; 4096 if 0
	sums      bool  // testvol.Config.DataChecksums
	opts      Options
}

func newEnv(t testing.TB, cfg envConfig) *testEnv {
	t.Helper()
	d, err := testvol.Format(testvol.Config{DeviceBytes: cfg.size, IOUnit: cfg.ioUnit, BlockSize: cfg.blockSize, DataChecksums: cfg.sums})
	if err != nil {
		t.Fatal(err)
	}
	return openEnv(t, d, cfg.opts)
}

func openEnv(t testing.TB, d *testvol.Disks, opts Options) *testEnv {
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
	fs, err := OpenVolume(v, &opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, disks: d, fault: fault, vol: v, fs: fs, opts: opts}
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

// reopen closes the file system cleanly and opens it again on a copy of
// its device and metadata: a cold cache.
func (e *testEnv) reopen() *testEnv {
	e.t.Helper()
	if err := e.fs.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.vol.KV.Close()
	d := e.disks.Copy() // everything was flushed and synced: the same bytes
	e.fault.Close()
	e.fs = nil
	return openEnv(e.t, d, e.opts)
}

// crash returns a new environment holding what a power failure now could
// leave: the device's crash image for seed (unflushed writes kept, dropped
// or torn) and the metadata as last synced plus some unsynced part
// (testvol.Disks.Crash). The original environment is abandoned without a
// clean close.
func (e *testEnv) crash(seed uint64) *testEnv {
	e.t.Helper()
	return openEnv(e.t, e.disks.Crash(seed), e.opts)
}

// mustCreate opens path for reading and writing with extra flags, created
// or truncated.
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
