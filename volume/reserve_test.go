package volume_test

// The data device's persistent reservation, taken with the ownership:
// through the kernel on an image file and a loop device (neither has
// pr_ops), and through blockprtest's fake device for the protocol, since
// no device here has them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicefs/sluice/device/blockpr"
	"github.com/sluicefs/sluice/device/blockpr/blockprtest"
	"github.com/sluicefs/sluice/volume"
)

// openHost opens dir as host's mount, its reservation commands going to tg.
func openHost(dir string, tg *blockprtest.Target, host string) (*volume.Volume, error) {
	lo := shortLease
	lo.ReservationIoctl = tg.Ioctl(host)
	return volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: lo})
}

// revoke revokes v's lease behind its back, as its crash would end it.
func revoke(t *testing.T, v *volume.Volume) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: cluster.Get(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Revoke(context.Background(), clientv3.LeaseID(v.Owner.ID())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-v.Owner.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked owner did not notice")
	}
}

// TestReservationImageFile: on an image file the kernel answers ENOTTY and
// the volume is used without a reservation, which stat says.
func TestReservationImageFile(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	v, err := volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: shortLease})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r := v.Reservation
	if r == nil || r.Held || r.Key != uint64(v.Owner.ID()) || !strings.Contains(r.Reason, "image file") {
		t.Fatalf("reservation %+v", r)
	}
	if s := r.String(); !strings.HasPrefix(s, "unsupported by device (an image file: IOC_PR_REGISTER: inappropriate ioctl") {
		t.Errorf("reservation %q", s)
	}
	vs, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Shared: true, Device: buffered})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	if st, err := vs.EtcdStatus(); err != nil || st.Reservation != "unsupported by device (an image file)" {
		t.Errorf("stat's reservation: %q, %v", st.Reservation, err)
	}
}

