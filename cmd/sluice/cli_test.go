package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// The volumes live under t.TempDir(), on the real disk: the data device is
// opened with O_DIRECT, which tmpfs refuses.
//
// Exit statuses are asserted as literals, not through the constants, since
// scripts depend on them: 0 success; 1 a refusal, or fsck found problems;
// 2 a command-line mistake; 8 fsck could not check the volume.

// sluiceRun runs the command line in-process and returns its exit status
// and output.
func sluiceRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// mkfsTestVolume makes a volume with mkfs (4 MiB unless extra says otherwise)
// and returns its directory.
func mkfsTestVolume(t *testing.T, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vol")
	args := append([]string{"mkfs", dir, "--size", "4M"}, extra...)
	if code, out, errOut := sluiceRun(t, args...); code != 0 {
		t.Fatalf("sluice %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return dir
}

// wantOneLine checks that stderr is exactly one line that starts with
// "sluice CMD: " and contains every want.
func wantOneLine(t *testing.T, cmd, stderr string, wants ...string) {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Errorf("stderr is not one line: %q", stderr)
	}
	if !strings.HasPrefix(stderr, "sluice "+cmd+": ") {
		t.Errorf("stderr does not start with %q: %q", "sluice "+cmd+": ", stderr)
	}
	for _, w := range wants {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not mention %q: %q", w, stderr)
		}
	}
}

func statJSONOf(t *testing.T, dir string) map[string]any {
	t.Helper()
	code, out, errOut := sluiceRun(t, "stat", dir, "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("stat --json: exit %d, stderr %q", code, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("stat --json: %v\n%s", err, out)
	}
	return m
}

var uuidRE = regexp.MustCompile(`uuid ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})`)

func TestMkfsStatRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	// Flags after the positional argument, units in the flag values.
	code, out, errOut := sluiceRun(t, "mkfs", dir, "--size", "8M", "--block-size", "4K", "--io-unit", "512")
	if code != 0 || errOut != "" {
		t.Fatalf("mkfs: exit %d, stderr %q", code, errOut)
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("mkfs printed %q, want one line", out)
	}
	m := uuidRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("mkfs output has no uuid: %q", out)
	}
	uuid := m[1]
	for _, w := range []string{"created volume " + dir, "8388608 B (8 MiB)", "block size 4096 B", "I/O unit 512 B",
		"data " + filepath.Join(dir, "data") + " (sparse image file", "O_DIRECT"} {
		if !strings.Contains(out, w) {
			t.Errorf("mkfs output lacks %q: %q", w, out)
		}
	}

	code, out, errOut = sluiceRun(t, "stat", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("stat: exit %d, stderr %q", code, errOut)
	}
	for _, w := range []string{
		"volume       " + dir + "\n",
		"uuid         " + uuid + "\n",
		"format       1\n",
		"block size   4096 B (4 KiB)\n",
		"I/O unit     512 B\n",
		"device       " + filepath.Join(dir, "data") + ", 8388608 B (8 MiB), sparse image file",
		"checksums    data: no (sluice mkfs --data-checksums makes a volume with them)\n",
		"atomic       writes of 4 KiB to 1 MiB, 1 segment (library and ring API; not through FUSE)\n",
		"blocks       2048 total: header in [0, 1), data in [1, 2048)\n",
		"data         2047 blocks, 8384512 B (8.0 MiB)\n",
		"used         0 blocks, 0 B (0.0%)\n",
		"free         2047 blocks, 8384512 B (8.0 MiB) in 1 extent\n",
		"inodes       1\n",
		"orphans      0\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("stat output lacks %q:\n%s", w, out)
		}
	}

	j := statJSONOf(t, dir)
	want := map[string]any{
		"dir": dir, "uuid": uuid, "format": 1.0, "block_size": 4096.0, "io_unit": 512.0,
		"device_bytes": 8388608.0, "data_start_block": 1.0, "total_blocks": 2048.0,
		"data_blocks": 2047.0, "free_blocks": 2047.0, "used_blocks": 0.0, "free_extents": 1.0,
		"inodes": 1.0, "orphans": 0.0, "direct_io": true, "used": "0.0%",
		"data_path": filepath.Join(dir, "data"), "data_bytes": 2047 * 4096.0, "used_bytes": 0.0,
		"free_bytes": 2047 * 4096.0, "data_checksums": false, "atomic_write_unit_min": 4096.0,
		"atomic_write_unit_max": float64(1 << 20), "atomic_write_segments_max": 1.0,
	}
	for k, v := range want {
		if j[k] != v {
			t.Errorf("stat --json: %s = %v, want %v", k, j[k], v)
		}
	}
	if b := j["data_backend"]; b != "uring" && b != "pread" {
		t.Errorf("stat --json: data_backend = %v", b)
	}
}

