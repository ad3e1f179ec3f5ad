package sluice

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestLockModes runs testdata/lockmodes: each operation class of the table
// "Which operation takes which mode" in the iolock package doc, under the
// classic, seeds and concurrent policies, printing the I/O lock modes it
// was granted (the inode's iolock.Stats: grants and demotes, then its
// RangeLock's grants) and the engine's lock counters that moved. Each result is also checked against that
// table's row, so the table cannot drift from the code. Regenerate the
// expected output with
//
//	go test . -run TestLockModes -rewrite
//
// Command:
//
//	modes op=OP    run OP (see lockOps) once under each policy
//
// Modes print in the order Shared, Exclusive, Demote, Range, each as often
// as it was granted: the order in which every path takes them (a Shared
// hold is dropped before Exclusive is taken; Demote ends an Exclusive hold;
// a Range is taken under the Shared hold).
func TestLockModes(t *testing.T) {
	table := lockModeTable(t)
	used := map[string]bool{}
	datadriven.RunTest(t, "testdata/lockmodes", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "modes" {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
		var name string
		d.ScanArgs(t, "op", &name)
		op, ok := lockOps[name]
		if !ok {
			d.Fatalf(t, "unknown op %q", name)
		}
		row, ok := table[op.row]
		if !ok {
			d.Fatalf(t, "op %s: no row %q in the iolock package doc's table", name, op.row)
		}
		used[op.row] = true
		var b strings.Builder
		fmt.Fprintf(&b, "row: %s\n", op.row)
		for _, pc := range []struct {
			name string
			pol  Policy
			want string
		}{{"classic", Classic(), row.classic}, {"seeds", Seeds(), row.seeds}, {"concurrent", Concurrent(), row.concurrent}} {
			modes, counters := runLockOp(t, pc.pol, op)
			if modes != pc.want {
				t.Errorf("op %s, %s: granted %q; the iolock table's row %q says %q", name, pc.name, modes, op.row, pc.want)
			}
			fmt.Fprintf(&b, "%s: %s [%s]\n", pc.name, modes, counters)
		}
		return b.String()
	})
	for r := range table {
		if !used[r] {
			t.Errorf("row %q of the iolock package doc's table is not checked by testdata/lockmodes", r)
		}
	}
}

// lockOp is one operation class: setup makes the state the row names and
// returns the operation, which is then run and observed.
type lockOp struct {
	row   string // the row of the iolock table
	setup func(e *testEnv) (*File, func() error)
}

// lockFile makes /f: 4 written blocks, fsynced, open O_DIRECT; with flags
// other than O_DIRECT it returns a second open of it with those flags.
func lockFile(e *testEnv, flags int) *File {
	f, _ := e.prewrite("/f", 4*4096, 1)
	if flags == O_DIRECT {
		return f
	}
	g, err := e.fs.OpenFile("/f", O_RDWR|flags, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

func writeAt(f *File, n int, off int64) func() error {
	return func() error { _, err := f.WriteAt(pattern(n, 9), off); return err }
}

var lockOps = map[string]lockOp{
	"direct-read": {"direct read", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { _, err := f.ReadAt(pattern(4096, 0), 0); return err }
	}},
	"direct-write-within-eof": {"aligned direct write within EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 4096, 4096)
	}},
	"direct-write-at-eof": {"aligned direct write at EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 4096, 4*4096)
	}},
	"direct-write-past-eof": {"aligned direct write past EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 4096, 6*4096)
	}},
	"direct-write-strip-privs": {"direct write that must strip suid, sgid or capabilities", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		if err := e.fs.Chmod("/f", 0o4755); err != nil {
			e.t.Fatal(err)
		}
		return f, writeAt(f, 4096, 4096)
	}},
	"subblock-overwrite": {"sub-block direct write within EOF, over one written extent", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 512, 4096+512)
	}},
	"subblock-not-one-extent": {"sub-block direct write within EOF, not one written extent", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		if err := f.Truncate(6 * 4096); err != nil { // block 4 is a hole
			e.t.Fatal(err)
		}
		return f, writeAt(f, 1024, 4*4096-512)
	}},
	"subblock-eof-block-overwrite": {"sub-block direct overwrite in the EOF block, within EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		if err := f.Truncate(4*4096 - 1024); err != nil { // EOF inside block 3
			e.t.Fatal(err)
		}
		return f, writeAt(f, 512, 3*4096)
	}},
	"subblock-ending-at-eof": {"sub-block direct write ending at EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 512, 4*4096-512)
	}},
	"subblock-past-eof": {"sub-block direct write past EOF", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, writeAt(f, 1024, 4*4096-512)
	}},
	"direct-append": {"O_APPEND direct write", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT|O_APPEND)
		return f, func() error { _, err := f.Write(pattern(4096, 9)); return err }
	}},
	"buffered-write": {"buffered write", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, 0)
		return f, writeAt(f, 100, 10)
	}},
	"buffered-append": {"O_APPEND buffered write", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_APPEND)
		return f, func() error { _, err := f.Write(pattern(100, 9)); return err }
	}},
	"buffered-read": {"buffered read", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, 0)
		return f, func() error { _, err := f.ReadAt(make([]byte, 100), 10); return err }
	}},
	"truncate": {"truncate", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Truncate(2 * 4096) }
	}},
	"fallocate": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Fallocate(0, 4*4096, 4096) }
	}},
	"punch-hole": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Fallocate(FallocPunchHole|FallocKeepSize, 0, 4096) }
	}},
	"zero-range": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Fallocate(FallocZeroRange, 0, 4096) }
	}},
	"collapse-range": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Fallocate(FallocCollapseRange, 0, 4096) }
	}},
	"unshare-range": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := sharedLockFile(e)
		return f, func() error { return f.Fallocate(FallocUnshareRange, 0, 4096) }
	}},
	"direct-write-shared": {"aligned direct write into shared blocks", func(e *testEnv) (*File, func() error) {
		f := sharedLockFile(e)
		return f, writeAt(f, 4096, 4096)
	}},
	"subblock-shared": {"sub-block direct write into shared blocks", func(e *testEnv) (*File, func() error) {
		f := sharedLockFile(e)
		return f, writeAt(f, 512, 4096+512)
	}},
	"clone": {"clone, dedupe (each file)", func(e *testEnv) (*File, func() error) {
		src := lockFile(e, O_DIRECT)
		f := e.mustCreate("/g", O_DIRECT)
		return f, func() error { return f.Clone(src) }
	}},
	"dedupe": {"clone, dedupe (each file)", func(e *testEnv) (*File, func() error) {
		src := lockFile(e, O_DIRECT)
		f, _ := e.prewrite("/g", 4*4096, 1)
		return f, func() error { _, err := src.DedupeRange(0, 4*4096, f, 0); return err }
	}},
	"insert-range": {"fallocate, punch hole, zero range, collapse, insert and unshare range", func(e *testEnv) (*File, func() error) {
		f := lockFile(e, O_DIRECT)
		return f, func() error { return f.Fallocate(FallocInsertRange, 0, 4096) }
	}},
}

