package fusefs

import (
	"log"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/faultdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/volume"
)

// rawEnv is an FS over an engine on a memory volume (testvol, crashable),
// not mounted: tests call its FUSE methods directly, as a server would.
type rawEnv struct {
	t     *testing.T
	disks *testvol.Disks
	fault *faultdev.Device
	vol   *volume.Volume
	eng   *sluice.FS
	fs    *FS
	logs  *syncBuffer
	// failedOK says the test made the engine fail: its Close may too.
	failedOK bool
}

func newRawEnv(t *testing.T, engOpts sluice.Options, o Options) *rawEnv {
	t.Helper()
	d, err := testvol.Format(testvol.Config{DeviceBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return openRawEnv(t, d, engOpts, o)
}

func openRawEnv(t *testing.T, d *testvol.Disks, engOpts sluice.Options, o Options) *rawEnv {
	t.Helper()
	fault, v, eng := openFaultEngine(t, d, &engOpts)
	e := &rawEnv{t: t, disks: d, fault: fault, vol: v, eng: eng, logs: &syncBuffer{}}
	if o.Logger == nil {
		o.Logger = log.New(e.logs, "", 0)
	}
	var err error
	e.fs, err = New(eng, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}

// close closes the engine and its volume (idempotent); an abandoned
// environment (after a crash copy) is closed the same way.
func (e *rawEnv) close() {
	if e.eng == nil {
		return
	}
	if err := e.eng.Close(); err != nil && !e.failedOK {
		e.t.Errorf("closing the engine: %v", err)
	}
	e.vol.KV.Close()
	e.fault.Close()
	e.eng = nil
}

func rootHeader() fuse.InHeader {
	return fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}
}

// create creates name in the root and opens it with flags; it returns the
// node ID and the handle.
func (e *rawEnv) create(name string, flags uint32, mode uint32) (uint64, uint64) {
	e.t.Helper()
	var out fuse.CreateOut
	in := &fuse.CreateIn{InHeader: rootHeader(), Flags: flags, Mode: mode}
	if st := e.fs.Create(nil, in, name, &out); !st.Ok() {
		e.t.Fatalf("create %s: %v", name, st)
	}
	return out.NodeId, out.Fh
}

// open opens node id with flags and returns the handle.
func (e *rawEnv) open(id uint64, flags uint32) uint64 {
	e.t.Helper()
	var out fuse.OpenOut
	in := &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: id}, Flags: flags}
	if st := e.fs.Open(nil, in, &out); !st.Ok() {
		e.t.Fatalf("open %d: %v", id, st)
	}
	return out.Fh
}

// write writes b at off through handle fh, as the kernel would (a 4 KiB
// aligned payload, as go-fuse places it), in pieces of at most 1 MiB.
func (e *rawEnv) write(id, fh uint64, b []byte, off int64) {
	e.t.Helper()
	for len(b) > 0 {
		k := min(len(b), 1<<20)
		p := device.AlignedBuf(k)
		copy(p, b[:k])
		in := &fuse.WriteIn{InHeader: fuse.InHeader{NodeId: id}, Fh: fh, Offset: uint64(off), Size: uint32(k)}
		n, st := e.fs.Write(nil, in, p)
		if !st.Ok() || int(n) != k {
			e.t.Fatalf("write %d at %d: %d %v", k, off, n, st)
		}
		b, off = b[k:], off+int64(k)
	}
}

// contents reads node id whole through the engine.
func (e *rawEnv) contents(id uint64) []byte {
	e.t.Helper()
	f, err := e.eng.OpenIno(sluice.Ino(id), sluice.O_RDONLY)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	a, err := f.Stat()
	if err != nil {
		e.t.Fatal(err)
	}
	b := make([]byte, a.Size)
	if _, err := f.ReadAt(b, 0); err != nil && len(b) > 0 {
		e.t.Fatal(err)
	}
	return b
}

func (e *rawEnv) getattr(id uint64) fuse.Attr {
	e.t.Helper()
	var out fuse.AttrOut
	if st := e.fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: id}}, &out); !st.Ok() {
		e.t.Fatalf("getattr %d: %v", id, st)
	}
	return out.Attr
}

// fsync makes node id's delayed blocks allocated (so its block count
// is final) and its data durable.
func (e *rawEnv) fsync(id, fh uint64) {
	e.t.Helper()
	if st := e.fs.Fsync(nil, &fuse.FsyncIn{InHeader: fuse.InHeader{NodeId: id}, Fh: fh}); !st.Ok() {
		e.t.Fatalf("fsync %d: %v", id, st)
	}
}
