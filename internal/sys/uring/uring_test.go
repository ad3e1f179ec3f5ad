package uring

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newRing creates a ring or skips the test when io_uring is unavailable on
// this host (disabled by sysctl, seccomp, or an old kernel).
func newRing(t *testing.T, entries uint32, p *Params) *Ring {
	t.Helper()
	r, err := New(entries, p)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestLayout(t *testing.T) {
	sizes := []struct {
		name      string
		got, want uintptr
	}{
		{"io_uring_sqe", unsafe.Sizeof(SQE{}), 64},
		{"io_uring_sqe (SQE128)", unsafe.Sizeof(SQE128{}), 128},
		{"io_uring_cqe", unsafe.Sizeof(CQE{}), 16},
		{"io_uring_params", unsafe.Sizeof(Params{}), 120},
		{"io_sqring_offsets", unsafe.Sizeof(SQRingOffsets{}), 40},
		{"io_cqring_offsets", unsafe.Sizeof(CQRingOffsets{}), 40},
	}
	for _, s := range sizes {
		if s.got != s.want {
			t.Errorf("sizeof(struct %s) = %d, want %d", s.name, s.got, s.want)
		}
	}
	// Offsets as printed by offsetof() against the kernel's uapi header.
	var sqe SQE
	var cqe CQE
	var p Params
	offsets := []struct {
		name      string
		got, want uintptr
	}{
		{"sqe.fd", unsafe.Offsetof(sqe.Fd), 4},
		{"sqe.off", unsafe.Offsetof(sqe.Off), 8},
		{"sqe.addr", unsafe.Offsetof(sqe.Addr), 16},
		{"sqe.len", unsafe.Offsetof(sqe.Len), 24},
		{"sqe.rw_flags", unsafe.Offsetof(sqe.OpFlags), 28},
		{"sqe.user_data", unsafe.Offsetof(sqe.UserData), 32},
		{"sqe.buf_index", unsafe.Offsetof(sqe.BufIndex), 40},
		{"sqe.personality", unsafe.Offsetof(sqe.Personality), 42},
		{"sqe.splice_fd_in", unsafe.Offsetof(sqe.SpliceFdIn), 44},
		{"sqe.addr3", unsafe.Offsetof(sqe.Addr3), 48},
		{"sqe.cmd", SQECmdOffset, 48},
		{"cqe.res", unsafe.Offsetof(cqe.Res), 8},
		{"cqe.flags", unsafe.Offsetof(cqe.Flags), 12},
		{"params.features", unsafe.Offsetof(p.Features), 20},
		{"params.wq_fd", unsafe.Offsetof(p.WQFd), 24},
		{"params.sq_off", unsafe.Offsetof(p.SQOff), 40},
		{"params.cq_off", unsafe.Offsetof(p.CQOff), 80},
		{"sq_off.array", unsafe.Offsetof(p.SQOff.Array), 24},
		{"cq_off.cqes", unsafe.Offsetof(p.CQOff.CQEs), 20},
	}
	for _, o := range offsets {
		if o.got != o.want {
			t.Errorf("offsetof(%s) = %d, want %d", o.name, o.got, o.want)
		}
	}
}

// TestConstantsMatchHeader checks the opcode and flag values against the
// installed kernel header, when there is one.
func TestConstantsMatchHeader(t *testing.T) {
	const header = "/usr/include/linux/io_uring.h"
	f, err := os.Open(header)
	if err != nil {
		t.Skipf("no kernel header: %v", err)
	}
	defer f.Close()
	// Opcodes are positions in enum io_uring_op.
	ops := map[string]int{}
	defines := map[string]string{}
	defineRE := regexp.MustCompile(`^#define\s+(IORING_\w+|IOSQE_\w+)\s+(.*?)\s*(/\*.*)?$`)
	inOps, next := false, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "enum io_uring_op {"):
			inOps = true
		case inOps && strings.HasPrefix(line, "}"):
			inOps = false
		case inOps && strings.HasPrefix(line, "IORING_OP_"):
			ops[strings.TrimSuffix(line, ",")] = next
			next++
		default:
			if m := defineRE.FindStringSubmatch(line); m != nil {
				defines[m[1]] = m[2]
			}
		}
	}
	if len(ops) == 0 {
		t.Fatalf("no enum io_uring_op in %s", header)
	}
	for name, want := range map[string]uint8{
		"IORING_OP_NOP": OpNop, "IORING_OP_FSYNC": OpFsync,
		"IORING_OP_READ": OpRead, "IORING_OP_WRITE": OpWrite,
		"IORING_OP_URING_CMD": OpURingCmd,
	} {
		if got, ok := ops[name]; !ok || got != int(want) {
			t.Errorf("%s = %d (found %v) in header, %d here", name, got, ok, want)
		}
	}
	shiftRE := regexp.MustCompile(`^\(1U << (\d+)\)$`)
	for name, want := range map[string]uint32{
		"IORING_FSYNC_DATASYNC":      FsyncDatasync,
		"IORING_SETUP_CQSIZE":        SetupCQSize,
		"IORING_SETUP_CLAMP":         SetupClamp,
		"IORING_SETUP_SQE128":        SetupSQE128,
		"IORING_SETUP_SQPOLL":        SetupSQPoll,
		"IORING_SETUP_ATTACH_WQ":     SetupAttachWQ,
		"IORING_ENTER_SQ_WAKEUP":     EnterSQWakeup,
		"IORING_SQ_NEED_WAKEUP":      SQNeedWakeup,
		"IORING_SETUP_SUBMIT_ALL":    SetupSubmitAll,
		"IORING_SETUP_COOP_TASKRUN":  SetupCoopTaskrun,
		"IORING_SETUP_TASKRUN_FLAG":  SetupTaskrunFlag,
		"IORING_SETUP_SINGLE_ISSUER": SetupSingleIssuer,
		"IORING_SETUP_DEFER_TASKRUN": SetupDeferTaskrun,
		"IORING_FEAT_SINGLE_MMAP":    FeatSingleMmap,
		"IORING_FEAT_NODROP":         FeatNoDrop,
		"IORING_ENTER_GETEVENTS":     EnterGetEvents,
		"IORING_SQ_CQ_OVERFLOW":      SQCQOverflow,
		"IORING_SQ_TASKRUN":          SQTaskrun,
	} {
		m := shiftRE.FindStringSubmatch(defines[name])
		if m == nil {
			t.Errorf("%s: unexpected definition %q", name, defines[name])
			continue
		}
		shift, _ := strconv.Atoi(m[1])
		if uint32(1)<<shift != want {
			t.Errorf("%s = 1<<%d in header, %#x here", name, shift, want)
		}
	}
	for name, want := range map[string]uint64{
		"IORING_OFF_CQ_RING": offCQRing, "IORING_OFF_SQES": offSQEs,
	} {
		got, err := strconv.ParseUint(strings.TrimSuffix(defines[name], "ULL"), 0, 64)
		if err != nil || got != want {
			t.Errorf("%s = %q in header, %#x here", name, defines[name], want)
		}
	}
}

