package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device/faultdev"
)

// copyConfigs are the ways CopyFileRange reads and writes: engine-direct
// handles (the kernel-cache default, O_DIRECT opens) and the engine's
// buffered path (SluiceCache), alone and mixed.
var copyConfigs = []struct {
	name               string
	opts               Options
	srcFlags, dstFlags uint32
}{
	{"kernel", Options{}, syscall.O_RDWR, syscall.O_RDWR},
	{"odirect", Options{}, syscall.O_RDWR | syscall.O_DIRECT, syscall.O_RDWR | syscall.O_DIRECT},
	{"sluice", Options{Cache: SluiceCache}, syscall.O_RDWR, syscall.O_RDWR},
	{"odirect-to-sluice", Options{Cache: SluiceCache}, syscall.O_RDWR | syscall.O_DIRECT, syscall.O_RDWR},
}

// copyRange answers COPY_FILE_RANGE from (idIn, fhIn) to (idOut, fhOut).
func (e *rawEnv) copyRange(idIn, fhIn uint64, offIn int64, idOut, fhOut uint64, offOut int64, n uint64) (uint32, fuse.Status) {
	in := &fuse.CopyFileRangeIn{
		InHeader: fuse.InHeader{NodeId: idIn}, FhIn: fhIn, OffIn: uint64(offIn),
		NodeIdOut: idOut, FhOut: fhOut, OffOut: uint64(offOut), Len: n,
	}
	return e.fs.CopyFileRange(nil, in)
}

// copyAll answers COPY_FILE_RANGE until n bytes are copied or a call
// copies none, as copy_file_range's callers (cp) loop over short counts,
// and returns the total: a first call that clones returns the cloned,
// whole-block prefix only.
func (e *rawEnv) copyAll(idIn, fhIn uint64, offIn int64, idOut, fhOut uint64, offOut int64, n uint64) (uint64, fuse.Status) {
	var done uint64
	for done < n {
		k, st := e.copyRange(idIn, fhIn, offIn+int64(done), idOut, fhOut, offOut+int64(done), n-done)
		if !st.Ok() {
			return done, st
		}
		if k == 0 {
			break
		}
		done += uint64(k)
	}
	return done, fuse.OK
}

// copyModel is what copying src[offIn:offIn+n] to offset offOut of dst
// leaves in dst.
func copyModel(dst, src []byte, offIn, offOut, n int64) []byte {
	out := bytes.Clone(dst)
	if end := offOut + n; int64(len(out)) < end {
		out = append(out, make([]byte, end-int64(len(out)))...)
	}
	copy(out[offOut:], src[offIn:offIn+n])
	return out
}

// TestCopyFileRange: copies between two files and within one, at aligned
// and unaligned offsets, into an empty file, over data, and past the
// destination's end of file, leave what a byte copy would, in every
// configuration of the handles.
func TestCopyFileRange(t *testing.T) {
	const srcSize = 3<<20 + 1000
	src := pattern(srcSize, 1)
	cases := []struct {
		name                 string
		dstSize              int
		offIn, offOut, count int64
	}{
		{"whole-aligned", 0, 0, 0, srcSize},
		{"aligned-over-data", 4 << 20, 1 << 20, 4096, 1<<20 + 512},
		{"unaligned", 4 << 20, 100, 7777, 2<<20 + 333},
		{"same-phase", 1 << 20, 1000, 5096, 3 << 19},
		{"past-dst-eof", 10000, 4096, 10000 + 12345, 1 << 20},
	}
	for _, cc := range copyConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newRawEnv(t, sluice.Options{}, cc.opts)
			sid, sfh := e.create("src", cc.srcFlags, 0o644)
			e.write(sid, sfh, src, 0)
			for i, c := range cases {
				did, dfh := e.create(fmt.Sprintf("dst%d", i), cc.dstFlags, 0o644)
				dst := pattern(c.dstSize, 9)
				e.write(did, dfh, dst, 0)
				n, st := e.copyAll(sid, sfh, c.offIn, did, dfh, c.offOut, uint64(c.count))
				if !st.Ok() || int64(n) != c.count {
					t.Fatalf("%s: copied %d, %v; want %d", c.name, n, st, c.count)
				}
				want := copyModel(dst, src, c.offIn, c.offOut, c.count)
				if got := e.contents(did); !bytes.Equal(got, want) {
					t.Fatalf("%s: destination differs from the model (%d bytes, want %d)", c.name, len(got), len(want))
				}
			}
			// Within one file, to a range that does not overlap.
			n, st := e.copyAll(sid, sfh, 4096, sid, sfh, 2<<20+100, 1<<20)
			if !st.Ok() || n != 1<<20 {
				t.Fatalf("same file: copied %d, %v", n, st)
			}
			if got, want := e.contents(sid), copyModel(src, src, 4096, 2<<20+100, 1<<20); !bytes.Equal(got, want) {
				t.Fatal("same file: contents differ from the model")
			}
			if r, err := e.eng.Check(); err != nil || !r.Clean() {
				t.Fatalf("check: %v %v", err, r.Problems)
			}
		})
	}
}

