// Package kvtest is the conformance suite of meta.KV: the behaviour every
// metadata engine (Pebble, etcd) must share, run by each engine's tests
// with
//
//	kvtest.Run(t, func(t *testing.T) meta.KV { ... a new, empty KV ... })
//
// It covers reads and scans (bounds, bytewise order on awkward keys, early
// stops), transactions (reading their own writes in Get and Scan, the last
// write to a key winning, Len, Abort, a finished Txn), values kept byte
// for byte (the schema's CRC-carrying records among them), snapshots,
// Sync, and concurrent use. What only some engines do (Pebble's crash
// behaviour, etcd's conflicts and limits) is tested by the engine's own
// package.
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

// Open returns a new, empty KV for one test and arranges (t.Cleanup) for it
// to be closed.
type Open func(t *testing.T) meta.KV

// Run runs every case of the suite as a subtest of t.
func Run(t *testing.T, open Open) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var cases = []struct {
	name string
	fn   func(t *testing.T, kv meta.KV)
}{
	{"GetMissing", testGetMissing},
	{"TxnReadsItsWrites", testTxnReadsItsWrites},
	{"LastWriteWins", testLastWriteWins},
	{"TxnScanMerges", testTxnScanMerges},
	{"TxnScanWhileWriting", testTxnScanWhileWriting},
	{"ScanBounds", testScanBounds},
	{"ScanStops", testScanStops},
	{"ByteOrder", testByteOrder},
	{"Values", testValues},
	{"AbortAndFinish", testAbortAndFinish},
	{"Snapshot", testSnapshot},
	{"Concurrent", testConcurrent},
}

// TrickyKeys are keys whose order tells a bytewise comparison from others:
// zero and 0xff bytes, prefixes of each other.
var TrickyKeys = [][]byte{
	{0x00}, {0x00, 0x00}, {0x00, 0x01}, {0x01},
	[]byte("a"), []byte("a\x00"), []byte("a\x00\x00"), []byte("a\x01"), []byte("a\x7f"), []byte("a\x80"), []byte("a\xff"), []byte("a\xff\xff"),
	[]byte("ab"), []byte("b"), []byte("\x7f"), []byte("\x80"),
	{0xff}, {0xff, 0x00}, {0xff, 0xff}, {0xff, 0xff, 0xff},
}

