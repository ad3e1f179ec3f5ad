package blockpr_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"unsafe"

	"github.com/sluicefs/sluice/device/blockpr"
	"github.com/sluicefs/sluice/device/blockpr/blockprtest"
)

// ioc is the kernel's _IOC(dir, type, nr, size) (include/uapi/asm-generic/ioctl.h):
// nr in bits 0-7, type in 8-15, size in 16-29, direction in 30-31.
func ioc(dir, typ, nr, size uintptr) uint { return uint(dir<<30 | size<<16 | typ<<8 | nr) }

// iow is _IOW(type, nr, size): direction _IOC_WRITE (1).
func iow(typ, nr, size uintptr) uint { return ioc(1, typ, nr, size) }

// TestEncodings checks the structs' layouts and the ioctl numbers against
// include/uapi/linux/pr.h: struct pr_registration {__u64 old_key; __u64
// new_key; __u32 flags; __u32 __pad;}, pr_reservation {__u64 key; __u32
// type; __u32 flags;}, pr_preempt {__u64 old_key; __u64 new_key; __u32
// type; __u32 flags;}, pr_clear {__u64 key; __u32 flags; __u32 __pad;},
// IOC_PR_REGISTER _IOW('p', 200, struct pr_registration) up to
// IOC_PR_CLEAR _IOW('p', 205, struct pr_clear), the pr_type values and
// PR_FL_IGNORE_KEY.
func TestEncodings(t *testing.T) {
	var (
		reg blockpr.Registration
		rsv blockpr.Reservation
		pre blockpr.Preemption
		clr blockpr.Clearing
	)
	sizes := []struct {
		name      string
		got, want uintptr
	}{
		{"pr_registration", unsafe.Sizeof(reg), 24},
		{"pr_registration.new_key", unsafe.Offsetof(reg.NewKey), 8},
		{"pr_registration.flags", unsafe.Offsetof(reg.Flags), 16},
		{"pr_reservation", unsafe.Sizeof(rsv), 16},
		{"pr_reservation.type", unsafe.Offsetof(rsv.Type), 8},
		{"pr_reservation.flags", unsafe.Offsetof(rsv.Flags), 12},
		{"pr_preempt", unsafe.Sizeof(pre), 24},
		{"pr_preempt.new_key", unsafe.Offsetof(pre.NewKey), 8},
		{"pr_preempt.type", unsafe.Offsetof(pre.Type), 16},
		{"pr_preempt.flags", unsafe.Offsetof(pre.Flags), 20},
		{"pr_clear", unsafe.Sizeof(clr), 16},
		{"pr_clear.flags", unsafe.Offsetof(clr.Flags), 8},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("%s: size or offset %d, the header's is %d", s.name, s.got, s.want)
		}
	}
	const p = 'p'
	nums := []struct {
		name      string
		got, want uint
	}{
		{"IOC_PR_REGISTER", blockpr.IOC_PR_REGISTER, iow(p, 200, unsafe.Sizeof(reg))},
		{"IOC_PR_RESERVE", blockpr.IOC_PR_RESERVE, iow(p, 201, unsafe.Sizeof(rsv))},
		{"IOC_PR_RELEASE", blockpr.IOC_PR_RELEASE, iow(p, 202, unsafe.Sizeof(rsv))},
		{"IOC_PR_PREEMPT", blockpr.IOC_PR_PREEMPT, iow(p, 203, unsafe.Sizeof(pre))},
		{"IOC_PR_PREEMPT_ABORT", blockpr.IOC_PR_PREEMPT_ABORT, iow(p, 204, unsafe.Sizeof(pre))},
		{"IOC_PR_CLEAR", blockpr.IOC_PR_CLEAR, iow(p, 205, unsafe.Sizeof(clr))},
		// The values the macros expand to on x86-64 and arm64 (as
		// strace prints them).
		{"IOC_PR_REGISTER literal", blockpr.IOC_PR_REGISTER, 0x401870c8},
		{"IOC_PR_PREEMPT_ABORT literal", blockpr.IOC_PR_PREEMPT_ABORT, 0x401870cc},
	}
	for _, n := range nums {
		if n.got != n.want {
			t.Errorf("%s = %#x, want %#x", n.name, n.got, n.want)
		}
	}
	types := []struct {
		got  blockpr.Type
		want uint32
	}{
		{blockpr.WriteExclusive, 1}, {blockpr.ExclusiveAccess, 2}, {blockpr.WriteExclusiveRegOnly, 3},
		{blockpr.ExclusiveAccessRegOnly, 4}, {blockpr.WriteExclusiveAllRegistrants, 5}, {blockpr.ExclusiveAccessAllRegistrants, 6},
	}
	for _, ty := range types {
		if uint32(ty.got) != ty.want {
			t.Errorf("%v = %d, want %d", ty.got, uint32(ty.got), ty.want)
		}
	}
	if blockpr.FlagIgnoreKey != 1 || blockpr.StatusReservationConflict != 0x18 || blockpr.StatusIOError != 0x2 {
		t.Errorf("PR_FL_IGNORE_KEY %d, PR_STS_RESERVATION_CONFLICT %#x, PR_STS_IOERR %#x", blockpr.FlagIgnoreKey,
			uint32(blockpr.StatusReservationConflict), uint32(blockpr.StatusIOError))
	}
}