func TestMkfsGeometry(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		blockSize, ioUnit  float64
		dataStart, devSize float64
	}{
		{[]string{"--size", "1M"}, 4096, 512, 1, 1 << 20},
		{[]string{"--size", "2M", "--block-size", "512"}, 512, 512, 1, 2 << 20},
		{[]string{"--size", "4M", "--block-size", "64K", "--io-unit", "4K"}, 65536, 4096, 1, 4 << 20},
		{[]string{"--size", "4M", "--block-size", "16384", "--io-unit", "16K"}, 16384, 16384, 1, 4 << 20},
		{[]string{"--size", "4MiB", "--block-size", "8KiB", "--io-unit", "4KB"}, 8192, 4096, 1, 4 << 20},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := mkfsTestVolume(t, tc.args...)
			j := statJSONOf(t, dir)
			for k, v := range map[string]float64{"block_size": tc.blockSize, "io_unit": tc.ioUnit,
				"data_start_block": tc.dataStart, "device_bytes": tc.devSize} {
				if j[k] != v {
					t.Errorf("%s = %v, want %v", k, j[k], v)
				}
			}
			if code, _, errOut := sluiceRun(t, "fsck", dir); code != 0 {
				t.Errorf("fsck: exit %d: %s", code, errOut)
			}
		})
	}
}