// TestCopyFileRangeEOF: a copy is cut at the source's end of file: across
// it the count is short, from it or past it 0 and the destination stays.
func TestCopyFileRangeEOF(t *testing.T) {
	e := newRawEnv(t, sluice.Options{}, Options{})
	src := pattern(10000, 1)
	sid, sfh := e.create("src", syscall.O_RDWR, 0o644)
	e.write(sid, sfh, src, 0)
	did, dfh := e.create("dst", syscall.O_RDWR, 0o644)
	for _, c := range []struct {
		offIn int64
		want  uint32
	}{{8000, 2000}, {10000, 0}, {50000, 0}} {
		n, st := e.copyRange(sid, sfh, c.offIn, did, dfh, 0, 5000)
		if !st.Ok() || n != c.want {
			t.Fatalf("copy 5000 from %d of 10000: %d %v, want %d", c.offIn, n, st, c.want)
		}
	}
	if got := e.contents(did); !bytes.Equal(got, src[8000:]) {
		t.Fatalf("destination has %d bytes, want the source's last 2000", len(got))
	}
}

// TestCopyFileRangeSparse: the holes of a sparse source are not written
// as zeros: into an empty file, the copy allocates what the source does
// and SEEK_HOLE finds the same holes; over data, the data under the
// source's holes is punched out; a copy of a hole alone past the end of
// file only grows the file.
func TestCopyFileRangeSparse(t *testing.T) {
	for _, cc := range copyConfigs {
		t.Run(cc.name, func(t *testing.T) {
			e := newRawEnv(t, sluice.Options{}, cc.opts)
			const size = 4 << 20
			sid, sfh := e.create("src", cc.srcFlags, 0o644)
			e.write(sid, sfh, pattern(64<<10, 1), 0)
			e.write(sid, sfh, pattern(64<<10+100, 2), 2<<20)
			sz := uint64(size)
			var ao fuse.AttrOut
			if st := e.fs.SetAttr(nil, &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: fuse.InHeader{NodeId: sid}, Valid: fuse.FATTR_SIZE, Size: sz}}, &ao); !st.Ok() {
				t.Fatal(st)
			}
			e.fsync(sid, sfh)
			src := e.contents(sid)
			sa := e.getattr(sid)

			newID, newFh := e.create("new", cc.dstFlags, 0o644)
			overID, overFh := e.create("over", cc.dstFlags, 0o644)
			e.write(overID, overFh, pattern(size, 7), 0)
			for _, d := range []struct {
				name   string
				id, fh uint64
			}{{"new", newID, newFh}, {"over", overID, overFh}} {
				n, st := e.copyRange(sid, sfh, 0, d.id, d.fh, 0, size)
				if !st.Ok() || n != size {
					t.Fatalf("%s: copied %d %v", d.name, n, st)
				}
				e.fsync(d.id, d.fh)
				if got := e.contents(d.id); !bytes.Equal(got, src) {
					t.Fatalf("%s: contents differ from the source", d.name)
				}
				if a := e.getattr(d.id); a.Blocks != sa.Blocks || a.Size != sa.Size {
					t.Errorf("%s: %d blocks, size %d; the source has %d, %d", d.name, a.Blocks, a.Size, sa.Blocks, sa.Size)
				}
				var lo fuse.LseekOut
				if st := e.fs.Lseek(nil, &fuse.LseekIn{InHeader: fuse.InHeader{NodeId: d.id}, Fh: d.fh, Offset: 0, Whence: unix.SEEK_HOLE}, &lo); !st.Ok() || lo.Offset != 64<<10 {
					t.Errorf("%s: SEEK_HOLE from 0: %d %v, want %d", d.name, lo.Offset, st, 64<<10)
				}
			}

			holeID, holeFh := e.create("hole", cc.dstFlags, 0o644)
			n, st := e.copyRange(sid, sfh, 1<<20, holeID, holeFh, 4096, 1<<20)
			if !st.Ok() || n != 1<<20 {
				t.Fatalf("hole: copied %d %v", n, st)
			}
			e.fsync(holeID, holeFh)
			if a := e.getattr(holeID); a.Size != 1<<20+4096 || a.Blocks != 0 {
				t.Errorf("hole: size %d, %d blocks; want %d and 0", a.Size, a.Blocks, 1<<20+4096)
			}
			if r, err := e.eng.Check(); err != nil || !r.Clean() {
				t.Fatalf("check: %v %v", err, r.Problems)
			}
		})
	}
}

