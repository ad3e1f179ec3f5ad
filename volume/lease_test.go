package volume_test

// The ownership of volumes in etcd, with the engine on top: one host at a
// time, standbys, and the fence of a host whose lease was taken away.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/fencedev"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

// shortLease is the lease of these tests: etcdtest grants leases of 1s.
var shortLease = volume.LeaseOptions{TTL: time.Second, Margin: 200 * time.Millisecond, IOBound: 300 * time.Millisecond}

func openOwned(t *testing.T, dir string, lo volume.LeaseOptions) (*volume.Volume, *sluice.FS) {
	t.Helper()
	v, err := volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: lo})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	fs, err := sluice.OpenVolume(v, engineOpts())
	if err != nil {
		v.Close()
		t.Fatalf("engine: %v", err)
	}
	return v, fs
}

// TestEtcdOwnership: a mount owns the volume; a second read-write open is
// refused naming it, as are fsck's read-only open and a mkfs --force of
// the prefix, while stat's shared open sees the owner; a standby takes the
// volume when the owner closes it, without waiting (a clean release), and
// finds what the owner fsynced.
func TestEtcdOwnership(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	lo := shortLease
	lo.Mount = "/mnt/a"
	va, fsa := openOwned(t, dir, lo)
	if va.Owner == nil || va.Fence == nil || va.Dev != va.Fence {
		t.Fatalf("owned volume: owner %v, fence %v", va.Owner, va.Fence)
	}
	if !va.Owner.Clean() || !va.Fence.NotBefore().Before(time.Now()) {
		t.Errorf("the first owner after mkfs waits (clean %v, not before %v)", va.Owner.Clean(), va.Fence.NotBefore())
	}
	data := pattern(3*4096+100, 7)
	writeFile(t, fsa, "/a", data, 0)

	_, err := volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: shortLease})
	want := "mounted on /mnt/a"
	if !errors.Is(err, volume.ErrInUse) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pid ") {
		t.Errorf("second read-write open: %v, want ErrInUse naming the holder (%q)", err, want)
	}
	if _, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Device: buffered}); !errors.Is(err, volume.ErrInUse) {
		t.Errorf("read-only open of an owned volume: %v, want ErrInUse", err)
	}
	vs, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Shared: true, Device: buffered})
	if err != nil {
		t.Fatalf("shared read-only open: %v", err)
	}
	st, err := vs.EtcdStatus()
	vs.Close()
	if err != nil || st.Owner == nil || st.Owner.Mount != "/mnt/a" || len(st.Endpoints) != 3 {
		t.Errorf("etcd status: %+v, %v", st, err)
	}
	for _, ep := range st.Endpoints {
		if !ep.Healthy {
			t.Errorf("endpoint %+v", ep)
		}
	}
	ptr, _ := os.ReadFile(filepath.Join(dir, "etcd.json"))
	url := strings.Split(strings.Split(string(ptr), `"url": "`)[1], `"`)[0]
	tmp := t.TempDir()
	err = volume.Mkfs(filepath.Join(tmp, "v"), volume.MkfsOptions{Etcd: &volume.EtcdOptions{URL: url}, Data: filepath.Join(tmp, "img"),
		Size: 8 << 20, Device: buffered, Force: true})
	if !errors.Is(err, volume.ErrInUse) || !strings.Contains(err.Error(), want) {
		t.Errorf("mkfs --force over an owned volume: %v", err)
	}

	got := make(chan error, 1)
	waiting := make(chan etcdkv.Holder, 1)
	var vb *volume.Volume
	go func() {
		lo := shortLease
		lo.Standby, lo.Mount = true, "/mnt/b"
		lo.OnWait = func(h etcdkv.Holder) { waiting <- h }
		var err error
		vb, err = volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: lo})
		got <- err
	}()
	if h := <-waiting; h.Mount != "/mnt/a" {
		t.Errorf("the standby waits for %+v", h)
	}
	if err := fsa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := va.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("standby: %v", err)
	}
	defer vb.Close()
	if !vb.Owner.Clean() || time.Now().Before(vb.Fence.NotBefore()) {
		t.Errorf("after a clean release the standby waits until %v", vb.Fence.NotBefore())
	}
	fsb, err := sluice.OpenVolume(vb, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	if b := readFile(t, fsb, "/a", len(data)); !bytes.Equal(b, data) {
		t.Error("the standby reads other bytes than the owner fsynced")
	}
	if err := fsb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdTakeoverFence: the owner's lease is revoked behind its back (as
// an operator forcing a takeover, or its expiry while the host is frozen);
// the standby takes the volume, holds its data requests until TTL + margin
// + I/O bound after the takeover while its metadata operations proceed,
// and serves. The old owner finds out: its commits fail with ErrNotOwner
// (and EIO) writing nothing, its data requests fail with ErrFenced, and
// none of its late data reaches the device. fsck is clean.
func TestEtcdTakeoverFence(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	va, fsa := openOwned(t, dir, shortLease)
	defer va.Close()
	first := pattern(8192, 1)
	writeFile(t, fsa, "/first", first, 0)

	got := make(chan error, 1)
	waiting := make(chan etcdkv.Holder, 1)
	var vb *volume.Volume
	go func() {
		lo := shortLease
		lo.Standby = true
		lo.OnWait = func(h etcdkv.Holder) { waiting <- h }
		var err error
		vb, err = volume.Open(dir, volume.OpenOptions{Device: buffered, Lease: lo})
		got <- err
	}()
	<-waiting
	c, err := clientv3.New(clientv3.Config{Endpoints: cluster.Get(t).Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Revoke(context.Background(), clientv3.LeaseID(va.Owner.ID())); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if err := <-got; err != nil {
		t.Fatalf("standby: %v", err)
	}
	defer vb.Close()
	if vb.Owner.Clean() {
		t.Fatal("a takeover after a revoke is clean")
	}
	notBefore := vb.Fence.NotBefore()
	if wait := notBefore.Sub(vb.Owner.Acquired()); wait != vb.Owner.TTL()+shortLease.Margin+shortLease.IOBound {
		t.Errorf("the takeover waits %v", wait)
	}
	fsb, err := sluice.OpenVolume(vb, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	// Metadata at once; the data waits for the fence's window.
	if err := fsb.Mkdir("/b", 0o755); err != nil {
		t.Fatal(err)
	}
	if time.Now().After(notBefore) {
		t.Logf("slow machine: the standby's first metadata change came after its wait")
	}
	second := pattern(8192, 2)
	writeFile(t, fsb, "/b/second", second, sluice.O_DIRECT)
	served := time.Now()
	if served.Before(notBefore) {
		t.Errorf("the standby's fsync returned %v before its fence opened", notBefore.Sub(served))
	}
	t.Logf("revoke -> standby's first fsynced write: %v (takeover wait %v)", served.Sub(revoked).Round(time.Millisecond), notBefore.Sub(vb.Owner.Acquired()))
	if b := readFile(t, fsb, "/first", len(first)); !bytes.Equal(b, first) {
		t.Error("the standby lost the owner's fsynced bytes")
	}

	// The old owner, late.
	select {
	case <-va.Owner.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the old owner never noticed it lost the lease")
	}
	if !errors.Is(va.Owner.Err(), etcdkv.ErrNotOwner) {
		t.Errorf("the old owner lost the lease with %v", va.Owner.Err())
	}
	late := device.AlignedBuf(8192)
	rand.Read(late)
	f, err := fsa.OpenFile("/first", sluice.O_RDWR|sluice.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(late, 0); !errors.Is(err, syscall.EIO) || !errors.Is(err, fencedev.ErrFenced) {
		t.Errorf("the old owner's O_DIRECT overwrite: %v, want EIO and ErrFenced", err)
	}
	f.Close()
	if err := fsa.Mkdir("/late-dir", 0o755); !errors.Is(err, syscall.EIO) || !errors.Is(err, etcdkv.ErrNotOwner) {
		t.Errorf("the old owner's mkdir: %v, want EIO and ErrNotOwner", err)
	}
	if s := va.Fence.Stats(); s.Fenced == 0 || !va.Fence.Fenced() {
		t.Errorf("old owner's fence: %+v", s)
	}
	fsa.Close()

	img, err := os.ReadFile(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(img, late[:4096]) {
		t.Error("the old owner's late write reached the device")
	}
	if err := fsb.Close(); err != nil {
		t.Fatal(err)
	}
	vb.Close()
	r := fsckClean(t, dir, nil)
	if r.Files != 2 {
		t.Errorf("fsck counts %d files, want 2", r.Files)
	}
}