func TestSetupTeardown(t *testing.T) {
	r, err := New(8, nil)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("io_uring unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.SQEntries() != 8 || r.CQEntries() != 16 {
		t.Errorf("entries = %d/%d, want 8/16", r.SQEntries(), r.CQEntries())
	}
	if r.Params().Features&FeatSingleMmap == 0 {
		t.Logf("kernel without FeatSingleMmap: features %#x", r.Params().Features)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := r.Submit(); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close = %v, want ErrClosed", err)
	}
}

func TestSetupErrors(t *testing.T) {
	// Zero entries is invalid.
	if _, err := New(0, nil); !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
		t.Errorf("New(0) = %v, want EINVAL", err)
	}
	// Unknown setup flags are refused.
	if _, err := New(8, &Params{Flags: 1 << 31}); !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
		t.Errorf("New with unknown flag = %v, want EINVAL", err)
	}
	// SetupDeferTaskrun without SetupSingleIssuer is refused.
	if _, err := New(8, &Params{Flags: SetupDeferTaskrun}); err == nil {
		t.Errorf("New(SetupDeferTaskrun alone) succeeded")
	}
}

func TestCQSize(t *testing.T) {
	r := newRing(t, 4, &Params{Flags: SetupCQSize, CQEntries: 64})
	if r.SQEntries() != 4 || r.CQEntries() != 64 {
		t.Errorf("entries = %d/%d, want 4/64", r.SQEntries(), r.CQEntries())
	}
}

func TestNopRoundTrip(t *testing.T) {
	r := newRing(t, 8, nil)
	for i := range 100 { // wraps the 8-entry SQ and 16-entry CQ many times
		sqe := r.GetSQE()
		if sqe == nil {
			t.Fatal("SQ full with nothing in flight")
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i) + 1000
		if n, err := r.Submit(); err != nil || n != 1 {
			t.Fatalf("Submit = %d, %v", n, err)
		}
		cqe, err := r.WaitCQE()
		if err != nil {
			t.Fatal(err)
		}
		if cqe.UserData != uint64(i)+1000 || cqe.Res != 0 {
			t.Fatalf("cqe = %+v, want user_data %d res 0", *cqe, i+1000)
		}
		r.CQAdvance(1)
	}
	if r.PeekCQE() != nil {
		t.Error("extra CQE")
	}
}