func TestMkfsPrealloc(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	code, out, errOut := sluiceRun(t, "mkfs", "--prealloc", dir, "--size", "4M")
	if code != 0 {
		t.Fatalf("mkfs --prealloc: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "(preallocated image file)") {
		t.Errorf("mkfs --prealloc output: %q", out)
	}
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Blocks*512 < 4<<20 {
		t.Errorf("prealloc: %d bytes allocated, want the whole 4 MiB", st.Blocks*512)
	}
}

func TestFsckClean(t *testing.T) {
	dir := mkfsTestVolume(t)
	code, out, errOut := sluiceRun(t, "fsck", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("fsck: exit %d, stderr %q", code, errOut)
	}
	for _, w := range []string{"volume " + dir + " (uuid ", "): clean\n", "inodes   1 (1 directory, 0 files), 0 extents",
		"blocks   1023 data: 0 used, 1023 free", "orphans  none"} {
		if !strings.Contains(out, w) {
			t.Errorf("fsck output lacks %q:\n%s", w, out)
		}
	}
	code, out, errOut = sluiceRun(t, "fsck", "--json", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("fsck --json: exit %d, stderr %q", code, errOut)
	}
	var r struct {
		Volume   string            `json:"volume"`
		Clean    bool              `json:"clean"`
		Problems []json.RawMessage `json:"problems"`
		Orphans  []uint64          `json:"orphans"`
		Inodes   int               `json:"inodes"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Clean || r.Volume != dir || r.Inodes != 1 || r.Problems == nil || len(r.Problems) != 0 || r.Orphans == nil {
		t.Errorf("fsck --json: %+v\n%s", r, out)
	}
}

func TestMkfsRefusals(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string // after "mkfs VOLUME"
		code  int
		wants []string
	}{
		{"size below minimum", []string{"--size", "512K"}, 1, []string{"--size 512K is smaller than the minimum", "1 MiB", "--size 1M"}},
		{"size not multiple of block", []string{"--size", "1048577"}, 1, []string{"not a multiple of the 4096 B block size", "--size 1052672"}},
		{"size not multiple of 64K block", []string{"--block-size", "64K", "--size", "1040K"}, 1, []string{"--size 1040K (1064960 B) is not a multiple of the 65536 B block size", "--size 1114112"}},
		{"block size not power of two", []string{"--size", "4M", "--block-size", "3000"}, 1, []string{"--block-size 3000", "power of two between 512 B and 64 KiB"}},
		{"block size too small", []string{"--size", "4M", "--block-size", "256"}, 1, []string{"--block-size 256", "power of two between 512 B and 64 KiB"}},
		{"block size too large", []string{"--size", "4M", "--block-size", "128K"}, 1, []string{"--block-size 128K", "power of two between 512 B and 64 KiB"}},
		{"io unit larger than block", []string{"--size", "4M", "--io-unit", "8K"}, 1, []string{"--io-unit 8K is larger than the 4096 B block size", "--block-size 8192"}},
		{"io unit not power of two", []string{"--size", "4M", "--io-unit", "1000"}, 1, []string{"--io-unit 1000", "power of two"}},
		{"data not a block device", []string{"--data", notDir}, 1, []string{"--data " + notDir + " is not a block device"}},
		{"data missing", []string{"--data", notDir + ".missing"}, 1, []string{"--data " + notDir + ".missing: no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			code, out, errOut := sluiceRun(t, append([]string{"mkfs", dir}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, errOut)
			}
			if out != "" {
				t.Errorf("stdout: %q", out)
			}
			wantOneLine(t, "mkfs", errOut, tc.wants...)
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("a refused mkfs left %s behind (%v)", dir, err)
			}
		})
	}

	// Command-line syntax errors print the usage line too, and exit 2.
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no size", []string{"mkfs", "VOL"}, "--size is required"},
		{"bad size", []string{"mkfs", "VOL", "--size", "12X"}, `--size: invalid size "12X"`},
		{"bad block size", []string{"mkfs", "VOL", "--size", "4M", "--block-size", "big"}, `--block-size: invalid size "big"`},
		{"no volume", []string{"mkfs", "--size", "4M"}, "expected one VOLUME"},
		{"two volumes", []string{"mkfs", "VOL", "VOL2", "--size", "4M"}, "expected one VOLUME"},
		{"unknown flag", []string{"mkfs", "VOL", "--size", "4M", "--sise", "4M"}, "unknown flag: --sise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "vol")
			for i, a := range tc.args {
				tc.args[i] = strings.ReplaceAll(a, "VOL", dir)
			}
			code, _, errOut := sluiceRun(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errOut)
			}
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "sluice mkfs: ") || !strings.Contains(lines[0], tc.want) ||
				!strings.HasPrefix(lines[1], "usage: sluice mkfs VOLUME --size SIZE") {
				t.Errorf("stderr: %q, want the problem (%q) and the usage line", errOut, tc.want)
			}
			if _, err := os.Lstat(dir); !os.IsNotExist(err) {
				t.Errorf("a refused mkfs left %s behind", dir)
			}
		})
	}

	t.Run("path is a file", func(t *testing.T) {
		code, _, errOut := sluiceRun(t, "mkfs", notDir, "--size", "4M")
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		wantOneLine(t, "mkfs", errOut, notDir+" exists and is not a directory")
	})
}

func TestMkfsExistingVolume(t *testing.T) {
	dir := mkfsTestVolume(t)
	uuid := statJSONOf(t, dir)["uuid"]

	code, out, errOut := sluiceRun(t, "mkfs", dir, "--size", "4M")
	if code != 1 || out != "" {
		t.Errorf("mkfs over a volume: exit %d, stdout %q", code, out)
	}
	wantOneLine(t, "mkfs", errOut, dir+" exists and is not empty", "--force")
	if got := statJSONOf(t, dir)["uuid"]; got != uuid {
		t.Fatalf("a refused mkfs changed the volume: uuid %v -> %v", uuid, got)
	}

	// A non-empty directory that is not a volume is refused the same way.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = sluiceRun(t, "mkfs", other, "--size", "4M")
	if code != 1 {
		t.Errorf("mkfs over a non-empty directory: exit %d", code)
	}
	wantOneLine(t, "mkfs", errOut, "exists and is not empty", "--force")
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Errorf("a refused mkfs touched the directory: %v", err)
	}

	code, out, errOut = sluiceRun(t, "mkfs", dir, "--size", "8M", "--force")
	if code != 0 {
		t.Fatalf("mkfs --force: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "created volume "+dir+": uuid ") {
		t.Errorf("mkfs --force printed %q", out)
	}
	j := statJSONOf(t, dir)
	if j["uuid"] == uuid || j["device_bytes"] != float64(8<<20) {
		t.Errorf("mkfs --force did not remake the volume: %v", j)
	}
	if code, _, errOut := sluiceRun(t, "fsck", dir); code != 0 {
		t.Errorf("fsck after mkfs --force: exit %d: %s", code, errOut)
	}
}

// flipByte inverts one byte of a file.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusals damages volumes by editing their files, and checks that
// stat and fsck refuse them with one line naming the problem.
func TestOpenRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) // nil: dir does not exist
		wants  []string                       // "DIR" stands for the volume
	}{
		{"nonexistent volume", nil, []string{"volume DIR does not exist", "sluice mkfs DIR --size"}},
		{"empty directory", func(t *testing.T, dir string) {
			os.RemoveAll(dir)
			os.Mkdir(dir, 0o755)
		}, []string{"DIR is not a sluice volume", "data"}},
		{"bad magic", func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, "data"), 0)
		}, []string{"volume DIR: bad volume header: no sluice magic", "restore DIR/data from a backup", "sluice mkfs DIR --size SIZE --force"}},
		{"bad checksum", func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, "data"), 20) // inside the UUID
		}, []string{"volume DIR: bad volume header: checksum mismatch", "restore DIR/data from a backup"}},
		{"bad checksum field", func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, "data"), 62)
		}, []string{"bad volume header: checksum mismatch"}},
		{"data of another volume", func(t *testing.T, dir string) {
			other := mkfsTestVolume(t)
			if err := os.Rename(filepath.Join(other, "data"), filepath.Join(dir, "data")); err != nil {
				t.Fatal(err)
			}
		}, []string{"volume DIR: the data device (volume ", ") does not belong to this metadata (volume "}},
		{"truncated image", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "data"), 1<<20); err != nil {
				t.Fatal(err)
			}
		}, []string{"volume DIR: the data image is 1048576 bytes but the header says 4194304: truncated image"}},
		{"image truncated to nothing", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "data"), 0); err != nil {
				t.Fatal(err)
			}
		}, []string{"volume DIR: reading the header: EOF (truncated image?)"}},
		{"data missing", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "data"))
		}, []string{"DIR is not a sluice volume: its data device", "no such file or directory"}},
		{"meta missing", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "meta")); err != nil {
				t.Fatal(err)
			}
		}, []string{"volume DIR: the metadata directory meta/ is missing"}},
		{"meta empty", func(t *testing.T, dir string) {
			os.RemoveAll(filepath.Join(dir, "meta"))
			os.Mkdir(filepath.Join(dir, "meta"), 0o755)
		}, []string{"volume DIR: metadata database DIR/meta does not exist"}},
		{"volume is a file", func(t *testing.T, dir string) {
			os.RemoveAll(dir)
			os.WriteFile(dir, nil, 0o644)
		}, []string{"DIR is not a volume directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.damage == nil {
				dir = filepath.Join(t.TempDir(), "nonexistent")
			} else {
				dir = mkfsTestVolume(t)
				tc.damage(t, dir)
			}
			wants := make([]string, len(tc.wants))
			for i, w := range tc.wants {
				wants[i] = strings.ReplaceAll(w, "DIR", dir)
			}
			for _, c := range []struct {
				args []string
				code int
			}{
				{[]string{"stat", dir}, 1},
				{[]string{"stat", dir, "--json"}, 1},
				{[]string{"fsck", dir}, 8},
				{[]string{"fsck", "--json", dir}, 8},
			} {
				code, out, errOut := sluiceRun(t, c.args...)
				if code != c.code {
					t.Errorf("%v: exit %d, want %d", c.args, code, c.code)
				}
				if out != "" {
					t.Errorf("%v: stdout %q", c.args, out)
				}
				wantOneLine(t, c.args[0], errOut, wants...)
			}
		})
	}
}

func TestInUse(t *testing.T) {
	dir := mkfsTestVolume(t)
	v, err := volume.Open(dir, volume.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("volume %s is in use by pid %d; unmount it or stop that process first", dir, os.Getpid())
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"stat", dir}, 1},
		{[]string{"fsck", dir}, 8},
		{[]string{"mkfs", dir, "--size", "4M", "--force"}, 1},
	} {
		code, out, errOut := sluiceRun(t, c.args...)
		if code != c.code || out != "" {
			t.Errorf("%v: exit %d (want %d), stdout %q", c.args, code, c.code, out)
		}
		wantOneLine(t, c.args[0], errOut, want)
		if strings.Contains(errOut, "volume in use") {
			t.Errorf("%v: the sentinel's text is repeated: %q", c.args, errOut)
		}
	}
	uuid := volume.UUIDString(v.Header.UUID)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	// The refused mkfs --force did not touch the volume, and it opens again.
	if got := statJSONOf(t, dir)["uuid"]; got != uuid {
		t.Errorf("uuid %v after a refused mkfs --force, want %v", got, uuid)
	}
}

// editMeta opens the volume's Pebble database directly and applies edit in
// one transaction, as a bug or a bad disk might.
func editMeta(t *testing.T, dir string, edit func(tx meta.Txn, sb *meta.Superblock)) {
	t.Helper()
	kv, err := meta.OpenPebble(filepath.Join(dir, "meta"), meta.PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	v, err := kv.Get(meta.SuperKey())
	if err != nil {
		t.Fatal(err)
	}
	sb, err := meta.DecodeSuperblock(v)
	if err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	edit(tx, sb)
	if err := tx.Commit(true); err != nil {
		t.Fatal(err)
	}
}

const sIFREG = 0o100000

// addFile adds a regular file ino named name in the root, with size bytes
// and nlink links (but only one entry), and bumps the superblock's NextIno.
func addFile(tx meta.Txn, sb *meta.Superblock, ino meta.Ino, name string, size uint64, nlink uint32) {
	tx.Set(meta.InodeKey(ino), meta.EncodeInode(&meta.Inode{Ino: ino, Mode: sIFREG | 0o644, Nlink: nlink, Size: size, Gen: 1}))
	tx.Set(meta.DirentKey(meta.RootIno, name), meta.EncodeDirent(meta.Dirent{Ino: ino, Type: sIFREG}))
	if sb.NextIno <= ino {
		sb.NextIno = ino + 1
		tx.Set(meta.SuperKey(), meta.EncodeSuperblock(sb))
	}
}

// testVolDataBlocks is the number of data blocks of a default 4 MiB volume.
const testVolDataBlocks = 4<<20/4096 - 1

func TestFsckProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(tx meta.Txn, sb *meta.Superblock)
		kinds []string // every kind reported, in order
	}{
		{"extent overlapping free space", func(tx meta.Txn, sb *meta.Superblock) {
			addFile(tx, sb, 2, "f", 4096, 1)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart, Len: 1, State: meta.Written}))
		}, []string{"extent-in-free-space"}},
		{"two files share blocks", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Delete(meta.FreeKey(sb.DataStart))
			tx.Set(meta.FreeKey(sb.DataStart+2), meta.EncodeFree(testVolDataBlocks-2))
			addFile(tx, sb, 2, "a", 2*4096, 1)
			addFile(tx, sb, 3, "b", 4096, 1)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart, Len: 2, State: meta.Written}))
			tx.Set(meta.ExtentKey(3, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart + 1, Len: 1, State: meta.Written}))
		}, []string{"overlapping-extents"}},
		{"shared blocks counted wrong", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Delete(meta.FreeKey(sb.DataStart))
			tx.Set(meta.FreeKey(sb.DataStart+2), meta.EncodeFree(testVolDataBlocks-2))
			addFile(tx, sb, 2, "a", 2*4096, 1)
			addFile(tx, sb, 3, "b", 4096, 1)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart, Len: 2, State: meta.Written}))
			tx.Set(meta.ExtentKey(3, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart + 1, Len: 1, State: meta.Written}))
			tx.Set(meta.SharedKey(sb.DataStart), meta.EncodeShared(2, 3))
		}, []string{"wrong-refcount"}},
		{"staging block mapped by a file", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Delete(meta.FreeKey(sb.DataStart))
			tx.Set(meta.FreeKey(sb.DataStart+1), meta.EncodeFree(testVolDataBlocks-1))
			addFile(tx, sb, 2, "a", 4096, 1)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart, Len: 1, State: meta.Written}))
			tx.Set(meta.StagedKey(sb.DataStart), meta.EncodeStaged(1))
		}, []string{"staged-in-use"}},
		{"entry to a missing inode", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Set(meta.DirentKey(meta.RootIno, "ghost"), meta.EncodeDirent(meta.Dirent{Ino: 99, Type: sIFREG}))
		}, []string{"dangling-entry"}},
		{"wrong nlink", func(tx meta.Txn, sb *meta.Superblock) {
			addFile(tx, sb, 2, "f", 0, 3)
		}, []string{"wrong-link-count"}},
		{"leaked blocks", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Delete(meta.FreeKey(sb.DataStart))
			tx.Set(meta.FreeKey(sb.DataStart+10), meta.EncodeFree(testVolDataBlocks-10))
		}, []string{"leaked-blocks"}},
		{"free extent record deleted", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Delete(meta.FreeKey(sb.DataStart))
		}, []string{"leaked-blocks"}},
		{"corrupt inode record", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Set(meta.InodeKey(7), []byte("not an inode"))
		}, []string{"corrupt-record"}},
		{"extent out of range", func(tx meta.Txn, sb *meta.Superblock) {
			addFile(tx, sb, 2, "f", 4096, 1)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: 5000, Len: 1, State: meta.Written}))
		}, []string{"extent-out-of-range"}},
		{"next inode too low", func(tx meta.Txn, sb *meta.Superblock) {
			tx.Set(meta.InodeKey(5), meta.EncodeInode(&meta.Inode{Ino: 5, Mode: sIFREG | 0o644, Nlink: 1}))
			tx.Set(meta.DirentKey(meta.RootIno, "f"), meta.EncodeDirent(meta.Dirent{Ino: 5, Type: sIFREG}))
		}, []string{"bad-superblock"}},
		{"several at once", func(tx meta.Txn, sb *meta.Superblock) {
			addFile(tx, sb, 2, "f", 4096, 2)
			tx.Set(meta.ExtentKey(2, 0), meta.EncodeExtent(meta.Extent{DevBlock: sb.DataStart + 3, Len: 1, State: meta.Written}))
			tx.Set(meta.DirentKey(meta.RootIno, "ghost"), meta.EncodeDirent(meta.Dirent{Ino: 99, Type: sIFREG}))
		}, []string{"dangling-entry", "wrong-link-count", "extent-in-free-space"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := mkfsTestVolume(t)
			editMeta(t, dir, tc.edit)

			code, out, errOut := sluiceRun(t, "fsck", dir)
			if code != 1 {
				t.Errorf("fsck: exit %d, want 1\n%s%s", code, out, errOut)
			}
			wantOneLine(t, "fsck", errOut, "volume "+dir+" has ", strings.Join(tc.kinds, ", "), "listed on stdout")
			if !strings.Contains(out, "volume "+dir+" (uuid ") {
				t.Errorf("fsck output lacks the summary:\n%s", out)
			}
			var got []string
			for _, line := range strings.Split(out, "\n") {
				if k, ok := strings.CutPrefix(line, "  problem  "); ok {
					got = append(got, k[:strings.Index(k, ":")])
				}
			}
			if !equalKinds(got, tc.kinds) {
				t.Errorf("fsck listed %v, want %v\n%s", got, tc.kinds, out)
			}

			code, out, errOut = sluiceRun(t, "fsck", dir, "--json")
			if code != 1 {
				t.Errorf("fsck --json: exit %d, want 1", code)
			}
			wantOneLine(t, "fsck", errOut, strings.Join(tc.kinds, ", "))
			var r struct {
				Clean    bool `json:"clean"`
				Problems []struct {
					Kind   string `json:"kind"`
					Detail string `json:"detail"`
				} `json:"problems"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("fsck --json: %v\n%s", err, out)
			}
			got = got[:0]
			for _, p := range r.Problems {
				got = append(got, p.Kind)
				if p.Detail == "" {
					t.Errorf("problem %s has no detail", p.Kind)
				}
			}
			if r.Clean || !equalKinds(got, tc.kinds) {
				t.Errorf("fsck --json: clean %v, kinds %v, want %v", r.Clean, got, tc.kinds)
			}
		})
	}
}