// TestCopyFileRangeErrors: flags, handles open the wrong way, unknown
// handles, overlapping ranges of one file and directories are refused as
// copy_file_range(2) refuses them on XFS.
func TestCopyFileRangeErrors(t *testing.T) {
	e := newRawEnv(t, sluice.Options{}, Options{})
	sid, sfh := e.create("src", syscall.O_RDWR, 0o644)
	e.write(sid, sfh, pattern(1<<20, 1), 0)
	rdonly := e.open(sid, syscall.O_RDONLY)
	wronly := e.open(sid, syscall.O_WRONLY)
	did, dfh := e.create("dst", syscall.O_RDWR, 0o644)
	var od fuse.OpenOut
	if st := e.fs.OpenDir(nil, &fuse.OpenIn{InHeader: rootHeader()}, &od); !st.Ok() {
		t.Fatal(st)
	}
	in := func(mod func(*fuse.CopyFileRangeIn)) *fuse.CopyFileRangeIn {
		c := &fuse.CopyFileRangeIn{InHeader: fuse.InHeader{NodeId: sid}, FhIn: sfh, NodeIdOut: did, FhOut: dfh, Len: 4096}
		mod(c)
		return c
	}
	for _, c := range []struct {
		name string
		in   *fuse.CopyFileRangeIn
		want fuse.Status
	}{
		{"flags", in(func(c *fuse.CopyFileRangeIn) { c.Flags = 1 }), fuse.EINVAL},
		{"source write-only", in(func(c *fuse.CopyFileRangeIn) { c.FhIn = wronly }), fuse.EBADF},
		{"destination read-only", in(func(c *fuse.CopyFileRangeIn) { c.NodeIdOut, c.FhOut = sid, rdonly }), fuse.EBADF},
		{"unknown source", in(func(c *fuse.CopyFileRangeIn) { c.FhIn = 999 }), fuse.EBADF},
		{"unknown destination", in(func(c *fuse.CopyFileRangeIn) { c.FhOut = 0 }), fuse.EBADF},
		{"overlap", in(func(c *fuse.CopyFileRangeIn) { c.NodeIdOut, c.FhOut, c.OffOut = sid, sfh, 2048 }), fuse.EINVAL},
		{"overlap behind", in(func(c *fuse.CopyFileRangeIn) { c.NodeIdOut, c.FhOut, c.OffIn, c.OffOut = sid, wronly, 8192, 4097 }), fuse.EINVAL},
		{"source directory", in(func(c *fuse.CopyFileRangeIn) { c.NodeId, c.FhIn = fuse.FUSE_ROOT_ID, od.Fh }), fuse.Status(syscall.EISDIR)},
		{"offset past int64", in(func(c *fuse.CopyFileRangeIn) { c.OffOut = 1 << 63 }), fuse.EINVAL},
	} {
		if n, st := e.fs.CopyFileRange(nil, c.in); st != c.want || n != 0 {
			t.Errorf("%s: %d %v, want %v", c.name, n, st, c.want)
		}
	}
	if len(e.contents(did)) != 0 {
		t.Error("a refused copy wrote to the destination")
	}
	// Adjacent ranges of one file do not overlap.
	if n, st := e.copyRange(sid, sfh, 0, sid, sfh, 4096, 4096); !st.Ok() || n != 4096 {
		t.Errorf("adjacent ranges of one file: %d %v", n, st)
	}
}

