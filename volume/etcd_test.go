package volume_test

// Volumes whose metadata is in etcd, on a real three-member cluster started
// in the test process (etcdtest), the engine on top. The package is
// volume_test so that it may import the engine, which imports volume.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
	"github.com/sluicefs/sluice/volume"
)

// cluster runs with the limits sluice volumes need, as the README tells
// operators to start theirs.
var cluster = etcdtest.Lazy{Options: etcdtest.Options{MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}}

func TestMain(m *testing.M) {
	code := m.Run()
	cluster.Close()
	os.Exit(code)
}

var prefixSeq atomic.Int64

// metaURL returns an etcd:// URL of the shared cluster under a prefix of
// its own.
func metaURL(t *testing.T) string {
	return cluster.Get(t).URL(fmt.Sprintf("test/%s/%d", strings.ReplaceAll(t.Name(), "/", "-"), prefixSeq.Add(1)))
}

// buffered: t.TempDir may be on a file system without O_DIRECT.
var buffered = volume.DeviceOptions{AllowBuffered: true}

// mkfsEtcd makes a volume directory with a fresh data image and its
// metadata in etcd, and returns the directory.
func mkfsEtcd(t *testing.T, eo volume.EtcdOptions) string {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "vol")
	if eo.URL == "" {
		eo.URL = metaURL(t)
	}
	err := volume.Mkfs(dir, volume.MkfsOptions{Etcd: &eo, Data: filepath.Join(tmp, "shared.img"), Size: 64 << 20, Device: buffered})
	if err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	return dir
}

func engineOpts() *sluice.Options { return &sluice.Options{Device: buffered} }

