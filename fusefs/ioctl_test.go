package fusefs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sluicefs/sluice"
)

// xfsExchangeRangeArgs is struct xfs_exchange_range as a caller lays it
// out.
type xfsExchangeRangeArgs struct {
	File1Fd     int32
	Pad         uint32
	File1Offset uint64
	File2Offset uint64
	Length      uint64
	Flags       uint64
}

// ioctlExchangeRange issues XFS_IOC_EXCHANGE_RANGE on f (file2).
func ioctlExchangeRange(f *os.File, a xfsExchangeRangeArgs) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), xfsIocExchangeRange, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return e
	}
	return nil
}

// TestExchangeRangeMount: XFS_IOC_EXCHANGE_RANGE through the mount
// reaches the daemon as FUSE_IOCTL and exchanges, and the kernel serves
// the exchanged data and sizes afterwards, not the pages and attributes it
// cached before; the daemon resolves file1's descriptor without a GETATTR
// of its own. The refusals: EBADF for a read-only or O_APPEND file1 and an
// O_APPEND file2, EXDEV for a file1 on another file system, EINVAL for a
// pad that is not zero or an unknown flag, ENOTTY for another ioctl.
func TestExchangeRangeMount(t *testing.T) {
	if unsafe.Sizeof(xfsExchangeRangeArgs{}) != xfsExchangeRangeSize {
		t.Fatalf("the test's struct is %d bytes", unsafe.Sizeof(xfsExchangeRangeArgs{}))
	}
	m := NewMetrics()
	// Attributes cached for an hour: only the daemon's invalidation can
	// make the kernel look at the exchanged files again.
	e := newMountEnv(t, envOpts{fuse: Options{Metrics: m, AttrTimeout: time.Hour}, cacheSet: true}) // TestExchangeRangeMountWriteback has the other
	tr, _ := e.srv.Transport()
	t.Logf("transport: %v", tr)
	bs := e.eng.BlockSize()
	fill := func(s string) []byte {
		var b []byte
		for _, c := range []byte(s) {
			b = append(b, bytes.Repeat([]byte{c}, bs)...)
		}
		return b
	}
	open := func(name string, flags int) *os.File {
		t.Helper()
		f, err := os.OpenFile(e.path(name), flags, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	readAll := func(f *os.File, n int) []byte {
		t.Helper()
		b := make([]byte, n+1)
		k, err := f.ReadAt(b, 0)
		if err != nil && k != n {
			t.Fatalf("reading %s: %d bytes, %v", f.Name(), k, err)
		}
		return b[:k]
	}
	// blocks names the blocks of b by their first bytes.
	blocks := func(b []byte) string {
		var s []byte
		for i := 0; i < len(b); i += bs {
			s = append(s, b[i])
		}
		return string(s)
	}
	for name, data := range map[string][]byte{"a": fill("Aa"), "b": fill("Bb")} {
		if err := os.WriteFile(e.path(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fa, fb := open("a", os.O_RDWR), open("b", os.O_RDWR)
	// Read both, so that the kernel caches their pages.
	if !bytes.Equal(readAll(fa, 2*bs), fill("Aa")) || !bytes.Equal(readAll(fb, 2*bs), fill("Bb")) {
		t.Fatal("the files do not hold what was written")
	}
	getattrs := m.ops[opGetattr].count.Load()
	reads := m.ops[opRead].count.Load()
	// Block 0 of a (file1) with block 1 of b (file2, the ioctl's file).
	if err := ioctlExchangeRange(fb, xfsExchangeRangeArgs{File1Fd: int32(fa.Fd()), File2Offset: uint64(bs), Length: uint64(bs)}); err != nil {
		t.Fatalf("XFS_IOC_EXCHANGE_RANGE: %v", err)
	}
	if n := m.ops[opGetattr].count.Load() - getattrs; n != 0 {
		t.Errorf("serving the ioctl sent %d GETATTRs", n)
	}
	if got := readAll(fa, 2*bs); !bytes.Equal(got, fill("ba")) {
		t.Errorf("a after the exchange holds blocks %q, want \"ba\" (stale cached pages?)", blocks(got))
	}
	if got := readAll(fb, 2*bs); !bytes.Equal(got, fill("BA")) {
		t.Errorf("b after the exchange holds blocks %q, want \"BA\" (stale cached pages?)", blocks(got))
	}
	if m.ops[opRead].count.Load() == reads {
		t.Error("the reads after the exchange did not reach the daemon: the cached pages were kept")
	}

	// TO_EOF at offsets 0 swaps the sizes, which a stat shows at once although the
	// kernel had cached both files' attributes.
	if err := os.WriteFile(e.path("c"), fill("Cc")[:bs+100], 0o644); err != nil {
		t.Fatal(err)
	}
	fc := open("c", os.O_RDWR)
	for _, f := range []*os.File{fa, fc} {
		if _, err := f.Stat(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ioctlExchangeRange(fa, xfsExchangeRangeArgs{File1Fd: int32(fc.Fd()), Flags: sluice.ExchangeToEOF}); err != nil {
		t.Fatalf("XFS_IOC_EXCHANGE_RANGE with TO_EOF: %v", err)
	}
	for _, c := range []struct {
		f    *os.File
		want []byte
	}{{fa, fill("Cc")[:bs+100]}, {fc, fill("ba")}} {
		fi, err := c.f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(c.want)) {
			t.Errorf("%s has size %d after TO_EOF, want %d", c.f.Name(), fi.Size(), len(c.want))
		}
		if got := readAll(c.f, len(c.want)); !bytes.Equal(got, c.want) {
			t.Errorf("%s after TO_EOF differs", c.f.Name())
		}
	}

	// Refusals.
	host, err := os.OpenFile(filepath.Join(t.TempDir(), "host"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	ro, app, app2 := open("a", os.O_RDONLY), open("a", os.O_RDWR|os.O_APPEND), open("b", os.O_RDWR|os.O_APPEND)
	whole := xfsExchangeRangeArgs{File1Fd: int32(fa.Fd()), Length: uint64(bs)}
	for _, c := range []struct {
		name string
		f2   *os.File
		a    xfsExchangeRangeArgs
		want error
	}{
		{"read-only file1", fb, xfsExchangeRangeArgs{File1Fd: int32(ro.Fd()), Length: uint64(bs)}, unix.EBADF},
		{"O_APPEND file1", fb, xfsExchangeRangeArgs{File1Fd: int32(app.Fd()), Length: uint64(bs)}, unix.EBADF},
		{"O_APPEND file2", app2, whole, unix.EBADF},
		{"closed file1", fb, xfsExchangeRangeArgs{File1Fd: 1 << 20, Length: uint64(bs)}, unix.EBADF},
		{"file1 on the host", fb, xfsExchangeRangeArgs{File1Fd: int32(host.Fd()), Length: uint64(bs)}, unix.EXDEV},
		{"pad", fb, xfsExchangeRangeArgs{File1Fd: int32(fa.Fd()), Pad: 1, Length: uint64(bs)}, unix.EINVAL},
		{"pad before the descriptor", fb, xfsExchangeRangeArgs{File1Fd: -1, Pad: 1}, unix.EINVAL},
		{"unknown flag", fb, xfsExchangeRangeArgs{File1Fd: int32(fa.Fd()), Flags: 0x10}, unix.EINVAL},
		{"unaligned offset", fb, xfsExchangeRangeArgs{File1Fd: int32(fa.Fd()), File1Offset: 1, Length: uint64(bs)}, unix.EINVAL},
	} {
		if err := ioctlExchangeRange(c.f2, c.a); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// _IO('X', 200): no data, unknown to sluice.
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fb.Fd(), 0x58c8, 0); e != syscall.ENOTTY {
		t.Errorf("another ioctl: %v, want ENOTTY", e)
	}
	e.checkClean()
}

// TestExchangeRangeMountWriteback: with the kernel's writeback cache, the
// daemon has the kernel write a file's dirty pages back before it
// exchanges (they move with their blocks), and refuses TO_EOF, whose new
// sizes the kernel would not take from the daemon.
func TestExchangeRangeMountWriteback(t *testing.T) {
	e := newMountEnv(t, envOpts{fuse: Options{Cache: KernelCache, WritebackCache: true}})
	bs := e.eng.BlockSize()
	var fs [2]*os.File
	for i, name := range []string{"a", "b"} {
		f, err := os.OpenFile(e.path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(bytes.Repeat([]byte{"AB"[i]}, 2*bs)); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	a, b := fs[0], fs[1]
	// Dirty in the kernel's cache only: no fsync.
	if _, err := a.WriteAt(bytes.Repeat([]byte("X"), bs), 0); err != nil {
		t.Fatal(err)
	}
	if err := ioctlExchangeRange(b, xfsExchangeRangeArgs{File1Fd: int32(a.Fd()), Length: uint64(bs)}); err != nil {
		t.Fatalf("XFS_IOC_EXCHANGE_RANGE: %v", err)
	}
	got := make([]byte, 2*bs)
	for _, c := range []struct {
		f    *os.File
		want string
	}{{a, "BA"}, {b, "XB"}} {
		if _, err := c.f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		if s := string([]byte{got[0], got[bs]}); s != c.want {
			t.Errorf("%s holds blocks %q after the exchange, want %q", c.f.Name(), s, c.want)
		}
	}
	if err := ioctlExchangeRange(b, xfsExchangeRangeArgs{File1Fd: int32(a.Fd()), Flags: sluice.ExchangeToEOF}); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("TO_EOF with the writeback cache: %v, want EOPNOTSUPP", err)
	}
	// Both files must be open for reading and writing, as on XFS, although
	// the daemon opens a write-only file read-write in the engine with the
	// writeback cache: an O_WRONLY file2 must not let its blocks be read
	// through file1.
	wo, err := os.OpenFile(e.path("b"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wo.Close()
	if err := ioctlExchangeRange(wo, xfsExchangeRangeArgs{File1Fd: int32(a.Fd()), Length: uint64(bs)}); !errors.Is(err, unix.EBADF) {
		t.Errorf("exchange into an O_WRONLY file2: %v, want EBADF", err)
	}
	e.checkClean()
}