func commit(t *testing.T, kv meta.KV, fn func(tx meta.Txn)) {
	t.Helper()
	tx := kv.NewTxn()
	fn(tx)
	if err := tx.Commit(false); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// dump returns "k=v k=v" for the keys in [start, end) of r.
func dump(t *testing.T, r meta.Reader, start, end []byte) string {
	t.Helper()
	var out []string
	if err := r.Scan(start, end, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatalf("scan [%q, %q): %v", start, end, err)
	}
	return strings.Join(out, " ")
}

func want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

func testGetMissing(t *testing.T, kv meta.KV) {
	if _, err := kv.Get([]byte("nothing")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	tx := kv.NewTxn()
	defer tx.Abort()
	if _, err := tx.Get([]byte("nothing")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("Txn Get of a missing key: %v, want ErrNotFound", err)
	}
	want(t, "scan of an empty KV", dump(t, kv, nil, nil), "")
}

// testTxnReadsItsWrites is the transaction half of what TestPebbleKV
// checked before the suite existed.
func testTxnReadsItsWrites(t *testing.T, kv meta.KV) {
	tx := kv.NewTxn()
	for i := range 10 {
		tx.Set(meta.InodeKey(meta.Ino(i+1)), meta.EncodeInode(&meta.Inode{Ino: meta.Ino(i + 1)}))
	}
	tx.Delete(meta.InodeKey(3))
	if tx.Len() != 11 {
		t.Fatalf("Len = %d, want 11", tx.Len())
	}
	if _, err := tx.Get(meta.InodeKey(3)); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("txn read-your-delete: %v", err)
	}
	if _, err := tx.Get(meta.InodeKey(4)); err != nil {
		t.Fatalf("txn read-your-write: %v", err)
	}
	if _, err := kv.Get(meta.InodeKey(4)); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("uncommitted write visible outside the txn: %v", err)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	var seen []meta.Ino
	start, end := meta.InodeKeyRange()
	if err := kv.Scan(start, end, func(k, v []byte) error {
		in, err := meta.DecodeInode(v)
		if err == nil {
			seen = append(seen, in.Ino)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want(t, "scan", fmt.Sprint(seen), "[1 2 4 5 6 7 8 9 10]")
	if err := kv.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func testLastWriteWins(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		tx.Set([]byte("k"), []byte("1"))
		tx.Set([]byte("k"), []byte("2"))
		tx.Delete([]byte("k"))
		tx.Set([]byte("k"), []byte("3"))
		tx.Set([]byte("gone"), []byte("x"))
		tx.Delete([]byte("gone"))
		if v, err := tx.Get([]byte("k")); err != nil || string(v) != "3" {
			t.Fatalf("txn Get(k) = %q, %v; want 3", v, err)
		}
		if tx.Len() != 6 {
			t.Fatalf("Len = %d, want 6 (every Set and Delete)", tx.Len())
		}
	})
	want(t, "scan", dump(t, kv, nil, nil), "k=3")
}

func testTxnScanMerges(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		for _, k := range []string{"a", "c", "e", "g"} {
			tx.Set([]byte(k), []byte("old"))
		}
	})
	tx := kv.NewTxn()
	tx.Set([]byte("b"), []byte("new"))
	tx.Delete([]byte("c"))
	tx.Set([]byte("e"), []byte("new"))
	tx.Set([]byte("h"), []byte("new"))
	tx.Delete([]byte("x")) // deleting a missing key is no error
	want(t, "txn scan", dump(t, tx, nil, nil), "a=old b=new e=new g=old h=new")
	want(t, "txn scan [b, g)", dump(t, tx, []byte("b"), []byte("g")), "b=new e=new")
	want(t, "txn scan [c, d)", dump(t, tx, []byte("c"), []byte("d")), "")
	want(t, "scan outside the txn", dump(t, kv, nil, nil), "a=old c=old e=old g=old")
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	want(t, "scan after commit", dump(t, kv, nil, nil), "a=old b=new e=new g=old h=new")
}

// testTxnScanWhileWriting deletes and sets keys from the scan's callback, as
// the engine does when it deletes an inode's xattrs: the scan shows the Txn
// as it was when the scan started.
func testTxnScanWhileWriting(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		for i := range 20 {
			tx.Set(fmt.Appendf(nil, "x%02d", i), []byte("v"))
		}
	})
	tx := kv.NewTxn()
	tx.Set([]byte("x05a"), []byte("buffered"))
	var seen int
	if err := tx.Scan([]byte("x"), []byte("y"), func(k, _ []byte) error {
		seen++
		tx.Delete(bytes.Clone(k))
		tx.Set(append(bytes.Clone(k), 'z'), []byte("new"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 21 {
		t.Fatalf("scan saw %d keys, want 21", seen)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	got := dump(t, kv, nil, nil)
	if n := strings.Count(got, "z=new"); n != 21 || strings.Count(got, "=") != 21 {
		t.Fatalf("after the commit: %q, want 21 keys ending in z", got)
	}
}

func testScanBounds(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		for _, k := range []string{"a", "b", "c", "d"} {
			tx.Set([]byte(k), []byte(k))
		}
	})
	snap := kv.Snapshot()
	defer snap.Close()
	tx := kv.NewTxn()
	defer tx.Abort()
	for _, r := range []meta.Reader{kv, snap, tx} {
		want(t, "[b, d)", dump(t, r, []byte("b"), []byte("d")), "b=b c=c")
		want(t, "[nil, c)", dump(t, r, nil, []byte("c")), "a=a b=b")
		want(t, "[c, nil)", dump(t, r, []byte("c"), nil), "c=c d=d")
		want(t, "[b\\x00, c\\x00)", dump(t, r, []byte("b\x00"), []byte("c\x00")), "c=c")
		want(t, "[c, c)", dump(t, r, []byte("c"), []byte("c")), "")
		want(t, "[d, a)", dump(t, r, []byte("d"), []byte("a")), "")
		want(t, "[e, nil)", dump(t, r, []byte("e"), nil), "")
	}
}

func testScanStops(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		for i := range 10 {
			tx.Set(fmt.Appendf(nil, "k%d", i), []byte("v"))
		}
	})
	stop := errors.New("stop")
	tx := kv.NewTxn()
	defer tx.Abort()
	for _, r := range []meta.Reader{kv, tx} {
		var n int
		err := r.Scan(nil, nil, func(k, _ []byte) error {
			if n++; n == 4 {
				return fmt.Errorf("at %s: %w", k, stop)
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 4 || !strings.Contains(err.Error(), "k3") {
			t.Fatalf("scan stopped after %d keys with %v, want 4 and the callback's error at k3", n, err)
		}
	}
}

// testByteOrder: keys are ordered by bytes.Compare, whatever bytes they
// hold, in scans of the KV, a snapshot and a Txn.
func testByteOrder(t *testing.T, kv meta.KV) {
	keys := slices.Clone(TrickyKeys)
	commit(t, kv, func(tx meta.Txn) {
		for i, k := range keys {
			if i%2 == 0 {
				tx.Set(k, k)
			}
		}
	})
	sorted := slices.Clone(keys)
	slices.SortFunc(sorted, bytes.Compare)
	snap := kv.Snapshot()
	defer snap.Close()
	tx := kv.NewTxn()
	defer tx.Abort()
	for i, k := range keys {
		if i%2 == 1 {
			tx.Set(k, k)
		}
	}
	check := func(what string, r meta.Reader, want [][]byte) {
		t.Helper()
		var got [][]byte
		if err := r.Scan(nil, nil, func(k, v []byte) error {
			if !bytes.Equal(k, v) {
				return fmt.Errorf("key %q holds %q", k, v)
			}
			got = append(got, bytes.Clone(k))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, bytes.Equal) {
			t.Fatalf("%s scans %q, want %q", what, got, want)
		}
	}
	var committed [][]byte
	for _, k := range sorted {
		if i := slices.IndexFunc(keys, func(x []byte) bool { return bytes.Equal(x, k) }); i%2 == 0 {
			committed = append(committed, k)
		}
	}
	check("KV", kv, committed)
	check("snapshot", snap, committed)
	check("Txn (committed and buffered keys)", tx, sorted)
	// Ranges bounded by the awkward keys themselves.
	for _, b := range [][2][]byte{{{0x00}, {0x00, 0x01}}, {[]byte("a"), []byte("a\xff")}, {[]byte("a\x00"), []byte("b")}, {{0xff}, nil}, {nil, {0x00, 0x00}}} {
		var want []string
		for _, k := range sorted {
			if bytes.Compare(k, b[0]) >= 0 && (b[1] == nil || bytes.Compare(k, b[1]) < 0) {
				want = append(want, string(k)+"="+string(k))
			}
		}
		got := dump(t, tx, b[0], b[1])
		if got != strings.Join(want, " ") {
			t.Fatalf("Txn scan [%q, %q) = %q, want %q", b[0], b[1], got, strings.Join(want, " "))
		}
	}
}

// testValues: values come back byte for byte, the schema's records (format
// byte, CRC-32C) still decode, and neither the caller's buffers after Set
// nor the returned slices alias what is stored.
func testValues(t *testing.T, kv meta.KV) {
	big := make([]byte, 100<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	inode := meta.EncodeInode(&meta.Inode{Ino: 42, Mode: 0o100644, Size: 1 << 40, Nlink: 1})
	vals := map[string][]byte{
		"empty":  {},
		"binary": {0x00, 0xff, 0x00, 0x80},
		"big":    big,
		"inode":  inode,
	}
	buf := []byte("reused")
	commit(t, kv, func(tx meta.Txn) {
		for k, v := range vals {
			tx.Set([]byte(k), v)
		}
		tx.Set([]byte("buf"), buf)
		buf[0] = 'X' // Set must have copied it
	})
	for k, v := range vals {
		got, err := kv.Get([]byte(k))
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Get(%s) = %d bytes, %v; want %d bytes", k, len(got), err, len(v))
		}
		if len(got) > 0 {
			got[0] ^= 0xff // must not change what is stored
		}
	}
	if got, _ := kv.Get([]byte("buf")); string(got) != "reused" {
		t.Fatalf("Get(buf) = %q: Set did not copy the value", got)
	}
	got, err := kv.Get([]byte("inode"))
	if err != nil {
		t.Fatal(err)
	}
	if in, err := meta.DecodeInode(got); err != nil || in.Ino != 42 || in.Size != 1<<40 {
		t.Fatalf("inode record: %+v, %v", in, err)
	}
	got[len(got)-1] ^= 1
	if _, err := meta.DecodeInode(got); !errors.Is(err, meta.ErrCorrupt) {
		t.Fatalf("a damaged record decodes: %v", err)
	}
}

func testAbortAndFinish(t *testing.T, kv meta.KV) {
	tx := kv.NewTxn()
	tx.Set([]byte("a"), []byte("1"))
	tx.Abort()
	tx.Abort()
	if _, err := kv.Get([]byte("a")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("an aborted write is visible: %v", err)
	}
	tx = kv.NewTxn()
	tx.Set([]byte("b"), []byte("2"))
	if err := tx.Commit(true); err != nil {
		t.Fatal(err)
	}
	tx.Abort() // safe after Commit
	if err := tx.Commit(false); err == nil {
		t.Fatal("a second Commit succeeded")
	}
	if v, err := kv.Get([]byte("b")); err != nil || string(v) != "2" {
		t.Fatalf("Get(b) = %q, %v", v, err)
	}
	// A Txn with nothing to write commits.
	tx = kv.NewTxn()
	if _, err := tx.Get([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(false); err != nil {
		t.Fatalf("a read-only commit: %v", err)
	}
}

// testSnapshot: a snapshot keeps showing the state of its creation while
// later commits change and delete keys.
func testSnapshot(t *testing.T, kv meta.KV) {
	commit(t, kv, func(tx meta.Txn) {
		tx.Set([]byte("a"), []byte("1"))
		tx.Set([]byte("b"), []byte("2"))
	})
	snap := kv.Snapshot()
	defer snap.Close()
	commit(t, kv, func(tx meta.Txn) {
		tx.Delete([]byte("a"))
		tx.Set([]byte("b"), []byte("3"))
		tx.Set([]byte("c"), []byte("4"))
	})
	if v, err := snap.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("snapshot Get(a) = %q, %v; want 1", v, err)
	}
	if _, err := snap.Get([]byte("c")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("snapshot Get(c), created after it: %v", err)
	}
	want(t, "snapshot scan", dump(t, snap, []byte("a"), []byte("z")), "a=1 b=2")
	if _, err := kv.Get([]byte("a")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("live Get(a) after delete: %v", err)
	}
	want(t, "live scan", dump(t, kv, nil, nil), "b=3 c=4")
}

// testConcurrent: goroutines commit and read at once (run it with -race).
func testConcurrent(t *testing.T, kv meta.KV) {
	const workers, commits = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range commits {
				tx := kv.NewTxn()
				tx.Set(fmt.Appendf(nil, "w%d/%02d", w, i), []byte("v"))
				if err := tx.Commit(false); err != nil {
					errs <- err
					return
				}
				if _, err := kv.Get(fmt.Appendf(nil, "w%d/%02d", w, i)); err != nil {
					errs <- fmt.Errorf("own commit not visible: %w", err)
					return
				}
				if err := kv.Scan(nil, nil, func(k, v []byte) error { return nil }); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := strings.Count(dump(t, kv, nil, nil), "=v"); got != workers*commits {
		t.Fatalf("%d keys after the concurrent commits, want %d", got, workers*commits)
	}
}
