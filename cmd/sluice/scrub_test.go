package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