// sharedLockFile makes /f as lockFile does and clones it to /g: every
// block of /f is shared.
func sharedLockFile(e *testEnv) *File {
	f := lockFile(e, O_DIRECT)
	g := e.mustCreate("/g", O_DIRECT)
	if err := g.Clone(f); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// runLockOp runs op on a fresh file system under pol and returns the modes
// the file's I/O lock granted and the engine's Lock* counters that moved.
func runLockOp(t *testing.T, pol Policy, op lockOp) (modes, counters string) {
	e := policyEnv(t, pol)
	f, run := op.setup(e)
	before, r0, c0 := f.in.io.Stats(), f.in.ranges.Stats(), e.fs.Counters()
	if err := run(); err != nil {
		t.Fatal(err)
	}
	after, r1, c1 := f.in.io.Stats(), f.in.ranges.Stats(), e.fs.Counters()
	var m []string
	for _, g := range []struct {
		name string
		n    uint64
	}{
		{"Shared", after.SharedAcquired - before.SharedAcquired},
		{"Exclusive", after.ExclusiveAcquired - before.ExclusiveAcquired},
		{"Demote", after.Demoted - before.Demoted},
		{"Range", r1.Acquired - r0.Acquired},
	} {
		for range g.n {
			m = append(m, g.name)
		}
	}
	var cs []string
	for k, v := range c1 {
		if strings.HasPrefix(k, "Lock") && v != c0[k] {
			cs = append(cs, fmt.Sprintf("%s=%d", k, v-c0[k]))
		}
	}
	slices.Sort(cs)
	return strings.Join(m, ", "), strings.Join(cs, " ")
}

// lockModeRow is a row of the iolock package doc's table: the modes its
// classic, seeds and concurrent cells name (the text before the first
// ";").
type lockModeRow struct{ classic, seeds, concurrent string }

// lockModeTable parses the table "Which operation takes which mode" in
// iolock/doc.go: rows are separated by blank lines, each row's cells run
// over its lines, the operation's name ends at its first line in
// parentheses (the kernel analogue), and "same" means as the column to
// the left.
func lockModeTable(t *testing.T) map[string]lockModeRow {
	src, err := os.ReadFile("iolock/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(src), "// # Which operation takes which mode")
	if !ok {
		t.Fatal("iolock/doc.go has no section \"Which operation takes which mode\"")
	}
	text, _, _ = strings.Cut(text, "\n// #")
	table := map[string]lockModeRow{}
	var cells [4][]string
	flush := func() {
		if len(cells[0]) > 0 && !strings.HasPrefix(cells[0][0], "operation") && !strings.HasPrefix(cells[0][0], "---") {
			mode := func(c []string) string {
				m, _, _ := strings.Cut(strings.Join(c, " "), ";")
				return strings.TrimSpace(m)
			}
			r := lockModeRow{classic: mode(cells[1]), seeds: mode(cells[2]), concurrent: mode(cells[3])}
			if r.seeds == "same" {
				r.seeds = r.classic
			}
			if r.concurrent == "same" {
				r.concurrent = r.seeds
			}
			name := cells[0]
			for i, l := range name {
				if strings.HasPrefix(l, "(") {
					name = name[:i]
					break
				}
			}
			table[strings.Join(name, " ")] = r
		}
		cells = [4][]string{}
	}
	for _, line := range strings.Split(text, "\n") {
		line, ok := strings.CutPrefix(line, "//\t")
		if !ok || !strings.Contains(line, "|") {
			flush()
			continue
		}
		for i, c := range strings.SplitN(line, "|", 4) {
			if c = strings.TrimSpace(c); c != "" {
				cells[i] = append(cells[i], c)
			}
		}
		if strings.HasPrefix(line, "---") {
			flush()
		}
	}
	flush()
	if len(table) < 10 {
		t.Fatalf("parsed only %d rows from the iolock table: %v", len(table), table)
	}
	return table
}
