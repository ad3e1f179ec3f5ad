package sluice

import (
	"errors"
	"syscall"
	"testing"
)

// TestFileExtend: Extend grows a file with a hole (no block allocated, the
// old tail still reads back), and leaves a longer file alone, mtime
// included.
func TestFileExtend(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	if _, err := f.WriteAt(pattern(6000, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil { // allocate the delayed blocks
		t.Fatal(err)
	}
	before, _ := f.Stat()
	if err := f.Extend(1 << 20); err != nil {
		t.Fatal(err)
	}
	a, _ := f.Stat()
	if a.Size != 1<<20 || a.Blocks != before.Blocks {
		t.Fatalf("after Extend(1 MiB): size %d blocks %d, want %d and %d", a.Size, a.Blocks, 1<<20, before.Blocks)
	}
	if got := mustReadAll(t, f); string(got[:6000]) != string(pattern(6000, 1)) || got[6000] != 0 || got[1<<20-1] != 0 {
		t.Fatal("content after Extend is wrong")
	}
	if err := f.Extend(4096); err != nil {
		t.Fatal(err)
	}
	b, _ := f.Stat()
	if b.Size != 1<<20 || !b.Mtime.Equal(a.Mtime) {
		t.Fatalf("Extend to a smaller size changed the file: size %d, mtime %v -> %v", b.Size, a.Mtime, b.Mtime)
	}
	r, err := e.fs.OpenFile("/f", O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Extend(2 << 20); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Extend on a read-only file: %v, want EBADF", err)
	}
	checkClean(t, e.fs)
}

// TestFileModified: Modified clears set-user-ID and set-group-ID (with
// group execute) and moves mtime, as a write does; RWFKeepPrivs keeps the
// bits.
func TestFileModified(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := e.mustCreate("/f", 0)
	defer f.Close()
	mode := uint32(0o6755)
	a0, err := e.fs.Setattr(f.Ino(), SetAttr{Mode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Modified(RWFKeepPrivs); err != nil {
		t.Fatal(err)
	}
	a1, _ := f.Stat()
	if a1.Mode&0o7777 != 0o6755 || a1.Mtime.Before(a0.Mtime) {
		t.Fatalf("Modified(RWFKeepPrivs): mode %o mtime %v", a1.Mode&0o7777, a1.Mtime)
	}
	if err := f.Modified(0); err != nil {
		t.Fatal(err)
	}
	a2, _ := f.Stat()
	if a2.Mode&0o7777 != 0o755 {
		t.Fatalf("Modified(0): mode %o, want 755", a2.Mode&0o7777)
	}
	if a2.Mtime.Before(a1.Mtime) || a2.Ctime.Before(a1.Ctime) {
		t.Fatal("Modified moved the times backwards")
	}
}