// TestEncodingsReachIoctl: each command hands the ioctl its number and a
// struct holding its arguments.
func TestEncodingsReachIoctl(t *testing.T) {
	var got []string
	d := blockpr.New(7, func(fd uintptr, req uint, arg unsafe.Pointer) error {
		if fd != 7 {
			t.Errorf("fd %d", fd)
		}
		c := blockprtest.Call{Host: "h", Req: req}
		switch req {
		case blockpr.IOC_PR_REGISTER:
			r := *(*blockpr.Registration)(arg)
			c.OldKey, c.NewKey, c.Flags = r.OldKey, r.NewKey, r.Flags
		case blockpr.IOC_PR_RESERVE, blockpr.IOC_PR_RELEASE:
			r := *(*blockpr.Reservation)(arg)
			c.Key, c.Type, c.Flags = r.Key, r.Type, r.Flags
		case blockpr.IOC_PR_PREEMPT, blockpr.IOC_PR_PREEMPT_ABORT:
			r := *(*blockpr.Preemption)(arg)
			c.OldKey, c.NewKey, c.Type, c.Flags = r.OldKey, r.NewKey, r.Type, r.Flags
		case blockpr.IOC_PR_CLEAR:
			c.Key = (*blockpr.Clearing)(arg).Key
		}
		got = append(got, c.String())
		return nil
	})
	d.Register(1, 2, blockpr.FlagIgnoreKey)
	d.Reserve(3, blockpr.WriteExclusive, 0)
	d.Release(4, blockpr.ExclusiveAccess, 0)
	d.Preempt(5, 6, blockpr.WriteExclusive, false, 0)
	d.Preempt(7, 8, blockpr.WriteExclusive, true, 0)
	d.Clear(9)
	want := []string{
		"h: register 0x1 -> 0x2 ignore = ok",
		"h: reserve 0x3 Write Exclusive = ok",
		"h: release 0x4 Exclusive Access = ok",
		"h: preempt 0x5 by 0x6 Write Exclusive = ok",
		"h: preempt-abort 0x7 by 0x8 Write Exclusive = ok",
		"h: clear 0x9 = ok",
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands:\n%q\nwant\n%q", got, want)
	}
}

