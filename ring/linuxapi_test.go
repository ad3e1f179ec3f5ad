package ring

import (
	"errors"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice"
)

// TestRenameatFlags: the ring's renameat takes renameat2's flags: an
// exchange swaps two names, a whiteout leaves a 0:0 character device, a
// no-replace over an existing name is EEXIST; each completes on a worker.
func TestRenameatFlags(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	for _, p := range []string{"/a", "/b", "/c"} {
		f, err := e.fs.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte(p), 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	r := e.ring(4, nil)
	for i, c := range []struct {
		old, new string
		flags    uint32
	}{
		{"/a", "/b", sluice.RenameExchange},
		{"/c", "/d", sluice.RenameWhiteout},
		{"/a", "/b", sluice.RenameNoReplace},
	} {
		if err := r.Renameat(e.fs, c.old, c.new, c.flags, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range reap(t, r, 3) {
		want := error(nil)
		if c.Tag == 2 {
			want = syscall.EEXIST
		}
		if !errors.Is(c.Err, want) || (want == nil) != (c.Err == nil) || c.Flags&CQEPunted == 0 {
			t.Errorf("rename %d: %v (flags %v), want %v on a worker", c.Tag, c.Err, c.Flags, want)
		}
	}
	for p, want := range map[string]string{"/a": "/b", "/b": "/a", "/d": "/c"} {
		f, err := e.fs.OpenFile(p, sluice.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", p, b, err, want)
		}
		f.Close()
	}
	a, err := e.fs.Lstat("/c")
	if err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFCHR || a.Rdev != 0 {
		t.Errorf("/c after a whiteout rename: %+v %v", a, err)
	}
	if err := r.Submit(SQE{Op: OpRenameat, Path: "/a", Path2: "/b"}); err == nil {
		t.Error("a renameat without a file system was accepted")
	}
}

// TestFallocateModes: the ring passes every fallocate mode through,
// UNSHARE_RANGE included (io_uring has no clone opcode: a reflink is the
// library's).
func TestFallocateModes(t *testing.T) {
	e := newEnv(t, sluice.Concurrent())
	e.prewrite("/f", 4*4096, 1)
	f := e.open("/f", 0)
	g := e.open("/g", 0)
	if err := g.Clone(f); err != nil {
		t.Fatal(err)
	}
	r := e.ring(4, nil)
	modes := []uint32{sluice.FallocUnshareRange, sluice.FallocCollapseRange, sluice.FallocInsertRange}
	for i, m := range modes {
		if err := r.Fallocate(g, m, 0, 4096, uint64(i)); err != nil {
			t.Fatal(err)
		}
		c := reap(t, r, 1)[0]
		if c.Err != nil {
			t.Fatalf("fallocate mode %#x: %v", m, c.Err)
		}
	}
	if a, _ := g.Stat(); a.Size != 4*4096 {
		t.Fatalf("size %d after collapse and insert", a.Size)
	}
}
