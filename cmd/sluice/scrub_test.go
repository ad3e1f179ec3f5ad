package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/volume"
)

// Data checksums at the command line: mkfs --data-checksums, stat, scrub
// (offline and through a mount's control socket) and fsck's data scrub.

// TestMkfsDataChecksums: mkfs --data-checksums makes a volume that stat
// shows with them; they are off by default; blocks larger than 4 KiB are
// refused before anything is made.
func TestMkfsDataChecksums(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	code, out, errOut := sluiceRun(t, "mkfs", dir, "--size", "4M", "--data-checksums")
	if code != 0 || errOut != "" || !strings.HasSuffix(out, ", data checksums\n") {
		t.Fatalf("mkfs --data-checksums: exit %d: %q %q", code, out, errOut)
	}
	code, out, _ = sluiceRun(t, "stat", dir)
	for _, w := range []string{
		"checksums    data: yes (CRC-32C of every file block, verified on every read; sluice scrub checks them all)\n",
		"atomic       writes of 4 KiB to 1 MiB, 1 segment (library and ring API; not through FUSE)\n",
	} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("stat: exit %d, lacks %q:\n%s", code, w, out)
		}
	}
	j := statJSONOf(t, dir)
	for k, v := range map[string]any{"data_checksums": true, "atomic_write_unit_min": 4096.0,
		"atomic_write_unit_max": float64(1 << 20), "atomic_write_segments_max": 1.0} {
		if j[k] != v {
			t.Errorf("stat --json: %s = %v, want %v", k, j[k], v)
		}
	}

	plain := mkfsTestVolume(t, "--block-size", "64K", "--io-unit", "4K")
	if _, out, _ := sluiceRun(t, "stat", plain); !strings.Contains(out, "checksums    data: no (sluice mkfs --data-checksums makes a volume with them)\n") ||
		!strings.Contains(out, "atomic       writes of 64 KiB to 1 MiB, 1 segment (") {
		t.Errorf("stat of a volume without checksums, 64 KiB blocks:\n%s", out)
	}
	if j := statJSONOf(t, plain); j["data_checksums"] != false || j["atomic_write_unit_min"] != 65536.0 {
		t.Errorf("stat --json without checksums: data_checksums %v, atomic_write_unit_min %v", j["data_checksums"], j["atomic_write_unit_min"])
	}

	big := filepath.Join(t.TempDir(), "big")
	code, out, errOut = sluiceRun(t, "mkfs", big, "--size", "4M", "--block-size", "8K", "--data-checksums")
	if code != 1 || out != "" {
		t.Errorf("mkfs --data-checksums --block-size 8K: exit %d, stdout %q", code, out)
	}
	wantOneLine(t, "mkfs", errOut, "--data-checksums needs a block size of at most 4 KiB, not --block-size 8K", "--block-size 4096")
	if _, err := os.Lstat(big); !os.IsNotExist(err) {
		t.Errorf("a refused mkfs made %s", big)
	}
}

// testFile is a file writeFiles writes: its path and its size in 4 KiB
// blocks of non-zero data.
type testFile struct {
	path   string
	blocks int
}

// testFiles are the files of the scrub tests: 6 blocks in 3 files, one
// empty, one in a directory.
var testFiles = []testFile{{"/a", 3}, {"/d/b", 3}, {"/empty", 0}}

