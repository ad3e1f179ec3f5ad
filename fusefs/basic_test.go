package fusefs

import (
	"bytes"
	"os"
	"syscall"
	"testing"
)

func TestSmoke(t *testing.T) {
	e := newMountEnv(t, envOpts{})
	data := pattern(3*4096+100, 1)
	if err := os.WriteFile(e.path("a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.path("a"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read back differs")
	}
	fd, err := syscall.Open(e.path("d"), syscall.O_CREAT|syscall.O_RDWR|syscall.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	b := alignedBuf(8192)
	copy(b, data)
	if n, err := syscall.Pwrite(fd, b, 4096); err != nil || n != len(b) {
		t.Fatalf("pwrite: %d %v", n, err)
	}
	r := alignedBuf(8192)
	if n, err := syscall.Pread(fd, r, 4096); err != nil || n != len(r) {
		t.Fatalf("pread: %d %v", n, err)
	}
	if !bytes.Equal(r, b) {
		t.Fatal("direct read back differs")
	}
	syscall.Close(fd)
	e.checkClean()
}
