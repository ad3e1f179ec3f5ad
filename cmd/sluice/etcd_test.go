package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
)

// etcdCluster is started by the first test that needs it, with the limits
// sluice needs.
var etcdCluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

func TestMain(m *testing.M) {
	code := m.Run()
	etcdCluster.Close()
	os.Exit(code)
}

func etcdURL(t *testing.T, prefix string) string {
	var hosts []string
	for _, ep := range etcdCluster.Get(t).Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	return fmt.Sprintf("etcd://%s/%s", strings.Join(hosts, ","), prefix)
}

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