func writeFile(t *testing.T, fs *sluice.FS, path string, data []byte, flag int) {
	t.Helper()
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, fs *sluice.FS, path string, n int) []byte {
	t.Helper()
	f, err := fs.OpenFile(path, sluice.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := f.ReadAt(b, 0)
	if m != n {
		t.Fatalf("read %s: %d bytes, %v", path, m, err)
	}
	return b
}

func pattern(n int, seed byte) []byte {
	b := device.AlignedBuf(n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// fsckClean opens the volume directory read-only and requires a clean check.
func fsckClean(t *testing.T, dir string, eo *volume.EtcdOptions) *sluice.CheckReport {
	t.Helper()
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Device: buffered, Etcd: eo})
	if err != nil {
		t.Fatalf("fsck: open: %v", err)
	}
	defer v.Close()
	r, err := sluice.CheckVolume(v)
	if err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !r.Clean() {
		t.Fatalf("fsck: %v", r.Problems)
	}
	return r
}

// TestEtcdVolume: mkfs on etcd, open the engine from the volume directory
// (its pointer file), write buffered and O_DIRECT files and fsync them,
// close, reopen: they are there; fsck is clean; the directory holds only
// what is local.
func TestEtcdVolume(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{})
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"data", "etcd.json", "lock"}; !slices.Equal(names, want) {
		t.Errorf("volume directory holds %v, want %v", names, want)
	}
	fs, err := sluice.Open(dir, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	small, big := pattern(5000, 1), pattern(1<<20, 2)
	if err := fs.Mkdir("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, "/d/small", small, 0)
	writeFile(t, fs, "/big", big, sluice.O_DIRECT)
	if err := fs.Rename("/d/small", "/d/renamed", 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs, err = sluice.Open(dir, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fs, "/d/renamed", len(small)); !bytes.Equal(got, small) {
		t.Error("/d/renamed changed across the reopen")
	}
	if got := readFile(t, fs, "/big", len(big)); !bytes.Equal(got, big) {
		t.Error("/big changed across the reopen")
	}
	r, err := fs.Check()
	if err != nil || !r.Clean() {
		t.Fatalf("check: %v %v", err, r)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	r = fsckClean(t, dir, nil)
	if r.Files != 2 {
		t.Errorf("fsck counts %d files, want 2", r.Files)
	}
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true, Device: buffered})
	if err != nil {
		t.Fatal(err)
	}
	in, err := v.Stat()
	v.Close()
	if err != nil || in.MetaBackend != "etcd" || !strings.HasPrefix(in.MetaURL, "etcd://") {
		t.Errorf("stat: %+v, %v; want the etcd backend and its URL", in, err)
	}
}

// TestEtcdRefusals: bad URLs, an unreachable cluster (within the timeout),
// a prefix that holds a volume or other keys, a pointer to the wrong
// prefix, a URL that is not the volume's: each a clear error.
func TestEtcdRefusals(t *testing.T) {
	tmp := t.TempDir()
	img := filepath.Join(tmp, "img")
	mkfs := func(dir string, eo volume.EtcdOptions, force bool) error {
		return volume.Mkfs(filepath.Join(tmp, dir), volume.MkfsOptions{Etcd: &eo, Data: img, Size: 8 << 20, Device: buffered, Force: force})
	}
	for _, c := range []struct{ url, want string }{
		{"http://127.0.0.1:2379/p", "not etcd or etcds"},
		{"etcd://127.0.0.1:2379", "no key prefix"},
		{"etcd://127.0.0.1:2379/", "no key prefix"},
		{"etcd://u:pw@127.0.0.1:2379/p", "no user or password in the URL"},
		{"etcd://127.0.0.1:99999/p", "port"},
		{"etcd://a,,b/p", "empty host"},
	} {
		err := mkfs("bad", volume.EtcdOptions{URL: c.url}, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mkfs --meta %s: %v, want an error saying %q", c.url, err, c.want)
		}
		if strings.Contains(fmt.Sprint(err), "pw") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "bad")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused mkfs left its directory behind: %v", err)
	}

	// Nothing listens on a port just freed: refused within the timeout.
	start := time.Now()
	err := mkfs("unreachable", volume.EtcdOptions{URL: "etcd://127.0.0.1:1/p", DialTimeout: time.Second, RequestTimeout: time.Second}, false)
	if err == nil || !strings.Contains(err.Error(), "not reachable") || !errors.Is(err, syscall.EIO) {
		t.Errorf("mkfs on an unreachable cluster: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("mkfs on an unreachable cluster took %v", d)
	}

	url := metaURL(t)
	if err := mkfs("one", volume.EtcdOptions{URL: url}, false); err != nil {
		t.Fatal(err)
	}
	os.Remove(img + "2")
	err = volume.Mkfs(filepath.Join(tmp, "two"), volume.MkfsOptions{Etcd: &volume.EtcdOptions{URL: url}, Data: img + "2", Size: 8 << 20, Device: buffered})
	if err == nil || !strings.Contains(err.Error(), "already holds sluice volume") {
		t.Errorf("mkfs over a formatted prefix: %v", err)
	}
	// The same image again: its header is refused first.
	if err := mkfs("three", volume.EtcdOptions{URL: metaURL(t)}, false); err == nil || !strings.Contains(err.Error(), "already holds sluice volume") {
		t.Errorf("mkfs over a formatted image: %v", err)
	}

	// A URL that is not the volume's.
	_, err = volume.Open(filepath.Join(tmp, "one"), volume.OpenOptions{Device: buffered, Etcd: &volume.EtcdOptions{URL: url + "x"}})
	if err == nil || !strings.Contains(err.Error(), "not "+url+"x") {
		t.Errorf("open with another URL: %v", err)
	}
	// A pointer to an empty prefix.
	p := filepath.Join(tmp, "one", "etcd.json")
	b, _ := os.ReadFile(p)
	if err := os.WriteFile(p, bytes.Replace(b, []byte(url), []byte(url+"-empty"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = volume.Open(filepath.Join(tmp, "one"), volume.OpenOptions{Device: buffered})
	if err == nil || !strings.Contains(err.Error(), "holds no superblock") {
		t.Errorf("open of a pointer to an empty prefix: %v", err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = volume.Open(filepath.Join(tmp, "one"), volume.OpenOptions{Device: buffered}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("open with a damaged pointer: %v", err)
	}

	// --force over the formatted prefix and image makes a new volume.
	if err := mkfs("one", volume.EtcdOptions{URL: url}, true); err != nil {
		t.Fatalf("mkfs --force: %v", err)
	}
	fsckClean(t, filepath.Join(tmp, "one"), nil)
}

// fragmented writes n separate one-block extents to path (every other
// block), fsyncing every few so that no sync point converts many at once.
func fragmented(t *testing.T, fs *sluice.FS, path string, n int) {
	t.Helper()
	f, err := fs.OpenFile(path, sluice.O_RDWR|sluice.O_CREAT|sluice.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	buf := pattern(4096, 3)
	for i := range n {
		if _, err := f.WriteAt(buf, int64(2*i)*4096); err != nil {
			t.Fatal(err)
		}
		if i%8 == 7 {
			if err := f.Fsync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Fsync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdTxnTooLarge: a truncate of a fragmented file whose transaction
// exceeds the etcd limits (here the client's MaxTxnOps, lowered to 64)
// fails with EIO naming the limit, writes nothing to etcd, and shuts the
// file system down; the volume reopens with the file as it was, fsck is
// clean, and with the limits sluice needs the same truncate succeeds.
func TestEtcdTxnTooLarge(t *testing.T) {
	dir := mkfsEtcd(t, volume.EtcdOptions{MaxTxnOps: 64})
	fs, err := sluice.Open(dir, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	fragmented(t, fs, "/frag", 100)
	err = fs.Truncate("/frag", 0)
	if !errors.Is(err, syscall.EIO) || !errors.Is(err, etcdkv.ErrTxnTooLarge) || !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("truncate of a 100-extent file with MaxTxnOps 64: %v, want EIO naming --max-txn-ops", err)
	}
	t.Logf("truncate: %v", err)
	if err := fs.Mkdir("/after", 0o755); !errors.Is(err, syscall.EIO) {
		t.Errorf("a change after the failed commit: %v, want EIO (the file system shut down)", err)
	}
	fs.Close() // may report the shutdown
	fsckClean(t, dir, nil)

	full := &volume.EtcdOptions{MaxTxnOps: etcdkv.VolumeMaxTxnOps}
	v, err := volume.Open(dir, volume.OpenOptions{Device: buffered, Etcd: full})
	if err != nil {
		t.Fatal(err)
	}
	fs, err = sluice.OpenVolume(v, engineOpts())
	if err != nil {
		t.Fatal(err)
	}
	if a, err := fs.Stat("/frag"); err != nil || a.Size != 199*4096 {
		t.Fatalf("after the failed truncate: %+v, %v; want the file unchanged", a, err)
	}
	if err := fs.Truncate("/frag", 0); err != nil {
		t.Fatalf("truncate with MaxTxnOps %d: %v", etcdkv.VolumeMaxTxnOps, err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	v.Close()
	fsckClean(t, dir, nil)
}

// fenceKV is a crash's view of the metadata store: etcd keeps every commit
// that returned, and once crash is called no later commit of the dead
// process reaches it (the engine's goroutines live on in the test process).
type fenceKV struct {
	meta.KV
	mu   sync.RWMutex // held shared by a commit in flight
	dead bool         // protected by mu
}

var errCrashed = errors.New("the process crashed")

func (f *fenceKV) NewTxn() meta.Txn { return &fenceTxn{Txn: f.KV.NewTxn(), f: f} }

// crash returns once no commit is in flight; later ones fail.
func (f *fenceKV) crash() {
	f.mu.Lock()
	f.dead = true
	f.mu.Unlock()
}

type fenceTxn struct {
	meta.Txn
	f *fenceKV
}

func (t *fenceTxn) Commit(sync bool) error {
	t.f.mu.RLock()
	defer t.f.mu.RUnlock()
	if t.f.dead {
		t.Txn.Abort()
		return errCrashed
	}
	return t.Txn.Commit(sync)
}

// TestEtcdCrash: the engine's process dies at a point of a workload of
// fsynced and unsynced writes, creates, renames and unlinks (its state
// lost, the data device as a power cut leaves it, etcd keeping what it
// committed); the volume reopens, fsck is clean, and every fsynced file
// holds what was fsynced.
func TestEtcdCrash(t *testing.T) {
	cluster.Get(t)
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			_, prefix, err := etcdkv.ParseURL(metaURL(t))
			if err != nil {
				t.Fatal(err)
			}
			ko := etcdkv.Options{Endpoints: cluster.Get(t).Endpoints(), Prefix: prefix,
				MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}
			mem, err := memdev.New(32<<20, memdev.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			kv, err := etcdkv.Open(ko)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := volume.Format(mem, kv, volume.FormatOptions{}); err != nil {
				t.Fatal(err)
			}
			fence := &fenceKV{KV: kv}
			v, err := volume.Attach(mem, fence)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := sluice.OpenVolume(v, &sluice.Options{})
			if err != nil {
				t.Fatal(err)
			}
			synced := map[string][]byte{}
			for i := range 6 + int(seed) {
				name := fmt.Sprintf("/f%d", i)
				data := pattern(4096*(1+i%3)+int(seed)*512, byte(i))
				flag := 0
				if i%2 == 1 {
					flag = sluice.O_DIRECT
					data = data[:len(data)/512*512]
				}
				writeFile(t, fs, name, data, flag)
				synced[name] = data
				if i%3 == 2 {
					if err := fs.Rename(name, name+"r", 0); err != nil {
						t.Fatal(err)
					}
					delete(synced, name) // renamed, not fsynced: either name
				}
			}
			if err := fs.Unlink("/f0"); err != nil {
				t.Fatal(err)
			}
			delete(synced, "/f0")
			// Unsynced work in flight at the crash.
			f, err := fs.OpenFile("/open-unlinked", sluice.O_RDWR|sluice.O_CREAT, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(pattern(8192, 9), 0)
			f.Fsync()
			fs.Unlink("/open-unlinked") // an orphan at the crash
			g, _ := fs.OpenFile("/unsynced", sluice.O_RDWR|sluice.O_CREAT, 0o644)
			if g != nil {
				g.WriteAt(pattern(20000, 5), 0)
			}

			fence.crash()
			img := mem.CrashImage(seed)
			defer img.Close()
			fs.Close() // the dead process's goroutines; its commits are refused
			kv.Close()

			kv2, err := etcdkv.Open(ko)
			if err != nil {
				t.Fatal(err)
			}
			defer kv2.Close()
			v2, err := volume.Attach(img, kv2)
			if err != nil {
				t.Fatal(err)
			}
			if r, err := sluice.CheckVolume(v2); err != nil || !r.Clean() {
				t.Fatalf("fsck after the crash: %v %v", err, r.Problems)
			}
			fs2, err := sluice.OpenVolume(v2, &sluice.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range synced {
				if got := readFile(t, fs2, name, len(want)); !bytes.Equal(got, want) {
					t.Errorf("%s: fsynced bytes lost in the crash", name)
				}
			}
			if r, err := fs2.Check(); err != nil || !r.Clean() || len(r.Orphans) != 0 {
				t.Errorf("check after reopening: %v %+v", err, r)
			}
			if err := fs2.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