func TestSubmitNothing(t *testing.T) {
	r := newRing(t, 4, nil)
	if n, err := r.Submit(); n != 0 || err != nil {
		t.Errorf("Submit of nothing = %d, %v", n, err)
	}
	if n, err := r.SubmitAndWait(0); n != 0 || err != nil {
		t.Errorf("SubmitAndWait(0) of nothing = %d, %v", n, err)
	}
}

// TestSharedSubmission pins the kernel behaviour directdev's shared
// submission relies on: SubmitPublished submits every published SQE (the
// kernel clamps to_submit to what is there), and an Enter that asks to
// submit more than is published (because another thread submitted them)
// submits what is there and returns without waiting.
func TestSharedSubmission(t *testing.T) {
	r := newRing(t, 8, nil)
	for range 3 {
		r.GetSQE().PrepNop()
	}
	if got := r.Publish(); got != 3 {
		t.Fatalf("Publish = %d unconsumed, want 3", got)
	}
	if n, err := r.SubmitPublished(); err != nil || n != 3 {
		t.Fatalf("SubmitPublished = %d, %v; want 3", n, err)
	}
	if n, err := r.SubmitPublished(); err != nil || n != 0 {
		t.Fatalf("SubmitPublished of nothing = %d, %v", n, err)
	}
	r.GetSQE().PrepNop()
	r.Publish()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Asks for 2 but 1 is published: submits it and must not wait
		// for 100 completions.
		if n, err := r.Enter(2, 100); err != nil || n != 1 {
			t.Errorf("Enter(2, 100) = %d, %v; want 1 submitted", n, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Enter waited although it submitted fewer SQEs than asked")
	}
}

func tempFile(t *testing.T, size int) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReadWriteFsync(t *testing.T) {
	f := tempFile(t, 1<<16)
	fd := int(f.Fd())
	r := newRing(t, 16, nil)

	// Write 8 distinct 4 KiB blocks in one batch, fsync, read them back in
	// another batch and compare.
	const n = 8
	wbufs := make([][]byte, n)
	for i := range wbufs {
		wbufs[i] = bytes.Repeat([]byte{byte(i + 1)}, 4096)
		sqe := r.GetSQE()
		sqe.PrepWrite(fd, wbufs[i], uint64(i)*4096)
		sqe.UserData = uint64(i)
	}
	if got, err := r.SubmitAndWait(n); err != nil || got != n {
		t.Fatalf("SubmitAndWait = %d, %v", got, err)
	}
	cqes := make([]CQE, 2*n)
	if got := r.PeekBatch(cqes); got != n {
		t.Fatalf("PeekBatch = %d, want %d", got, n)
	}
	for _, c := range cqes[:n] {
		if c.Res != 4096 {
			t.Fatalf("write %d: res %d", c.UserData, c.Res)
		}
	}
	sqe := r.GetSQE()
	sqe.PrepFsync(fd, FsyncDatasync)
	sqe.UserData = 99
	cqe, err := r.WaitCQE()
	if err != nil || cqe.UserData != 99 || cqe.Res != 0 {
		t.Fatalf("fsync: %+v, %v", cqe, err)
	}
	r.CQAdvance(1)

	rbufs := make([][]byte, n)
	for i := range rbufs {
		rbufs[i] = make([]byte, 4096)
		sqe := r.GetSQE()
		sqe.PrepRead(fd, rbufs[i], uint64(i)*4096)
		sqe.UserData = uint64(100 + i)
	}
	if _, err := r.SubmitAndWait(n); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for r.CQReady() > 0 {
		c := r.PeekCQE()
		i := int(c.UserData) - 100
		if c.Res != 4096 || i < 0 || i >= n {
			t.Fatalf("read cqe %+v", *c)
		}
		if !bytes.Equal(rbufs[i], wbufs[i]) {
			t.Errorf("block %d differs", i)
		}
		r.CQAdvance(1)
		seen++
	}
	if seen != n {
		t.Fatalf("reaped %d reads, want %d", seen, n)
	}
	// Cross-check with the page cache view.
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, 3*4096); err != nil || !bytes.Equal(got, wbufs[3]) {
		t.Errorf("pread after io_uring write differs (%v)", err)
	}
	runtime.KeepAlive(wbufs)
	runtime.KeepAlive(rbufs)
}

