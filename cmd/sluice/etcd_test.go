package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
	"github.com/sluicefs/sluice/volume"
)

// etcdCluster is started by the first test that needs it, with the limits
// sluice needs.
var etcdCluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

func TestMain(m *testing.M) {
	code := m.Run()
	etcdCluster.Close()
	os.Exit(code)
}

func etcdURL(t *testing.T, prefix string) string { return etcdCluster.Get(t).URL(prefix) }

// TestEtcdCLI: mkfs --meta, then stat and fsck from the pointer file alone;
// a second mkfs on the same prefix, a bad URL and an unreachable cluster
// are refused with one line each, and no password reaches the output.
func TestEtcdCLI(t *testing.T) {
	tmp := t.TempDir()
	dir, img := filepath.Join(tmp, "vol"), filepath.Join(tmp, "shared.img")
	url := etcdURL(t, "cli/vol1")
	t.Setenv("ETCDCTL_PASSWORD", "s3cret") // ignored without a user... and never shown
	code, out, errOut := sluiceRun(t, "mkfs", dir, "--meta", url, "--data", img, "--size", "32M", "--etcd-user", "")
	if code == 0 {
		t.Fatalf("mkfs with a password and no user succeeded: %s", out)
	}
	wantOneLine(t, "mkfs", errOut, "needs a user")
	t.Setenv("ETCDCTL_PASSWORD", "")
	code, out, errOut = sluiceRun(t, "mkfs", dir, "--meta", url, "--data", img, "--size", "32M")
	if code != 0 {
		t.Fatalf("mkfs --meta: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "metadata "+url) {
		t.Errorf("mkfs says %q; want it to name the metadata URL", out)
	}
	code, out, errOut = sluiceRun(t, "stat", dir)
	if code != 0 || !strings.Contains(out, "metadata     etcd "+url) {
		t.Errorf("stat: exit %d, %q %q", code, out, errOut)
	}
	js := statJSONOf(t, dir)
	if js["meta_backend"] != "etcd" || js["meta_url"] != url {
		t.Errorf("stat --json: meta_backend %v, meta_url %v", js["meta_backend"], js["meta_url"])
	}
	code, out, errOut = sluiceRun(t, "fsck", dir)
	if code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck: exit %d, %q %q", code, out, errOut)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mkfs", filepath.Join(tmp, "v2"), "--meta", url, "--data", filepath.Join(tmp, "img2"), "--size", "32M"}, "already holds sluice volume"},
		{[]string{"mkfs", filepath.Join(tmp, "v3"), "--meta", "etcd://root:s3cret@127.0.0.1/p", "--data", filepath.Join(tmp, "img3"), "--size", "32M"}, "no user or password in the URL"},
		{[]string{"mkfs", filepath.Join(tmp, "v4"), "--meta", "etcd://127.0.0.1:1/p", "--data", filepath.Join(tmp, "img4"), "--size", "32M", "--etcd-timeout", "1s"}, "not reachable within 1s"},
		{[]string{"mkfs", filepath.Join(tmp, "v5"), "--meta", url + "5"}, "--meta needs --data"},
		{[]string{"mkfs", filepath.Join(tmp, "v6"), "--meta", etcdURL(t, "cli/v6"), "--data", filepath.Join(tmp, "img6"), "--size", "32M", "--etcd-max-txn-ops", "100000"}, "--max-txn-ops=100000"},
	} {
		code, out, errOut := sluiceRun(t, c.args...)
		if code == 0 {
			t.Errorf("%v succeeded: %s", c.args, out)
			continue
		}
		if code == 2 { // a usage error: the problem and the usage line
			if !strings.Contains(errOut, c.want) {
				t.Errorf("%v: %q, want it to say %q", c.args, errOut, c.want)
			}
		} else {
			wantOneLine(t, c.args[0], errOut, c.want)
		}
		if strings.Contains(out+errOut, "s3cret") {
			t.Errorf("%v printed the password: %s %s", c.args, out, errOut)
		}
		if _, err := os.Stat(c.args[1]); !os.IsNotExist(err) {
			t.Errorf("%v left %s behind", c.args, c.args[1])
		}
	}
}

// TestEtcdOwnerCLI: stat of a volume in etcd shows each endpoint's health
// and its owner (none, then this process while it holds the volume open
// read-write, as a mount does); fsck and mkfs --force are refused while a
// host owns it, naming the host.
func TestEtcdOwnerCLI(t *testing.T) {
	tmp := t.TempDir()
	dir, img := filepath.Join(tmp, "vol"), filepath.Join(tmp, "shared.img")
	url := etcdURL(t, "cli/owner")
	if code, _, errOut := sluiceRun(t, "mkfs", dir, "--meta", url, "--data", img, "--size", "32M"); code != 0 {
		t.Fatalf("mkfs: exit %d: %s", code, errOut)
	}
	code, out, errOut := sluiceRun(t, "stat", dir)
	if code != 0 || !strings.Contains(out, "owner        none (not mounted)") || strings.Count(out, " healthy, ") != 3 || !strings.Contains(out, "healthy, leader, etcd ") {
		t.Errorf("stat: exit %d:\n%s%s", code, out, errOut)
	}

	v, err := volume.Open(dir, volume.OpenOptions{Lease: volume.LeaseOptions{TTL: 2 * time.Second, Mount: "/mnt/test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	code, out, errOut = sluiceRun(t, "stat", dir)
	held := fmt.Sprintf("pid %d on host ", os.Getpid())
	if code != 0 || !strings.Contains(out, "owner        "+held) || !strings.Contains(out, "mounted on /mnt/test") {
		t.Errorf("stat of an owned volume: exit %d:\n%s%s", code, out, errOut)
	}
	js := statJSONOf(t, dir)
	etcd, _ := js["etcd"].(map[string]any)
	owner, _ := etcd["owner"].(map[string]any)
	if eps, _ := etcd["endpoints"].([]any); len(eps) != 3 || owner["mount"] != "/mnt/test" || owner["pid"] != float64(os.Getpid()) {
		t.Errorf("stat --json: etcd %v", etcd)
	}
	code, _, errOut = sluiceRun(t, "fsck", dir)
	if code != 8 {
		t.Errorf("fsck of an owned volume: exit %d", code)
	}
	wantOneLine(t, "fsck", errOut, "is in use by "+held, "mounted on /mnt/test", "unmount it first")
	code, _, errOut = sluiceRun(t, "mkfs", filepath.Join(tmp, "v2"), "--meta", url, "--data", filepath.Join(tmp, "img2"), "--size", "32M", "--force")
	if code != 1 {
		t.Errorf("mkfs --force over an owned volume: exit %d", code)
	}
	wantOneLine(t, "mkfs", errOut, "is in use by "+held)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := sluiceRun(t, "stat", dir); code != 0 || !strings.Contains(out, "owner        none") ||
		!strings.Contains(out, "reservation  unsupported by device (an image file)") {
		t.Errorf("stat after the release: exit %d:\n%s", code, out)
	}
}