// TestSysStatus: a positive result of the ioctl is a Status, a failure
// its errno.
func TestSysStatus(t *testing.T) {
	err := &blockpr.OpError{Op: "IOC_PR_RESERVE", Err: blockpr.StatusReservationConflict}
	if !blockpr.Conflict(err) || blockpr.Unsupported(err) || err.Error() != "IOC_PR_RESERVE: reservation conflict" {
		t.Errorf("%v: conflict %v, unsupported %v", err, blockpr.Conflict(err), blockpr.Unsupported(err))
	}
	for _, e := range []error{syscall.ENOTTY, syscall.EOPNOTSUPP, syscall.EINVAL, syscall.ENOSYS} {
		if !blockpr.Unsupported(&blockpr.OpError{Op: "IOC_PR_REGISTER", Err: e}) {
			t.Errorf("%v is not taken for no reservations", e)
		}
	}
	if blockpr.Unsupported(syscall.EPERM) || blockpr.Unsupported(syscall.EIO) {
		t.Error("EPERM or EIO taken for no reservations")
	}
}

// TestReservationsUnsupported: the data devices available here, an image
// file and a loop device, refuse IOC_PR_REGISTER through the real ioctl
// (ENOTTY: the ioctl goes to the file system; EOPNOTSUPP: the loop driver
// has no pr_ops), and Take says ErrUnsupported. (Moved here from
// device/fencedev.)
func TestReservationsUnsupported(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(path string, want syscall.Errno) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		d := blockpr.New(f.Fd(), nil)
		if err := d.Register(0, 0x51_1ce, blockpr.FlagIgnoreKey); !errors.Is(err, want) {
			t.Errorf("IOC_PR_REGISTER on %s: %v, want %v", path, err, want)
		}
		if _, err := blockpr.Take(d, 0x51_1ce, []uint64{0x01d}); !errors.Is(err, blockpr.ErrUnsupported) || !errors.Is(err, want) {
			t.Errorf("Take on %s: %v, want ErrUnsupported (%v)", path, err, want)
		}
	}
	check(img, syscall.ENOTTY)
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device")
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v", err)
	}
	dev := string(bytes.TrimSpace(out))
	defer exec.Command("losetup", "--detach", dev).Run()
	check(dev, syscall.EOPNOTSUPP)
}

const (
	keyA = 0x694d_0000_0000_00a1 // host a's ownership
	keyB = 0x694d_0000_0000_00b2 // host b's, after a
)

// take runs Take for host on target.
func take(tg *blockprtest.Target, host string, key uint64, prev ...uint64) (uint64, error) {
	return blockpr.Take(blockpr.New(0, tg.Ioctl(host)), key, prev)
}

func wantLog(t *testing.T, tg *blockprtest.Target, want ...string) {
	t.Helper()
	if got := tg.Log(); !slices.Equal(got, want) {
		t.Errorf("commands:\n  %s\nwant\n  %s", join(got), join(want))
	}
}

