package fusefs

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// Regression tests of engine bugs and missing features found while
// writing fusefs, all fixed.

// TestEngineDirParent: the inode API should give a directory's parent,
// for the ".." entry of READDIR.
func TestEngineDirParent(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	a, err := e.eng.MkdirIno(sluice.RootIno, "d", 0o755, sluice.Owner{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.eng.Lookup(a.Ino, "..")
	if err != nil || p.Ino != sluice.RootIno {
		t.Fatalf("Lookup(dir, \"..\") = %d, %v; want the root", p.Ino, err)
	}
}

// TestEngineRootWriteKeepsSuid: Linux keeps set-user-ID when a caller
// with CAP_FSETID (root) writes; sluice strips it on every write.
func TestEngineRootWriteKeepsSuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	e := newMountEnv(t, envOpts{})
	p := e.path("s")
	if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, 0o4755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_ISUID == 0 {
		t.Fatalf("a write by root cleared set-user-ID (mode %o)", st.Mode)
	}
}
