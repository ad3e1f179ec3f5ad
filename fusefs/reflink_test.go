package fusefs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice/internal/harness/fio"
)

// TestReflinkMount: cp --reflink=auto on the mount makes a reflink copy
// (copy_file_range clones), which copy-on-write keeps apart from the
// original through buffered and O_DIRECT writes; FICLONE and
// FALLOC_FL_UNSHARE_RANGE stop in the kernel (EOPNOTSUPP on 6.18).
func TestReflinkMount(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	orig := pattern(1<<20+100, 1)
	if err := os.WriteFile(e.path("a"), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.path("a"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := e.eng.Counters()
	if out, err := exec.Command("cp", "--reflink=auto", e.path("a"), e.path("b")).CombinedOutput(); err != nil {
		t.Fatalf("cp --reflink=auto: %v\n%s", err, out)
	}
	after := e.eng.Counters()
	if got := after["ClonedBlocks"] - before["ClonedBlocks"]; got != 257 {
		t.Fatalf("cp --reflink=auto shared %d blocks, want 257 (the file, its EOF block too)", got)
	}
	if got, _ := os.ReadFile(e.path("b")); !bytes.Equal(got, orig) {
		t.Fatal("the copy differs")
	}
	g, err := os.OpenFile(e.path("b"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := unix.IoctlFileClone(int(g.Fd()), int(f.Fd())); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Logf("FICLONE on the mount: %v (6.18 answers EOPNOTSUPP itself)", err)
	}
	if err := unix.Fallocate(int(g.Fd()), unix.FALLOC_FL_UNSHARE_RANGE, 0, 4096); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Logf("FALLOC_FL_UNSHARE_RANGE on the mount: %v (6.18 answers EOPNOTSUPP itself)", err)
	}
	// Writes into the copy, buffered and direct, leave the original.
	want := bytes.Clone(orig)
	if _, err := g.WriteAt([]byte("buffered"), 5000); err != nil {
		t.Fatal(err)
	}
	copy(want[5000:], "buffered")
	d, err := os.OpenFile(e.path("b"), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	w := alignedBuf(8192)
	copy(w, pattern(8192, 7))
	if _, err := d.WriteAt(w, 64<<10); err != nil {
		t.Fatal(err)
	}
	copy(want[64<<10:], w)
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(e.path("b")); !bytes.Equal(got, want) {
		t.Fatal("the copy does not hold its writes")
	}
	if got, _ := os.ReadFile(e.path("a")); !bytes.Equal(got, orig) {
		t.Fatal("writes into the copy changed the original")
	}
	e.checkClean()
}

// TestFioVerifyReflinked: fio writes a file, cp --reflink=auto makes three
// copies sharing its blocks, fio overwrites two of them at once (O_DIRECT,
// QD16, and buffered) and verifies every block it wrote (crc32c), and the
// third copy and the original stay as they were.
func TestFioVerifyReflinked(t *testing.T) {
	if !fio.Available() {
		t.Skip("fio is not installed")
	}
	e := newMountEnv(t, envOpts{})
	const size = 4 << 20
	runFio(t, e.dir, fio.Job{Filename: "base", RW: "write", BS: 4096, Size: size, IOEngine: "psync", Verify: "crc32c"})
	base, err := os.ReadFile(e.path("base"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		if out, err := exec.Command("cp", "--reflink=auto", e.path("base"), e.path(c)).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	}
	if r, err := e.eng.Check(); err != nil || r.SharedBlocks != size/4096 {
		t.Fatalf("after the copies: %v, %d shared blocks, want %d", err, r.SharedBlocks, size/4096)
	}
	var wg sync.WaitGroup
	for i, c := range []string{"c1", "c2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := fio.Job{Filename: c, RW: "randwrite", BS: 4096, Size: size, IOEngine: "psync", Verify: "crc32c"}
			if i == 0 {
				j.Direct, j.IOEngine, j.IODepth = true, "libaio", 16
			}
			runFio(t, e.dir, j)
		}()
	}
	wg.Wait()
	for _, c := range []string{"base", "c3"} {
		if got, _ := os.ReadFile(e.path(c)); !bytes.Equal(got, base) {
			t.Fatalf("%s changed while its clones were overwritten", c)
		}
	}
	e.checkClean()
}