// writeFiles writes files through fs (directories made as needed), syncs
// them, and returns the device byte offset of each file's blocks, by path.
func writeFiles(t *testing.T, fs *sluice.FS, files []testFile) map[string][]int64 {
	t.Helper()
	phys := map[string][]int64{}
	for _, tf := range files {
		if d := filepath.Dir(tf.path); d != "/" {
			if err := fs.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
		f, err := fs.Create(tf.path)
		if err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte(tf.path+" "), tf.blocks*4096/len(tf.path+" ")+1)[:tf.blocks*4096]
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		exts, err := f.Fiemap(0, 1<<62, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < tf.blocks; i++ {
			off := uint64(i) * 4096
			for _, x := range exts {
				if off >= x.Logical && off < x.Logical+x.Length {
					phys[tf.path] = append(phys[tf.path], int64(x.Physical+off-x.Logical))
				}
			}
		}
		if len(phys[tf.path]) != tf.blocks {
			t.Fatalf("%s: fiemap %+v does not map its %d blocks", tf.path, exts, tf.blocks)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return phys
}

// checksummedVolume makes a volume with data checksums holding testFiles
// and returns its directory and the device byte offset of each file's
// blocks.
func checksummedVolume(t *testing.T) (string, map[string][]int64) {
	t.Helper()
	dir := mkfsTestVolume(t, "--data-checksums")
	fs, err := sluice.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	phys := writeFiles(t, fs, testFiles)
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, phys
}

// scrubJSONOf runs scrub --json and decodes its report.
func scrubJSONOf(t *testing.T, wantCode int, args ...string) scrubJSON {
	t.Helper()
	code, out, errOut := sluiceRun(t, append([]string{"scrub", "--json"}, args...)...)
	if code != wantCode {
		t.Errorf("scrub --json %v: exit %d, want %d: %s", args, code, wantCode, errOut)
	}
	var j scrubJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("scrub --json %v: %v\n%s", args, err, out)
	}
	return j
}

// TestScrubOffline scrubs a volume that is not in use, clean and then with
// a corrupted block, with scrub and with fsck.
func TestScrubOffline(t *testing.T) {
	dir, phys := checksummedVolume(t)

	code, out, errOut := sluiceRun(t, "scrub", dir)
	for _, w := range []string{"volume " + dir + ": clean\n", "  scrub    offline, no rate limit\n", "  files    3\n",
		"  blocks   6 read and verified, 24576 B (24 KiB)\n", "  elapsed  "} {
		if code != 0 || errOut != "" || !strings.Contains(out, w) {
			t.Errorf("scrub: exit %d, stderr %q, stdout lacks %q:\n%s", code, errOut, w, out)
		}
	}
	if code, out, _ := sluiceRun(t, "scrub", dir, "--rate", "1M"); code != 0 || !strings.Contains(out, "  scrub    offline, at most 1 MiB/s\n") {
		t.Errorf("scrub --rate 1M: exit %d:\n%s", code, out)
	}
	j := scrubJSONOf(t, 0, dir, "--rate", "10M/s")
	if !j.Clean || j.Online || !j.DataChecksums || j.Files != 3 || j.Blocks != 6 || j.Bytes != 6*4096 || j.Damaged == nil || j.RateBytesPerSecond != 10<<20 {
		t.Errorf("scrub --json: %+v %+v", j, j.ScrubReport)
	}
	code, out, _ = sluiceRun(t, "fsck", dir)
	if code != 0 || !strings.Contains(out, "): clean\n") || !strings.Contains(out, "  data     6 blocks of 3 files verified against their checksums, 24576 B (24 KiB) in ") {
		t.Errorf("fsck: exit %d:\n%s", code, out)
	}

	// Corrupt the second block of /d/b on the device.
	off := phys["/d/b"][1]
	flipByte(t, filepath.Join(dir, "data"), off+100)
	damaged := fmt.Sprintf("/d/b offset 4096 (device block %d): its data does not match its checksum", off/4096)

	code, out, errOut = sluiceRun(t, "scrub", dir)
	if code != 1 || !strings.HasPrefix(out, "volume "+dir+": 1 damaged file\n") || !strings.Contains(out, "  damaged  "+damaged+"\n") ||
		strings.Count(out, "damaged  ") != 1 {
		t.Errorf("scrub of a corrupted volume: exit %d:\n%s", code, out)
	}
	wantOneLine(t, "scrub", errOut, "volume "+dir+" has 1 damaged file (1 block), listed on stdout")
	j = scrubJSONOf(t, 1, dir)
	if j.Clean || len(j.Damaged) != 1 || j.Damaged[0].Path != "/d/b" || len(j.Damaged[0].Blocks) != 1 {
		t.Fatalf("scrub --json of a corrupted volume: %+v", j.ScrubReport)
	}
	if b := j.Damaged[0].Blocks[0]; b.Offset != 4096 || int64(b.DeviceBlock) != off/4096 || b.Missing {
		t.Errorf("scrub --json: damaged block %+v, want offset 4096, device block %d", b, off/4096)
	}

	code, out, errOut = sluiceRun(t, "fsck", dir)
	if code != 1 || !strings.Contains(out, ": 1 problem\n") || !strings.Contains(out, "  problem  data-checksum: "+damaged+"\n") {
		t.Errorf("fsck of a corrupted volume: exit %d:\n%s", code, out)
	}
	wantOneLine(t, "fsck", errOut, "1 problem (data-checksum)")
	code, out, _ = sluiceRun(t, "fsck", dir, "--json")
	var fj struct {
		Clean    bool `json:"clean"`
		Problems []struct {
			Kind, Detail string
		} `json:"problems"`
		DataScrub *sluice.ScrubReport `json:"data_scrub"`
	}
	if err := json.Unmarshal([]byte(out), &fj); err != nil || code != 1 || fj.Clean || len(fj.Problems) != 1 ||
		fj.Problems[0].Kind != "data-checksum" || fj.Problems[0].Detail != damaged ||
		fj.DataScrub == nil || len(fj.DataScrub.Damaged) != 1 || fj.DataScrub.Damaged[0].Path != "/d/b" {
		t.Errorf("fsck --json of a corrupted volume: exit %d, %v:\n%s", code, err, out)
	}
	code, out, errOut = sluiceRun(t, "fsck", dir, "--no-data")
	if code != 0 || errOut != "" || !strings.Contains(out, "): clean\n") || !strings.Contains(out, "  data     not verified (--no-data)\n") {
		t.Errorf("fsck --no-data: exit %d, %q:\n%s", code, errOut, out)
	}
	if code, out, _ := sluiceRun(t, "fsck", dir, "--no-data", "--json"); code != 0 || strings.Contains(out, "data_scrub") {
		t.Errorf("fsck --no-data --json: exit %d:\n%s", code, out)
	}
}

// TestScrubNoChecksums: a volume without data checksums has nothing to
// verify (exit 0, said on stderr), and fsck's output is as before.
func TestScrubNoChecksums(t *testing.T) {
	dir := mkfsTestVolume(t)
	code, out, errOut := sluiceRun(t, "scrub", dir)
	if code != 0 || out != "" {
		t.Errorf("scrub: exit %d, stdout %q", code, out)
	}
	wantOneLine(t, "scrub", errOut, "volume "+dir+" has no data checksums (sluice mkfs --data-checksums): nothing to verify")
	if j := scrubJSONOf(t, 0, dir); j.DataChecksums || !j.Clean || j.Blocks != 0 {
		t.Errorf("scrub --json: %+v", j.ScrubReport)
	}
	code, out, _ = sluiceRun(t, "fsck", dir)
	if code != 0 || strings.Contains(out, "  data ") {
		t.Errorf("fsck: exit %d:\n%s", code, out)
	}
	if code, out, _ := sluiceRun(t, "fsck", dir, "--json"); code != 0 || strings.Contains(out, "data_scrub") {
		t.Errorf("fsck --json: exit %d:\n%s", code, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"scrub", dir, "--rate", "fast"}, 2, `--rate: invalid size "fast"`},
		{[]string{"scrub"}, 2, "expected one VOLUME"},
		{[]string{"scrub", filepath.Join(dir, "nope")}, 8, "does not exist"},
	} {
		code, _, errOut := sluiceRun(t, c.args...)
		if code != c.code || !strings.HasPrefix(errOut, "sluice scrub: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d (want %d), stderr %q", c.args, code, c.code, errOut)
		}
	}
}

