package fusefs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// bdiValue reads one of the mount's bdi settings from /sys/class/bdi.
func (e *mountEnv) bdiValue(name string) int {
	e.t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(e.dir, &st); err != nil {
		e.t.Fatal(err)
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/%s", unix.Major(st.Dev), unix.Minor(st.Dev), name)
	b, err := os.ReadFile(p)
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		e.t.Fatalf("%s: %v", p, err)
	}
	return v
}

// TestReadaheadRaised checks that a mount made by root gets the readahead
// window and the dirty page share of Options (FUSE's own are 128 KiB and
// 1%), and that the window reaches the daemon: a cold sequential read of
// 8 MiB in 64 KiB read(2)s arrives as a few 1 MiB READs instead of 64
// READs of 128 KiB. The control mount keeps the kernel's values.
func TestReadaheadRaised(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can set a mount's bdi")
	}
	const size = 8 << 20
	for _, c := range []struct {
		name               string
		readAhead, dirty   int
		wantKB, wantRatio  int
		minReads, maxReads uint64
	}{
		{"default", 0, 0, DefaultReadAhead >> 10, DefaultDirtyRatio, 1, 24},
		{"kernel", -1, -1, 128, 1, 60, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newMountEnv(t, envOpts{fuse: Options{ReadAhead: c.readAhead, DirtyRatio: c.dirty}, cacheSet: true})
			if got := e.bdiValue("read_ahead_kb"); got != c.wantKB {
				t.Errorf("read_ahead_kb %d, want %d", got, c.wantKB)
			}
			if got := e.bdiValue("max_ratio"); got != c.wantRatio {
				t.Errorf("max_ratio %d, want %d", got, c.wantRatio)
			}
			// Written with O_DIRECT, so that nothing of it is cached.
			fd, err := syscall.Open(e.path("f"), syscall.O_CREAT|syscall.O_RDWR|syscall.O_DIRECT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			b := alignedBuf(1 << 20)
			for off := int64(0); off < size; off += int64(len(b)) {
				if _, err := syscall.Pwrite(fd, b, off); err != nil {
					t.Fatal(err)
				}
			}
			syscall.Close(fd)
			f, err := os.Open(e.path("f"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			before := e.srv.Stats()
			buf := make([]byte, 64<<10)
			total := 0
			for {
				n, err := f.Read(buf)
				total += n
				if err != nil || n == 0 {
					break
				}
			}
			after := e.srv.Stats()
			reqs := after.DevFuseRequests + after.URingRequests - before.DevFuseRequests - before.URingRequests
			t.Logf("%d bytes read in %d requests", total, reqs)
			if total != size {
				t.Fatalf("read %d bytes, want %d", total, size)
			}
			if reqs < c.minReads || reqs > c.maxReads {
				t.Errorf("%d requests for a cold 8 MiB sequential read, want [%d, %d]", reqs, c.minReads, c.maxReads)
			}
		})
	}
}