func TestShortRead(t *testing.T) {
	// A read that crosses EOF completes short, with the byte count.
	f := tempFile(t, 6000)
	r := newRing(t, 4, nil)
	buf := make([]byte, 8192)
	sqe := r.GetSQE()
	sqe.PrepRead(int(f.Fd()), buf, 4096)
	cqe, err := r.WaitCQE()
	if err != nil {
		t.Fatal(err)
	}
	if cqe.Res != 6000-4096 {
		t.Errorf("res = %d, want %d", cqe.Res, 6000-4096)
	}
	r.CQAdvance(1)
	runtime.KeepAlive(buf)
}

func TestErrorsAsNegativeRes(t *testing.T) {
	r := newRing(t, 4, nil)
	buf := make([]byte, 512)
	cases := []struct {
		name string
		prep func(*SQE)
		want syscall.Errno
	}{
		{"bad fd", func(s *SQE) { s.PrepRead(-1, buf, 0) }, unix.EBADF},
		{"write to O_RDONLY", func(s *SQE) {
			f, err := os.Open(tempFile(t, 4096).Name())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			s.PrepWrite(int(f.Fd()), buf, 0)
		}, unix.EBADF},
		{"unknown opcode", func(s *SQE) { s.Opcode = 250 }, unix.EINVAL},
	}
	for _, c := range cases {
		sqe := r.GetSQE()
		c.prep(sqe)
		sqe.UserData = 7
		cqe, err := r.WaitCQE()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cqe.Res != -int32(c.want) || !errors.Is(cqe.Err(), c.want) {
			t.Errorf("%s: res %d (%v), want -%d (%v)", c.name, cqe.Res, cqe.Err(), int(c.want), c.want)
		}
		r.CQAdvance(1)
	}
	if (&CQE{Res: 5}).Err() != nil {
		t.Error("CQE{Res: 5}.Err() != nil")
	}
	runtime.KeepAlive(buf)
}

func TestRingFull(t *testing.T) {
	r := newRing(t, 4, nil)
	for i := range 4 {
		sqe := r.GetSQE()
		if sqe == nil {
			t.Fatalf("GetSQE %d = nil", i)
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i)
	}
	if r.GetSQE() != nil {
		t.Fatal("GetSQE on a full SQ returned an entry")
	}
	if r.SQSpace() != 0 || r.SQPending() != 4 {
		t.Fatalf("SQSpace %d SQPending %d, want 0 and 4", r.SQSpace(), r.SQPending())
	}
	if n, err := r.Submit(); err != nil || n != 4 {
		t.Fatalf("Submit = %d, %v", n, err)
	}
	if r.SQSpace() != 4 {
		t.Fatalf("SQSpace after Submit = %d, want 4", r.SQSpace())
	}
	// Fill the 8-entry CQ exactly: 4 more NOPs. Nothing overflows.
	for i := range 4 {
		r.GetSQE().UserData = uint64(4 + i) // zeroed SQE is a NOP on fd 0
	}
	if _, err := r.SubmitAndWait(8); err != nil {
		t.Fatal(err)
	}
	if r.CQReady() != 8 || r.CQOverflow() != 0 || r.SQFlags()&SQCQOverflow != 0 {
		t.Fatalf("CQReady %d overflow %d flags %#x", r.CQReady(), r.CQOverflow(), r.SQFlags())
	}
	// Reap in two batches; order is submission order for NOPs.
	cqes := make([]CQE, 3)
	var got []uint64
	for r.CQReady() > 0 {
		n := r.PeekBatch(cqes)
		for _, c := range cqes[:n] {
			got = append(got, c.UserData)
		}
	}
	if len(got) != 8 {
		t.Fatalf("reaped %v", got)
	}
	for i, u := range got {
		if u != uint64(i) {
			t.Fatalf("reaped %v, want 0..7 in order", got)
		}
	}
}

func TestSingleIssuerDeferTaskrun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := New(8, &Params{Flags: SetupSingleIssuer | SetupDeferTaskrun})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("SetupDeferTaskrun unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sqe := r.GetSQE()
	sqe.PrepNop()
	sqe.UserData = 42
	if _, err := r.Submit(); err != nil {
		t.Fatal(err)
	}
	// Completions are posted only once the issuer asks for events.
	cqe, err := r.WaitCQE()
	if err != nil || cqe.UserData != 42 {
		t.Fatalf("cqe %+v, %v", cqe, err)
	}
	r.CQAdvance(1)
}