// staleSocket leaves a unix socket at path that nothing listens on, as a
// killed mount does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
}

// TestScrubControlSocket scrubs a volume this process holds, through the
// control server a mount runs (serveControl), without FUSE: sluice scrub
// finds the volume in use and asks the socket. It checks the protocol's
// refusals, the socket's mode, and that a stale socket is replaced and the
// socket removed at Close.
func TestScrubControlSocket(t *testing.T) {
	dir := mkfsTestVolume(t, "--data-checksums")
	sock := filepath.Join(dir, "control")
	fs, err := sluice.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	phys := writeFiles(t, fs, testFiles)

	// Held without a control socket, then with a stale one: exit 8.
	code, _, errOut := sluiceRun(t, "scrub", dir)
	if code != 8 {
		t.Errorf("scrub of a volume held without a control socket: exit %d", code)
	}
	wantOneLine(t, "scrub", errOut, fmt.Sprintf("volume %s is in use by pid %d, and its control socket %s is missing", dir, os.Getpid(), sock))
	staleSocket(t, sock)
	code, _, errOut = sluiceRun(t, "scrub", dir)
	if code != 8 {
		t.Errorf("scrub of a volume held with a stale control socket: exit %d", code)
	}
	wantOneLine(t, "scrub", errOut, "nothing answers on its control socket "+sock)

	var logged bytes.Buffer
	ctl, err := serveControl(dir, fs, log.New(&logged, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, ".control-*")); len(ents) != 0 {
		t.Errorf("serveControl left %v", ents)
	}

	code, out, errOut := sluiceRun(t, "scrub", dir)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "volume "+dir+": clean\n") ||
		!strings.Contains(out, fmt.Sprintf("  scrub    online, by the mount of pid %d, at most 64 MiB/s\n", os.Getpid())) ||
		!strings.Contains(out, "  blocks   6 read and verified, ") {
		t.Errorf("online scrub: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	if j := scrubJSONOf(t, 0, dir, "--rate", "0"); !j.Online || !j.Clean || j.Files != 3 || j.RateBytesPerSecond != 0 {
		t.Errorf("online scrub --json: %+v %+v", j, j.ScrubReport)
	}
	if !strings.Contains(logged.String(), "scrub: 3 files, 6 blocks, 0 damaged files") {
		t.Errorf("the control server logged %q", logged.String())
	}

	off := phys["/a"][2]
	flipByte(t, filepath.Join(dir, "data"), off)
	code, out, errOut = sluiceRun(t, "scrub", dir)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("  damaged  /a offset 8192 (device block %d): its data does not match its checksum\n", off/4096)) {
		t.Errorf("online scrub of a corrupted volume: exit %d:\n%s", code, out)
	}
	wantOneLine(t, "scrub", errOut, "has 1 damaged file (1 block)")

	// The protocol's refusals.
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	for _, c := range []struct {
		method, url string
		status      int
	}{
		{"POST", "/scrub?rate=fast", http.StatusBadRequest},
		{"GET", "/scrub", http.StatusMethodNotAllowed},
		{"POST", "/fsck", http.StatusNotFound},
		{"POST", "/scrub?rate=1G", http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, "http://sluice"+c.url, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %s %q, want %d", c.method, c.url, resp.Status, body, c.status)
		}
	}
	client.CloseIdleConnections()

	ctl.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the control socket outlived Close: %v", err)
	}
	if code, _, errOut := sluiceRun(t, "scrub", dir); code != 8 || !strings.Contains(errOut, "is missing") {
		t.Errorf("scrub after Close: exit %d, %q", code, errOut)
	}
}