func join(s []string) string {
	var b bytes.Buffer
	for i, l := range s {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestFirstOwner: the first owner registers and reserves; its clean
// release releases and unregisters.
func TestFirstOwner(t *testing.T) {
	tg := &blockprtest.Target{}
	pre, err := take(tg, "a", keyA)
	if err != nil || pre != 0 {
		t.Fatalf("take: preempted %#x, %v", pre, err)
	}
	if h, k := tg.Holder(); h != "a" || k != keyA || tg.CanWrite("b") {
		t.Errorf("holder %q key %#x; b can write: %v", h, k, tg.CanWrite("b"))
	}
	if err := blockpr.Give(blockpr.New(0, tg.Ioctl("a")), keyA); err != nil {
		t.Fatal(err)
	}
	if h, _ := tg.Holder(); h != "" || tg.Registered("a") != 0 {
		t.Errorf("after give: holder %q, a registered %#x", h, tg.Registered("a"))
	}
	wantLog(t, tg,
		"a: register 0x0 -> 0x694d0000000000a1 ignore = ok",
		"a: reserve 0x694d0000000000a1 Write Exclusive = ok",
		"a: release 0x694d0000000000a1 Write Exclusive = ok",
		"a: register 0x694d0000000000a1 -> 0x0 = ok")
}

// TestTakeover: a takeover from a crashed owner registers its own key,
// finds the reservation taken, and preempts the previous owner's key with
// abort; the old host can write no more.
func TestTakeover(t *testing.T) {
	tg := &blockprtest.Target{}
	if _, err := take(tg, "a", keyA); err != nil {
		t.Fatal(err)
	}
	pre, err := take(tg, "b", keyB, keyA)
	if err != nil || pre != keyA {
		t.Fatalf("takeover: preempted %#x, %v", pre, err)
	}
	if h, k := tg.Holder(); h != "b" || k != keyB || tg.CanWrite("a") || tg.Registered("a") != 0 || tg.Aborted("a") != 1 {
		t.Errorf("holder %q key %#x; a can write %v, registered %#x, aborted %d", h, k, tg.CanWrite("a"), tg.Registered("a"), tg.Aborted("a"))
	}
	wantLog(t, tg,
		"a: register 0x0 -> 0x694d0000000000a1 ignore = ok",
		"a: reserve 0x694d0000000000a1 Write Exclusive = ok",
		"b: register 0x0 -> 0x694d0000000000b2 ignore = ok",
		"b: reserve 0x694d0000000000b2 Write Exclusive = reservation conflict",
		"b: preempt-abort 0x694d0000000000a1 by 0x694d0000000000b2 Write Exclusive = ok",
		"b: reserve 0x694d0000000000b2 Write Exclusive = ok")
	// The old host, woken, releases cleanly as it believes: the device
	// refuses it, and changes nothing.
	if err := blockpr.Give(blockpr.New(0, tg.Ioctl("a")), keyA); !blockpr.Conflict(err) {
		t.Errorf("the preempted host's give: %v, want a reservation conflict", err)
	}
	if h, _ := tg.Holder(); h != "b" {
		t.Errorf("holder %q after the old host's give", h)
	}
}

// TestTakeoverPastACrashedOwner: b took the volume over from a, registered
// and died before reserving (or failed to preempt); c, given both earlier
// keys newest first, preempts b's registration, then a's reservation.
func TestTakeoverPastACrashedOwner(t *testing.T) {
	tg := &blockprtest.Target{}
	take(tg, "a", keyA)
	if err := blockpr.New(0, tg.Ioctl("b")).Register(0, keyB, blockpr.FlagIgnoreKey); err != nil {
		t.Fatal(err)
	}
	const keyC = 0x694d_0000_0000_00c3
	pre, err := take(tg, "c", keyC, keyB, keyA)
	if err != nil || pre != keyA {
		t.Fatalf("take: preempted %#x, %v", pre, err)
	}
	if h, k := tg.Holder(); h != "c" || k != keyC || tg.Registered("a") != 0 || tg.Registered("b") != 0 {
		t.Errorf("holder %q key %#x; a registered %#x, b %#x", h, k, tg.Registered("a"), tg.Registered("b"))
	}
	wantLog(t, tg,
		"a: register 0x0 -> 0x694d0000000000a1 ignore = ok",
		"a: reserve 0x694d0000000000a1 Write Exclusive = ok",
		"b: register 0x0 -> 0x694d0000000000b2 ignore = ok",
		"c: register 0x0 -> 0x694d0000000000c3 ignore = ok",
		"c: reserve 0x694d0000000000c3 Write Exclusive = reservation conflict",
		"c: preempt-abort 0x694d0000000000b2 by 0x694d0000000000c3 Write Exclusive = ok",
		"c: reserve 0x694d0000000000c3 Write Exclusive = reservation conflict",
		"c: preempt-abort 0x694d0000000000a1 by 0x694d0000000000c3 Write Exclusive = ok",
		"c: reserve 0x694d0000000000c3 Write Exclusive = ok")
}

// TestTakeoverAfterCleanRelease: after a clean release the reservation is
// free; nothing is preempted.
func TestTakeoverAfterCleanRelease(t *testing.T) {
	tg := &blockprtest.Target{}
	take(tg, "a", keyA)
	blockpr.Give(blockpr.New(0, tg.Ioctl("a")), keyA)
	if pre, err := take(tg, "b", keyB, keyA); err != nil || pre != 0 {
		t.Fatalf("take after a clean release: preempted %#x, %v", pre, err)
	}
}

// TestSameHostReowns: a new ownership on the host that held the previous
// one replaces its registration (PR_FL_IGNORE_KEY), and the reservation
// goes with it: no preemption (nor any fencing by the device, between
// processes of one host).
func TestSameHostReowns(t *testing.T) {
	tg := &blockprtest.Target{}
	take(tg, "a", keyA)
	if pre, err := take(tg, "a", keyB, keyA); err != nil || pre != 0 {
		t.Fatalf("re-take on the same host: preempted %#x, %v", pre, err)
	}
	if h, k := tg.Holder(); h != "a" || k != keyB {
		t.Errorf("holder %q key %#x", h, k)
	}
}

// TestUnsupported: a device without pr_ops answers the registration with
// EOPNOTSUPP (an image file ENOTTY), and Take issues nothing more.
func TestUnsupported(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.EOPNOTSUPP, syscall.ENOTTY, syscall.EINVAL} {
		tg := &blockprtest.Target{Refuse: e}
		if _, err := take(tg, "a", keyA); !errors.Is(err, blockpr.ErrUnsupported) || !errors.Is(err, e) {
			t.Errorf("%v: %v, want ErrUnsupported", e, err)
		}
		if n := len(tg.Calls()); n != 1 {
			t.Errorf("%v: %d commands, want the registration only", e, n)
		}
	}
}

// TestPreemptFails: a preemption that fails (another key holds the
// reservation, or the device refuses) fails Take, which leaves no
// registration behind; so does a reservation held by an unknown key.
func TestPreemptFails(t *testing.T) {
	tg := &blockprtest.Target{}
	take(tg, "x", 0xdead) // a key that is not the previous owner's
	_, err := take(tg, "b", keyB, keyA)
	if err == nil || !blockpr.Conflict(err) || tg.Registered("b") != 0 {
		t.Errorf("preempting a key that is not registered: %v (b registered %#x)", err, tg.Registered("b"))
	}
	if h, _ := tg.Holder(); h != "x" {
		t.Errorf("holder %q", h)
	}
	if _, err := take(tg, "b", keyB); err == nil || tg.Registered("b") != 0 {
		t.Errorf("reservation held, previous key unknown: %v", err)
	}

	tg = &blockprtest.Target{Fail: func(c blockprtest.Call) error {
		if c.Req == blockpr.IOC_PR_PREEMPT_ABORT {
			return syscall.EACCES
		}
		return nil
	}}
	take(tg, "a", keyA)
	_, err = take(tg, "b", keyB, keyA)
	if !errors.Is(err, syscall.EACCES) || tg.Registered("b") != 0 {
		t.Errorf("a preemption refused with EACCES: %v (b registered %#x)", err, tg.Registered("b"))
	}
	if h, k := tg.Holder(); h != "a" || k != keyA {
		t.Errorf("holder %q key %#x after a failed preemption", h, k)
	}
	t.Logf("the error: %v", err)
}

// TestRegisterEPERM: EPERM on a whole device (no CAP_SYS_ADMIN) fails
// Take; it is not taken for a device without reservations.
func TestRegisterEPERM(t *testing.T) {
	tg := &blockprtest.Target{Refuse: syscall.EPERM}
	if _, err := take(tg, "a", keyA); err == nil || errors.Is(err, blockpr.ErrUnsupported) {
		t.Errorf("EPERM: %v, want a failure", err)
	}
}