// TestCopyFileRangeShort: a device error after the first piece was
// written ends the copy with a short count, the bytes copied so far in
// place; an error before any answers EIO.
func TestCopyFileRangeShort(t *testing.T) {
	e := newRawEnv(t, sluice.Options{}, Options{})
	src := pattern(4<<20, 1)
	sid, sfh := e.create("src", syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	e.write(sid, sfh, src, 0)
	did, dfh := e.create("dst", syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	e.write(did, dfh, pattern(5<<20, 2), 0) // written blocks: one device write per piece
	e.failedOK = true
	inj := e.fault.Inject(&faultdev.Fault{When: faultdev.And(faultdev.Writes, faultdev.FromNth(2, faultdev.AnyOp))})
	// At an unaligned destination offset: a byte copy, not a clone.
	const at = 512
	n, st := e.copyRange(sid, sfh, 0, did, dfh, at, 4<<20)
	inj.Remove()
	if !st.Ok() || n == 0 || n >= 4<<20 {
		t.Fatalf("copy with writes failing from the second: %d %v, want a short count", n, st)
	}
	if got := e.contents(did); int64(len(got)) < at+int64(n) || !bytes.Equal(got[at:at+n], src[:n]) {
		t.Fatalf("the %d bytes reported copied are not in place", n)
	}
	e.fault.Inject(&faultdev.Fault{When: faultdev.Writes})
	eid, efh := e.create("empty", syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	if n, st := e.copyRange(sid, sfh, 0, eid, efh, at, 1<<20); st != fuse.EIO || n != 0 {
		t.Fatalf("copy with every write failing: %d %v, want EIO", n, st)
	}
}

// TestCopyFileRangeAttrs: a copy changes the destination's mtime and
// ctime and clears set-user-ID and set-group-ID as a write does, also
// when it copies only a hole.
func TestCopyFileRangeAttrs(t *testing.T) {
	e := newRawEnv(t, sluice.Options{}, Options{})
	sid, sfh := e.create("src", syscall.O_RDWR, 0o644)
	var ao fuse.AttrOut
	if st := e.fs.SetAttr(nil, &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: fuse.InHeader{NodeId: sid}, Valid: fuse.FATTR_SIZE, Size: 1 << 20}}, &ao); !st.Ok() {
		t.Fatal(st)
	}
	e.write(sid, sfh, pattern(4096, 2), 0)
	for _, c := range []struct {
		name  string
		offIn int64
	}{{"data", 0}, {"hole", 512 << 10}} {
		name := c.name
		did, dfh := e.create(name, syscall.O_RDWR, 0o6775)
		e.write(did, dfh, pattern(8192, 1), 0)
		before := e.getattr(did)
		n, st := e.copyRange(sid, sfh, c.offIn, did, dfh, 100<<10, 4096)
		if !st.Ok() || n != 4096 {
			t.Fatalf("%s: %d %v", name, n, st)
		}
		a := e.getattr(did)
		if a.Mode&0o7777 != 0o775 {
			t.Errorf("%s: mode %o after the copy, want 775", name, a.Mode&0o7777)
		}
		if a.Mtime*1e9+uint64(a.Mtimensec) <= before.Mtime*1e9+uint64(before.Mtimensec) || a.Ctime*1e9+uint64(a.Ctimensec) <= before.Ctime*1e9+uint64(before.Ctimensec) {
			t.Errorf("%s: mtime/ctime did not move", name)
		}
		if a.Size != 100<<10+4096 {
			t.Errorf("%s: size %d", name, a.Size)
		}
	}
}

// TestCopyFileRangeMount: copy_file_range(2) on the mount reaches the
// daemon as COPY_FILE_RANGE (go-fuse dispatches it) and copies, whole and
// at unaligned offsets, in every cache configuration.
func TestCopyFileRangeMount(t *testing.T) {
	for _, cc := range cacheConfigs {
		t.Run(cc.name, func(t *testing.T) {
			m := NewMetrics()
			o := cc.opts
			o.Metrics = m
			e := newMountEnv(t, envOpts{fuse: o})
			src := pattern(3<<20+17, 4)
			if err := os.WriteFile(e.path("src"), src, 0o644); err != nil {
				t.Fatal(err)
			}
			in, err := os.Open(e.path("src"))
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			out, err := os.OpenFile(e.path("dst"), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			copyAll := func(offIn, offOut int64, n int) {
				t.Helper()
				for n > 0 {
					k, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, n, 0)
					if err != nil {
						t.Fatalf("copy_file_range: %v", err)
					}
					if k == 0 {
						t.Fatalf("copy_file_range: 0 with %d left", n)
					}
					n -= k
				}
			}
			copyAll(0, 0, len(src))
			copyAll(100, 5000, 1<<20+7)
			if m.ops[opCopyFileRange].count.Load() == 0 {
				t.Fatal("copy_file_range(2) did not reach the daemon")
			}
			want := copyModel(src, src, 100, 5000, 1<<20+7)
			got, err := os.ReadFile(e.path("dst"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("dst read through the mount differs (%d bytes, want %d)", len(got), len(want))
			}
			if got := engineRead(t, e, "dst"); !bytes.Equal(got, want) {
				t.Fatal("dst read through the engine differs")
			}
		})
	}
}