// equalKinds compares the distinct kinds of got, in order, with want.
func equalKinds(got, want []string) bool {
	var distinct []string
	for _, k := range got {
		if !slices.Contains(distinct, k) {
			distinct = append(distinct, k)
		}
	}
	return strings.Join(distinct, ",") == strings.Join(want, ",")
}

// TestFsckOrphans: an inode unlinked while open is an orphan, listed but
// not a problem.
func TestFsckOrphans(t *testing.T) {
	dir := mkfsTestVolume(t)
	editMeta(t, dir, func(tx meta.Txn, sb *meta.Superblock) {
		for _, ino := range []meta.Ino{4, 6} {
			tx.Set(meta.InodeKey(ino), meta.EncodeInode(&meta.Inode{Ino: ino, Mode: sIFREG | 0o600, Nlink: 0}))
			tx.Set(meta.OrphanKey(ino), nil)
		}
		sb.NextIno = 7
		tx.Set(meta.SuperKey(), meta.EncodeSuperblock(sb))
	})
	code, out, errOut := sluiceRun(t, "fsck", dir)
	if code != 0 || errOut != "" {
		t.Fatalf("fsck: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "): clean\n") || !strings.Contains(out, "  orphans  4 6 (unlinked while open") {
		t.Errorf("fsck output:\n%s", out)
	}
	code, out, _ = sluiceRun(t, "fsck", dir, "--json")
	var r struct {
		Clean   bool     `json:"clean"`
		Orphans []uint64 `json:"orphans"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("fsck --json: exit %d, %v", code, err)
	}
	if !r.Clean || fmt.Sprint(r.Orphans) != "[4 6]" {
		t.Errorf("fsck --json: %+v", r)
	}
	if j := statJSONOf(t, dir); j["orphans"] != 2.0 || j["inodes"] != 3.0 {
		t.Errorf("stat: orphans %v, inodes %v", j["orphans"], j["inodes"])
	}
}

func TestStatFsckUsage(t *testing.T) {
	for _, args := range [][]string{{"stat"}, {"fsck"}, {"stat", "a", "b"}, {"fsck", "--verbose", "a"}} {
		code, out, errOut := sluiceRun(t, args...)
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 || !strings.HasPrefix(lines[1], "usage: sluice "+args[0]+" VOLUME [--json]") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// TestMkfsBlockDevice formats a loop device, when the test may make one.
func TestMkfsBlockDevice(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root to attach a loop device")
	}
	losetup, err := exec.LookPath("losetup")
	if err != nil {
		t.Skip("no losetup")
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(losetup, "--find", "--show", img).Output()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command(losetup, "--detach", dev).Run() })

	dir := filepath.Join(t.TempDir(), "vol")
	code, stdout, errOut := sluiceRun(t, "mkfs", dir, "--data", dev)
	if code != 0 {
		t.Fatalf("mkfs --data %s: exit %d: %s", dev, code, errOut)
	}
	if !strings.Contains(stdout, "data "+dev+" (block device)") || !strings.Contains(stdout, "8388608 B (8 MiB)") {
		t.Errorf("mkfs output: %q", stdout)
	}
	j := statJSONOf(t, dir)
	if j["data_path"] != dev || j["device_bytes"] != float64(8<<20) {
		t.Errorf("stat: %v", j)
	}
	if code, _, errOut := sluiceRun(t, "fsck", dir); code != 0 {
		t.Errorf("fsck: exit %d: %s", code, errOut)
	}

	// The device now holds a volume: another mkfs needs --force.
	dir2 := filepath.Join(t.TempDir(), "vol")
	code, _, errOut = sluiceRun(t, "mkfs", dir2, "--data", dev)
	if code != 1 {
		t.Errorf("mkfs over a used device: exit %d", code)
	}
	wantOneLine(t, "mkfs", errOut, "--data "+dev+" already holds sluice volume "+j["uuid"].(string), "--force")
	code, _, errOut = sluiceRun(t, "mkfs", dir2, "--data", dev, "--size", "4M")
	if code != 1 {
		t.Errorf("mkfs --data --size: exit %d", code)
	}
	wantOneLine(t, "mkfs", errOut, "--size cannot be combined with --data")
}

// buildSluice builds the command into a temporary directory.
func buildSluice(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the binary")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinary runs the built command end to end: the happy path, a volume
// held by another process, and every refusal, none of which may print a
// panic or a Go stack.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildSluice(t)
	exe := func(args ...string) (int, string, string) {
		t.Helper()
		var o, e bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"panic", "goroutine ", ".go:", "runtime."} {
			if strings.Contains(e.String(), bad) || strings.Contains(o.String(), bad) {
				t.Errorf("sluice %v printed %q:\n%s%s", args, bad, o.String(), e.String())
			}
		}
		return code, o.String(), e.String()
	}

	dir := filepath.Join(t.TempDir(), "vol")
	code, out, errOut := exe("mkfs", dir, "--size", "16M", "--block-size", "8K")
	if code != 0 || !strings.HasPrefix(out, "created volume "+dir+": uuid ") {
		t.Fatalf("mkfs: exit %d: %s%s", code, out, errOut)
	}
	code, out, _ = exe("stat", "--json", dir)
	var info volume.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil || code != 0 {
		t.Fatalf("stat --json: exit %d, %v", code, err)
	}
	if info.BlockSize != 8192 || info.DeviceBytes != 16<<20 || info.DataBlocks != 2047 || info.FreeBlocks != 2047 {
		t.Errorf("stat --json: %+v", info)
	}
	if code, out, _ := exe("fsck", dir); code != 0 || !strings.Contains(out, "clean") {
		t.Errorf("fsck: exit %d: %s", code, out)
	}

	// This process holds the volume: the child names our pid.
	v, err := volume.Open(dir, volume.OpenOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = exe("stat", dir)
	if code != 1 {
		t.Errorf("stat of a volume in use: exit %d", code)
	}
	wantOneLine(t, "stat", errOut, fmt.Sprintf("volume %s is in use by pid %d", dir, os.Getpid()))
	v.Close()

	// Refusals: exit status and one line on stderr, never a stack.
	corrupt := func(edit func(dir string)) string {
		d := mkfsTestVolume(t)
		edit(d)
		return d
	}
	badMagic := corrupt(func(d string) { flipByte(t, filepath.Join(d, "data"), 3) })
	truncated := corrupt(func(d string) { os.Truncate(filepath.Join(d, "data"), 4096) })
	noMeta := corrupt(func(d string) { os.RemoveAll(filepath.Join(d, "meta")) })
	badManifest := corrupt(func(d string) {
		ms, _ := filepath.Glob(filepath.Join(d, "meta", "MANIFEST-*"))
		for _, m := range ms {
			os.Truncate(m, 20)
		}
	})
	problems := corrupt(func(d string) {
		editMeta(t, d, func(tx meta.Txn, sb *meta.Superblock) {
			tx.Set(meta.DirentKey(meta.RootIno, "ghost"), meta.EncodeDirent(meta.Dirent{Ino: 42, Type: sIFREG}))
		})
	})
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stat", badMagic}, 1, "no sluice magic"},
		{[]string{"fsck", truncated}, 8, "truncated image"},
		{[]string{"stat", noMeta, "--json"}, 1, "meta/ is missing"},
		{[]string{"fsck", badManifest}, 8, "malformed manifest"},
		{[]string{"fsck", problems}, 1, "dangling-entry"},
		{[]string{"stat", filepath.Join(dir, "nope")}, 1, "does not exist"},
		{[]string{"mkfs", dir, "--size", "4M"}, 1, "pass --force"},
		{[]string{"mkfs", filepath.Join(t.TempDir(), "v"), "--size", "100"}, 1, "smaller than the minimum"},
		{[]string{"mkfs", filepath.Join(t.TempDir(), "v"), "--size", "4M", "--block-size", "1000"}, 1, "power of two"},
		{[]string{"mkfs", filepath.Join(t.TempDir(), "v"), "--size", "4M", "--io-unit", "64K"}, 1, "larger than the 4096 B block size"},
		{[]string{"mkfs", filepath.Join(t.TempDir(), "v"), "--size", "4M", "--data", "/dev/null"}, 1, "not a block device"},
	} {
		code, _, errOut := exe(c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (%q)", c.args, code, c.code, errOut)
		}
		wantOneLine(t, c.args[0], errOut, c.want)
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"mkfs"}, {"stat", "--json"}, {"mkfs", dir, "--sise", "4M"}} {
		if code, _, errOut := exe(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	if code, out, errOut := exe("mkfs", "--help"); code != 0 || errOut != "" || !strings.Contains(out, `(default "4096")`) {
		t.Errorf("mkfs --help: exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

// TestStatFsckShared: stat and fsck count a reflink copy's shared blocks
// and what the sharing saves.
func TestStatFsckShared(t *testing.T) {
	dir := mkfsTestVolume(t)
	fs, err := sluice.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := fs.Create("/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteAt(bytes.Repeat([]byte("x"), 40960), 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/b", "/c"} {
		b, err := fs.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Clone(a); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	a.Close()
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	j := statJSONOf(t, dir)
	if j["shared_blocks"] != 10.0 || j["saved_blocks"] != 20.0 || j["used_blocks"] != 10.0 {
		t.Errorf("stat: shared %v, saved %v, used %v; want 10, 20, 10", j["shared_blocks"], j["saved_blocks"], j["used_blocks"])
	}
	code, out, _ := sluiceRun(t, "stat", dir)
	if code != 0 || !strings.Contains(out, "shared       10 blocks, 40960 B (40 KiB) (reflink copies save 81920 B (80 KiB))\n") {
		t.Errorf("stat: exit %d:\n%s", code, out)
	}
	code, out, _ = sluiceRun(t, "fsck", dir)
	if code != 0 || !strings.Contains(out, "): clean\n") || !strings.Contains(out, "10 used, ") || !strings.Contains(out, ", 10 shared\n") {
		t.Errorf("fsck: exit %d:\n%s", code, out)
	}
	code, out, _ = sluiceRun(t, "fiemap", dir, "/b")
	if code != 0 || !strings.HasPrefix(out, "/b: 1 extent, size 40960\n") || !strings.Contains(out, "40960  shared,last\n") {
		t.Errorf("fiemap: exit %d:\n%s", code, out)
	}
	code, out, _ = sluiceRun(t, "fiemap", "--json", dir, "c")
	var fm struct {
		Size    int64 `json:"size"`
		Extents []struct {
			Length uint64   `json:"length"`
			Names  []string `json:"flag_names"`
		} `json:"extents"`
	}
	if err := json.Unmarshal([]byte(out), &fm); err != nil || code != 0 || fm.Size != 40960 || len(fm.Extents) != 1 || fm.Extents[0].Length != 40960 || !slices.Contains(fm.Extents[0].Names, "shared") {
		t.Errorf("fiemap --json: exit %d, %v:\n%s", code, err, out)
	}
	if code, _, errOut := sluiceRun(t, "fiemap", dir, "/nope"); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("fiemap of a missing file: exit %d, %q", code, errOut)
	}
}