// TestReservationLoopDevice: a volume whose data is a loop device (no
// pr_ops: EOPNOTSUPP) is used without a reservation.
func TestReservationLoopDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device")
	}
	tmp := t.TempDir()
	img := filepath.Join(tmp, "loop.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v", err)
	}
	loop := string(bytes.TrimSpace(out))
	defer exec.Command("losetup", "--detach", loop).Run()
	dir := filepath.Join(tmp, "vol")
	if err := volume.Mkfs(dir, volume.MkfsOptions{Etcd: &volume.EtcdOptions{URL: metaURL(t)}, Data: loop, Device: buffered}); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	v, err := volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: shortLease})
	if err != nil {
		t.Fatal(err)
	}
	r := v.Reservation
	if r == nil || r.Held || !strings.Contains(r.String(), "operation not supported") {
		t.Errorf("reservation on %s: %+v", loop, r)
	}
	st, err := v.EtcdStatus()
	if err != nil || st.Reservation != r.String() {
		t.Errorf("status %q, %v", st.Reservation, err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReservationProtocol: the first owner registers its key (its lease
// ID) and reserves; after its crash (its lease revoked), the next owner
// registers its own and preempts the first one's, which it read in
// LastOwnerKey, aborting its commands; the crashed owner's close issues
// nothing; a clean close releases and unregisters, and the owner after it
// reserves without preempting.
func TestReservationProtocol(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	tg := &blockprtest.Target{}
	va, err := openHost(dir, tg, "a")
	if err != nil {
		t.Fatal(err)
	}
	keyA := uint64(va.Owner.ID())
	if r := va.Reservation; !r.Held || r.Key != keyA || r.Preempted != 0 {
		t.Fatalf("first owner: %+v", r)
	}
	if st, err := va.EtcdStatus(); err != nil || st.Reservation != va.Reservation.String() || !strings.HasPrefix(st.Reservation, "held, key 0x") {
		t.Errorf("status %q, %v", st.Reservation, err)
	}
	revoke(t, va)
	vb, err := openHost(dir, tg, "b")
	if err != nil {
		t.Fatal(err)
	}
	keyB := uint64(vb.Owner.ID())
	if r := vb.Reservation; !r.Held || r.Key != keyB || r.Preempted != keyA {
		t.Errorf("takeover: %+v, want key %#x preempting %#x", r, keyB, keyA)
	}
	if h, k := tg.Holder(); h != "b" || k != keyB || tg.CanWrite("a") || tg.Aborted("a") != 1 {
		t.Errorf("holder %q key %#x; a can write %v, aborted %d", h, k, tg.CanWrite("a"), tg.Aborted("a"))
	}
	if vb.Fence.NotBefore().Before(vb.Owner.Acquired().Add(vb.Owner.TakeoverWait(shortLease.IOBound))) {
		t.Errorf("the preemption shortened the takeover wait: not before %v", vb.Fence.NotBefore())
	}
	va.Close() // lost: it must not touch the reservation
	if err := vb.Close(); err != nil {
		t.Fatal(err)
	}
	vc, err := openHost(dir, tg, "c")
	if err != nil {
		t.Fatal(err)
	}
	keyC := uint64(vc.Owner.ID())
	if r := vc.Reservation; !r.Held || r.Preempted != 0 {
		t.Errorf("after a clean release: %+v", r)
	}
	if err := vc.Close(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range []string{
		"a: register 0x0 -> A ignore = ok",
		"a: reserve A Write Exclusive = ok",
		"b: register 0x0 -> B ignore = ok",
		"b: reserve B Write Exclusive = reservation conflict",
		"b: preempt-abort A by B Write Exclusive = ok",
		"b: reserve B Write Exclusive = ok",
		"b: release B Write Exclusive = ok",
		"b: register B -> 0x0 = ok",
		"c: register 0x0 -> C ignore = ok",
		"c: reserve C Write Exclusive = ok",
		"c: release C Write Exclusive = ok",
		"c: register C -> 0x0 = ok",
	} {
		want = append(want, strings.NewReplacer("A", hex(keyA), "B", hex(keyB), "C", hex(keyC)).Replace(l))
	}
	if got := tg.Log(); !slices.Equal(got, want) {
		t.Errorf("commands:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func hex(k uint64) string { return fmt.Sprintf("%#x", k) }

// TestReservationPreemptFails: a takeover whose preemption the device
// refuses fails the open with an error that says so, writes nothing, and
// leaves the volume to the next attempt (its ownership revoked), which
// preempts the key that still holds the reservation: not its predecessor's
// (the refused one never held it) but the one before, which LastOwnerKey
// lists among the prior leases.
func TestReservationPreemptFails(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	tg := &blockprtest.Target{Fail: func(c blockprtest.Call) error {
		if c.Req == blockpr.IOC_PR_PREEMPT_ABORT {
			return syscall.EACCES
		}
		return nil
	}}
	va, err := openHost(dir, tg, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer va.Close()
	revoke(t, va)
	_, err = openHost(dir, tg, "b")
	if !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "not writing to a device it cannot fence") {
		t.Fatalf("open with a refused preemption: %v", err)
	}
	t.Logf("open: %v", err)
	if h, _ := tg.Holder(); h != "a" || tg.Registered("b") != 0 {
		t.Errorf("holder %q, b registered %#x", h, tg.Registered("b"))
	}
	// The refused host gave the ownership back: the next one gets it.
	tg.Fail = nil
	vc, err := openHost(dir, tg, "c")
	if err != nil {
		t.Fatalf("open after the refused one: %v", err)
	}
	if r := vc.Reservation; !r.Held || r.Preempted != uint64(va.Owner.ID()) {
		t.Errorf("reservation %+v", r)
	}
	vc.Close()
}

// TestReservationUnsupportedFake: a device that refuses the registration
// as a loop device does is used without a reservation, and nothing else is
// issued, on open or close.
func TestReservationUnsupportedFake(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	tg := &blockprtest.Target{Refuse: syscall.EOPNOTSUPP}
	v, err := openHost(dir, tg, "a")
	if err != nil {
		t.Fatal(err)
	}
	if r := v.Reservation; r.Held || !strings.Contains(r.String(), "unsupported by device") {
		t.Errorf("reservation %+v", r)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(tg.Calls()); n != 1 {
		t.Errorf("%d commands, want the refused registration only: %q", n, tg.Log())
	}
}