// TestScrubCancelledByClose: closing the control server ends a running
// scrub (503) instead of waiting for it.
func TestScrubCancelledByClose(t *testing.T) {
	dir := mkfsTestVolume(t, "--data-checksums")
	fs, err := sluice.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	// 1 MiB in 4 files: 4 s at 256 KiB/s (a scrub sees that it should stop
	// between files).
	writeFiles(t, fs, []testFile{{"/1", 64}, {"/2", 64}, {"/3", 64}, {"/4", 64}})
	ctl, err := serveControl(dir, fs, log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	reads := fs.Counters()["DeviceReads"]
	done := make(chan error, 1)
	go func() {
		_, err := scrubOnline(context.Background(), dir, &volume.InUseError{Dir: dir, Pid: "self"}, 256<<10)
		done <- err
	}()
	// The scrub has started once it has read from the device (it then
	// waits for the rate).
	for fs.Counters()["DeviceReads"] == reads {
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	ctl.Close()
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "the mount is ending") {
		t.Errorf("a scrub the server's Close ended: %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestScrubMounted scrubs a volume that a `sluice mount` process serves:
// sluice scrub goes through the mount's control socket (which replaced the
// stale one a killed mount left), counts a file written through the mount,
// reports a block corrupted on the device meanwhile, and the socket goes
// at unmount.
func TestScrubMounted(t *testing.T) {
	needFUSE(t)
	bin := buildSluice(t)
	vol, phys := checksummedVolume(t)
	sock := filepath.Join(vol, "control")
	staleSocket(t, sock)
	mnt := filepath.Join(t.TempDir(), "mnt")
	os.Mkdir(mnt, 0o755)
	m := startMount(t, bin, "mount", vol, mnt)
	m.waitFor("mounted "+vol, 60*time.Second)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}

	pid := fmt.Sprint(m.cmd.Process.Pid)
	code, out, errOut := sluiceRun(t, "scrub", vol)
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "volume "+vol+": clean\n") ||
		!strings.Contains(out, "  scrub    online, by the mount of pid "+pid+", at most 64 MiB/s\n") ||
		!strings.Contains(out, "  files    3\n") {
		t.Errorf("scrub of the mounted volume: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	m.waitFor("scrub: 3 files, 6 blocks, 0 damaged files", 10*time.Second) // the mount logs it
	if err := writeSync(filepath.Join(mnt, "new"), randomBlocks(5*4096), 0); err != nil {
		t.Fatal(err)
	}
	if j := scrubJSONOf(t, 0, vol, "--rate", "0"); !j.Online || !j.Clean || j.Files != 4 || j.Blocks != 11 {
		t.Errorf("scrub --json after a write through the mount: %+v %+v", j, j.ScrubReport)
	}

	off := phys["/a"][0]
	flipByte(t, filepath.Join(vol, "data"), off+4095)
	code, out, errOut = sluiceRun(t, "scrub", vol)
	if code != 1 || !strings.Contains(out, fmt.Sprintf("  damaged  /a offset 0 (device block %d): its data does not match its checksum\n", off/4096)) {
		t.Errorf("scrub of the mounted volume, corrupted: exit %d:\n%s", code, out)
	}
	wantOneLine(t, "scrub", errOut, "volume "+vol+" has 1 damaged file (1 block)")
	// Reading it through the mount fails rather than returning bad data.
	if _, err := os.ReadFile(filepath.Join(mnt, "a")); err == nil {
		t.Errorf("reading a corrupted block through the mount succeeded")
	}

	if code, _, errOut := sluiceRun(t, "umount", mnt); code != 0 {
		t.Fatalf("umount: exit %d: %s", code, errOut)
	}
	if code := m.wait(30 * time.Second); code != 0 {
		t.Errorf("the mount exited %d", code)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the control socket outlived the mount: %v", err)
	}
	if code, out, _ := sluiceRun(t, "scrub", vol); code != 1 || !strings.Contains(out, "  scrub    offline, no rate limit\n") || !strings.Contains(out, "  files    4\n") {
		t.Errorf("offline scrub after the unmount: exit %d:\n%s", code, out)
	}
}