func TestSQE128Cmd(t *testing.T) {
	var s SQE128
	cmd := s.Cmd()
	if len(cmd) != 80 || cap(cmd) != 80 {
		t.Fatalf("len/cap(Cmd()) = %d/%d, want 80/80", len(cmd), cap(cmd))
	}
	if uintptr(unsafe.Pointer(&cmd[0]))-uintptr(unsafe.Pointer(&s)) != 48 {
		t.Fatal("Cmd() does not start at byte 48")
	}
	// The command area overlays addr3.
	cmd[0] = 0xAB
	if s.Addr3 != 0xAB {
		t.Errorf("Addr3 = %#x after cmd[0] = 0xab", s.Addr3)
	}
	s.PrepURingCmd(7, 0x12345678, unsafe.Pointer(&s), 2)
	if s.Opcode != OpURingCmd || s.Fd != 7 || s.Len != 2 || s.Addr != uint64(uintptr(unsafe.Pointer(&s))) {
		t.Errorf("PrepURingCmd: %+v", s.SQE)
	}
	// cmd_op is the first u32 of the off union.
	if got := *(*uint32)(unsafe.Pointer(&s.Off)); got != 0x12345678 {
		t.Errorf("cmd_op = %#x", got)
	}
}

// TestSQE128Ring checks that a SetupSQE128 ring hands out 128-byte slots,
// zeroes the whole slot (command area included) and that requests in
// every slot complete, across several wraps of the SQ.
func TestSQE128Ring(t *testing.T) {
	r := newRing(t, 4, &Params{Flags: SetupSQE128})
	if r.SQESize() != SQE128Size {
		t.Fatalf("SQESize = %d", r.SQESize())
	}
	var prev uintptr
	for i := range 12 {
		sqe := r.GetSQE128()
		if sqe == nil {
			t.Fatal("GetSQE128 = nil with nothing in flight")
		}
		p := uintptr(unsafe.Pointer(sqe))
		if i%4 != 0 && p-prev != SQE128Size {
			t.Fatalf("slot %d is %d bytes after the previous", i, p-prev)
		}
		prev = p
		for j, b := range sqe.Cmd() {
			if b != 0 {
				t.Fatalf("slot %d: cmd[%d] = %d, not zeroed", i, j, b)
			}
		}
		// Dirty the command area; the next round must zero it again.
		for j := range sqe.Cmd() {
			sqe.Cmd()[j] = 0xFF
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i)
		cqe, err := r.WaitCQE()
		if err != nil || cqe.UserData != uint64(i) || cqe.Res != 0 {
			t.Fatalf("nop %d: %+v %v", i, cqe, err)
		}
		r.CQAdvance(1)
	}
	// GetSQE on the same ring also strides by 128 and zeroes the tail.
	sqe := r.GetSQE()
	if tail := (*SQE128)(unsafe.Pointer(sqe)).Cmd(); tail[79] != 0 {
		t.Error("GetSQE left the upper half of a 128-byte SQE dirty")
	}
	sqe.PrepNop()
	if _, err := r.WaitCQE(); err != nil {
		t.Fatal(err)
	}
	r.CQAdvance(1)
	if newRing(t, 4, nil).GetSQE128() != nil {
		t.Error("GetSQE128 on a 64-byte ring returned an entry")
	}
}

// TestSQPoll runs NOPs through two rings that share one SQ polling
// thread, across the thread's sleeps: Publish and SQPollWakeup, with no
// io_uring_enter to submit.
func TestSQPoll(t *testing.T) {
	a := newRing(t, 4, &Params{Flags: SetupSQPoll | SetupSQE128, SQThreadIdle: 1})
	b := newRing(t, 4, &Params{Flags: SetupSQPoll | SetupSQE128 | SetupAttachWQ, SQThreadIdle: 1, WQFd: uint32(a.Fd())})
	for i := range 6 {
		for _, r := range []*Ring{a, b} {
			r.GetSQE128().UserData = uint64(i) // zeroed: a NOP
			r.Publish()
			if err := r.SQPollWakeup(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Enter(0, 1); err != nil {
				t.Fatal(err)
			}
			cqe := r.PeekCQE()
			if cqe == nil || cqe.UserData != uint64(i) || cqe.Res != 0 {
				t.Fatalf("round %d: cqe %+v", i, cqe)
			}
			r.CQAdvance(1)
		}
		if i%2 == 1 {
			time.Sleep(20 * time.Millisecond) // let the thread go to sleep
		}
	}
}
