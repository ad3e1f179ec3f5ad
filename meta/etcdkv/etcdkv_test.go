package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv/etcdtest"
	"github.com/sluicefs/sluice/meta/kvtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// cluster is the 3-member etcd cluster every test of the package shares;
// each test works under its own key prefix. Tests that stop members
// restart them before they end.
var cluster *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "etcdkv-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cluster, err = etcdtest.Start(dir, etcdtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Close()
	if testing.Verbose() {
		fmt.Printf("etcdtest: %d members %v ready in %v\n", cluster.Members(), cluster.Endpoints(), time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

var prefixSeq atomic.Int64

// open returns a KV of the shared cluster under a prefix of its own,
// closed when the test ends.
func open(t *testing.T, o Options) *KV {
	t.Helper()
	o.Endpoints = cluster.Endpoints()
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("test/%d/", prefixSeq.Add(1))
	}
	kv, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kv.Close(); err != nil {
			t.Error(err)
		}
	})
	return kv
}

func set(t *testing.T, kv meta.KV, kvs ...string) {
	t.Helper()
	tx := kv.NewTxn()
	for i := 0; i < len(kvs); i += 2 {
		tx.Set([]byte(kvs[i]), []byte(kvs[i+1]))
	}
	if err := tx.Commit(false); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// TestConformance runs the KV suite with pages of 3 keys, so that every
// scan crosses page boundaries, and with the default page size.
func TestConformance(t *testing.T) {
	for _, page := range []int{3, 0} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			kvtest.Run(t, func(t *testing.T) meta.KV { return open(t, Options{ScanPageSize: page}) })
		})
	}
}

// TestOrderMatchesPebble: the same awkward keys, scanned over ranges
// bounded by each of them, come back in the same order from etcd and from
// Pebble (whose default comparer is bytewise).
func TestOrderMatchesPebble(t *testing.T) {
	pkv, err := meta.OpenPebble("db", meta.PebbleOptions{FS: vfs.NewMem(), CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pkv.Close()
	ekv := open(t, Options{ScanPageSize: 4})
	keys := slices.Clone(kvtest.TrickyKeys)
	keys = append(keys, meta.InodeKey(1), meta.InodeKey(256), meta.DirentKey(1, "a"), meta.DirentKey(1, "a\x00b"), meta.ExtentKey(1, 1<<63))
	for _, kv := range []meta.KV{pkv, ekv} {
		tx := kv.NewTxn()
		for _, k := range keys {
			tx.Set(k, k)
		}
		if err := tx.Commit(false); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(kv meta.Reader, start, end []byte) [][]byte {
		var out [][]byte
		if err := kv.Scan(start, end, func(k, _ []byte) error {
			out = append(out, bytes.Clone(k))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	bounds := append([][]byte{nil}, keys...)
	for _, start := range bounds {
		for _, end := range bounds {
			p, e := scan(pkv, start, end), scan(ekv, start, end)
			if !slices.EqualFunc(p, e, bytes.Equal) {
				t.Fatalf("scan [%q, %q): Pebble %q, etcd %q", start, end, p, e)
			}
		}
	}
	if got := scan(ekv, nil, nil); len(got) != len(keys) || !slices.IsSortedFunc(got, bytes.Compare) {
		t.Fatalf("full scan: %q", got)
	}
}

// TestPrefixes: volumes under prefixes "v1/" and "v10/" do not see each
// other's keys, even keys of 0xff bytes.
func TestPrefixes(t *testing.T) {
	base := fmt.Sprintf("iso%d/", prefixSeq.Add(1))
	a := open(t, Options{Prefix: base + "v1/"})
	b := open(t, Options{Prefix: base + "v10/"})
	set(t, a, "\xff\xff", "a", "k", "a")
	set(t, b, "\x00", "b", "k", "b")
	for _, c := range []struct {
		kv   meta.KV
		want string
	}{{a, "k=a \xff\xff=a"}, {b, "\x00=b k=b"}} {
		var got []string
		if err := c.kv.Scan(nil, nil, func(k, v []byte) error {
			got = append(got, string(k)+"="+string(v))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, " ") != c.want {
			t.Fatalf("scan = %q, want %q", got, c.want)
		}
	}
}

func wantConflict(t *testing.T, tx meta.Txn) {
	t.Helper()
	err := tx.Commit(false)
	if !errors.Is(err, ErrConflict) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("commit = %v, want ErrConflict (matching EIO)", err)
	}
}

func wantCommit(t *testing.T, tx meta.Txn) {
	t.Helper()
	if err := tx.Commit(false); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// TestConflictGet: a Txn that read a key (present or absent) which another
// commit then changed fails with ErrConflict and writes nothing.
func TestConflictGet(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "k", "1")
	for _, c := range []struct{ name, key, other string }{
		{"changed", "k", "2"},
		{"created", "new", "x"},
		{"deleted", "k", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t1 := kv.NewTxn()
			_, err := t1.Get([]byte(c.key))
			if err != nil && !errors.Is(err, meta.ErrNotFound) {
				t.Fatal(err)
			}
			t1.Set([]byte("out-"+c.name), []byte("t1"))
			t2 := kv.NewTxn()
			if c.other == "" {
				t2.Delete([]byte(c.key))
			} else {
				t2.Set([]byte(c.key), []byte(c.other))
			}
			wantCommit(t, t2)
			wantConflict(t, t1)
			if _, err := kv.Get([]byte("out-" + c.name)); !errors.Is(err, meta.ErrNotFound) {
				t.Fatalf("a conflicting commit wrote: %v", err)
			}
		})
	}
}

// TestConflictScan: a Txn that scanned a range fails when another commit
// inserts into it, deletes from it or changes a key in it; not when the
// other commit writes outside the range, or beyond the point where the
// scan's callback stopped it.
func TestConflictScan(t *testing.T) {
	stop := errors.New("stop")
	for _, c := range []struct {
		name     string
		stopAt   string // the callback stops the scan at this key
		write    string // the other commit's key ("-key" deletes)
		conflict bool
	}{
		{"insert", "", "b5", true},
		{"delete", "", "-b2", true},
		{"change", "", "b3", true},
		{"insert before the range", "", "a9", false},
		{"insert at its end", "", "c", false},
		{"insert before the stop", "b2", "b1a", true},
		{"change at the stop", "b2", "b2", true},
		{"insert after the stop", "b2", "b2a", false},
		{"delete after the stop", "b2", "-b3", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			kv := open(t, Options{ScanPageSize: 2})
			set(t, kv, "a", "", "b1", "", "b2", "", "b3", "", "b4", "", "c", "")
			t1 := kv.NewTxn()
			err := t1.Scan([]byte("b"), []byte("c"), func(k, _ []byte) error {
				if string(k) == c.stopAt {
					return stop
				}
				return nil
			})
			if err != nil && !errors.Is(err, stop) {
				t.Fatal(err)
			}
			t1.Set([]byte("out"), []byte("t1"))
			t2 := kv.NewTxn()
			if k, ok := strings.CutPrefix(c.write, "-"); ok {
				t2.Delete([]byte(k))
			} else {
				t2.Set([]byte(c.write), []byte("t2"))
			}
			wantCommit(t, t2)
			if c.conflict {
				wantConflict(t, t1)
			} else {
				wantCommit(t, t1)
			}
		})
	}
}

// TestTxnReadsOneRevision: a Txn's reads all see the state of its first
// read; a key changed since then makes it conflict. A Txn that only read
// commits.
func TestTxnReadsOneRevision(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "a", "1", "b", "1")
	t1 := kv.NewTxn()
	if v, err := t1.Get([]byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("Get(a) = %q, %v", v, err)
	}
	set(t, kv, "b", "2", "c", "2")
	if v, err := t1.Get([]byte("b")); err != nil || string(v) != "1" {
		t.Fatalf("Get(b) after another commit = %q, %v; want the old 1", v, err)
	}
	var keys []string
	if err := t1.Scan(nil, nil, func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[a b]" {
		t.Fatalf("scan after another commit = %v, want [a b]", keys)
	}
	readOnly := kv.NewTxn()
	if _, err := readOnly.Get([]byte("a")); err != nil {
		t.Fatal(err)
	}
	set(t, kv, "a", "3")
	wantCommit(t, readOnly)
	t1.Set([]byte("d"), []byte("1"))
	wantConflict(t, t1)
}

// TestWriteSkew: two Txns read x and y and each writes one of them; the
// second to commit fails (snapshot isolation alone would let both).
func TestWriteSkew(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "x", "0", "y", "0")
	var txs []meta.Txn
	for _, w := range []string{"x", "y"} {
		tx := kv.NewTxn()
		for _, k := range []string{"x", "y"} {
			if _, err := tx.Get([]byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		tx.Set([]byte(w), []byte("1"))
		txs = append(txs, tx)
	}
	wantCommit(t, txs[0])
	wantConflict(t, txs[1])
}

// TestRetryOnConflict: goroutines increment one counter, each re-running
// its transaction body on ErrConflict (the caller's retry the package doc
// describes); no increment is lost, and blind writes never conflict.
func TestRetryOnConflict(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "n", "0")
	const workers, incs, maxAttempts = 4, 5, 100
	var wg sync.WaitGroup
	var conflicts atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range incs {
				for attempt := 1; ; attempt++ {
					tx := kv.NewTxn()
					v, err := tx.Get([]byte("n"))
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(v), &n)
					tx.Set([]byte("n"), fmt.Append(nil, n+1))
					tx.Set(fmt.Appendf(nil, "blind%d", w), []byte("x"))
					err = tx.Commit(false)
					if err == nil {
						break
					}
					if !errors.Is(err, ErrConflict) || attempt == maxAttempts {
						errs <- err
						return
					}
					conflicts.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, err := kv.Get([]byte("n")); err != nil || string(v) != fmt.Sprint(workers*incs) {
		t.Fatalf("counter = %q, %v; want %d", v, err, workers*incs)
	}
	t.Logf("%d conflicts retried", conflicts.Load())
}

// TestLimits: a transaction over etcd's --max-txn-ops or
// --max-request-bytes fails whole, with an error naming the limit and the
// numbers, whether Commit catches it or (when the options exceed the
// server's limits) the server does.
func TestLimits(t *testing.T) {
	kv := open(t, Options{})
	commitN := func(kv *KV, reads, writes, valueBytes int) error {
		tx := kv.NewTxn()
		for i := range reads {
			if _, err := tx.Get(fmt.Appendf(nil, "r%04d", i)); !errors.Is(err, meta.ErrNotFound) {
				t.Fatal(err)
			}
		}
		for i := range writes {
			tx.Set(fmt.Appendf(nil, "w%04d", i), make([]byte, valueBytes))
		}
		return tx.Commit(false)
	}
	tooLarge := func(err error, words ...string) {
		t.Helper()
		if !errors.Is(err, ErrTxnTooLarge) || !errors.Is(err, syscall.EIO) {
			t.Fatalf("commit = %v, want ErrTxnTooLarge", err)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not name %q", err, w)
			}
		}
	}
	if err := commitN(kv, 128, 128, 10); err != nil {
		t.Fatalf("128 reads and 128 writes: %v", err)
	}
	tooLarge(commitN(kv, 0, 129, 10), "max-txn-ops", "129 writes", "128")
	tooLarge(commitN(kv, 129, 1, 10), "max-txn-ops", "129 reads", "128")
	if _, err := kv.Get([]byte("w0128")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("a refused transaction wrote: %v", err)
	}
	if err := commitN(kv, 0, 1, 1400<<10); err != nil {
		t.Fatalf("a 1.4 MiB value: %v", err)
	}
	tooLarge(commitN(kv, 0, 1, 1600<<10), "max-request-bytes", "1572864")
	tooLarge(commitN(kv, 0, 16, 100<<10), "max-request-bytes")

	// Options above the server's limits: the server refuses.
	loose := open(t, Options{MaxTxnOps: 1000, MaxRequestBytes: 4 << 20})
	tooLarge(commitN(loose, 0, 200, 10), "server's --max-txn-ops", "200 writes")
	tooLarge(commitN(loose, 0, 1, 1700<<10), "server's --max-request-bytes")
	if _, err := loose.Get([]byte("w0000")); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("a refused transaction wrote: %v", err)
	}
}

// TestScanOneRevision: a scan sees one state however many pages it reads,
// while commits land between its pages.
func TestScanOneRevision(t *testing.T) {
	kv := open(t, Options{ScanPageSize: 2})
	set(t, kv, "k1", "old", "k2", "old", "k3", "old", "k4", "old", "k5", "old")
	var got []string
	i := 0
	if err := kv.Scan(nil, nil, func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		if i++; i == 1 {
			set(t, kv, "k4", "new", "k9", "new")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "k1=old k2=old k3=old k4=old k5=old"; strings.Join(got, " ") != want {
		t.Fatalf("scan = %q, want %q", got, want)
	}
}

// TestCompacted: reads of a snapshot, or of a Txn, at a revision etcd has
// compacted away fail with ErrCompacted.
func TestCompacted(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "a", "1")
	snap := kv.Snapshot()
	defer snap.Close()
	tx := kv.NewTxn()
	defer tx.Abort()
	if _, err := tx.Get([]byte("a")); err != nil {
		t.Fatal(err)
	}
	set(t, kv, "a", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := kv.client.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.client.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"snapshot Get":  func() error { _, err := snap.Get([]byte("a")); return err }(),
		"snapshot Scan": snap.Scan(nil, nil, func(k, v []byte) error { return nil }),
		"Txn Get":       func() error { _, err := tx.Get([]byte("b")); return err }(),
	} {
		if !errors.Is(err, ErrCompacted) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "compacted") {
			t.Fatalf("%s at a compacted revision: %v, want ErrCompacted", what, err)
		}
	}
	if v, err := kv.Snapshot().Get([]byte("a")); err != nil || string(v) != "2" {
		t.Fatalf("a new snapshot: %q, %v", v, err)
	}
}

// TestMemberFailures: with one member killed (the leader) commits and
// reads go on once the others have elected a new leader; with two stopped
// every call fails within RequestTimeout, and works again once they
// restart.
func TestMemberFailures(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	kv := open(t, Options{RequestTimeout: timeout})
	t.Cleanup(func() {
		if err := cluster.Restart(0, 1, 2); err != nil {
			t.Error(err)
		}
	})
	leader, err := cluster.WaitLeader()
	if err != nil {
		t.Fatal(err)
	}
	set(t, kv, "before", "1")

	// Kill the leader. A commit sent before the others have elected a new
	// one is forwarded to the dead leader and lost: it fails after
	// RequestTimeout with "outcome unknown", as etcd cannot tell (so it is
	// logged, not required). Once a leader is elected, commits and reads
	// go on with one member down.
	cluster.Kill(leader)
	start := time.Now()
	tx := kv.NewTxn()
	tx.Set([]byte("during the election"), []byte("1"))
	if err := tx.Commit(false); err != nil {
		if !errors.Is(err, syscall.EIO) || time.Since(start) > timeout+3*time.Second {
			t.Fatalf("commit during the election = %v after %v", err, time.Since(start))
		}
		t.Logf("commit during the election failed after %v: %v", time.Since(start), err)
	}
	if _, err := cluster.WaitLeader(); err != nil {
		t.Fatal(err)
	}
	t.Logf("new leader after %v", time.Since(start))
	set(t, kv, "one down", "1")
	if v, err := kv.Get([]byte("before")); err != nil || string(v) != "1" {
		t.Fatalf("Get with one member down: %q, %v", v, err)
	}
	if err := cluster.Restart(leader); err != nil {
		t.Fatal(err)
	}

	var down []int
	for i := range cluster.Members() {
		if i != leader && len(down) < 2 {
			down = append(down, i)
		}
	}
	cluster.Stop(down...)
	start = time.Now()
	tx = kv.NewTxn()
	tx.Set([]byte("two down"), []byte("1"))
	err = tx.Commit(false)
	elapsed := time.Since(start)
	if err == nil || !errors.Is(err, syscall.EIO) || errors.Is(err, ErrConflict) {
		t.Fatalf("commit without quorum = %v, want an I/O error", err)
	}
	// The bound leaves room for a loaded test machine: what matters is
	// that the commit gives up, and does so near RequestTimeout.
	if elapsed > timeout+3*time.Second {
		t.Fatalf("commit without quorum took %v, RequestTimeout is %v", elapsed, timeout)
	}
	// Usually the remaining member knows it has no leader and refuses the
	// commit before raft ("not applied"); if the timeout runs out while an
	// attempt is in flight, the cause is the deadline ("outcome unknown").
	if !errors.Is(err, context.DeadlineExceeded) && !(notProposed(err) && strings.Contains(err.Error(), "not applied")) {
		t.Fatalf("commit without quorum = %v, want the cause (a deadline, or no leader) in the chain", err)
	}
	t.Logf("commit without quorum failed after %v: %v", elapsed, err)
	start = time.Now()
	if _, err := kv.Get([]byte("before")); err == nil || !errors.Is(err, syscall.EIO) || time.Since(start) > timeout+3*time.Second {
		t.Fatalf("Get without quorum = %v after %v", err, time.Since(start))
	}
	if err := cluster.Restart(down...); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.WaitLeader(); err != nil {
		t.Fatal(err)
	}
	// The client may need a moment to reconnect; a bounded number of
	// attempts, each bounded by RequestTimeout.
	start = time.Now()
	for attempt := 1; ; attempt++ {
		tx := kv.NewTxn()
		tx.Set([]byte("restarted"), []byte("1"))
		err := tx.Commit(false)
		if err == nil {
			break
		}
		if attempt == 10 {
			t.Fatalf("commit after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("commit after the restart succeeded after %v", time.Since(start))
	for _, k := range []string{"before", "one down", "restarted"} {
		if _, err := kv.Get([]byte(k)); err != nil {
			t.Fatalf("Get(%s): %v", k, err)
		}
	}
}

// TestMergeRanges: a Txn's scanned ranges cost one comparison per run of
// overlapping or adjacent ranges.
func TestMergeRanges(t *testing.T) {
	got := mergeRanges([]keyRange{{"c", "d"}, {"a", "b"}, {"b", "b5"}, {"x", "z"}, {"c", "c5"}, {"b2", "c"}, {"y", "y1"}})
	if want := "[{a d} {x z}]"; fmt.Sprint(got) != want {
		t.Fatalf("mergeRanges = %v, want %s", got, want)
	}
	kv := open(t, Options{})
	set(t, kv, "a", "1", "b1", "1", "b2", "1")
	tx := kv.NewTxn().(*txn)
	defer tx.Abort()
	for range 3 {
		if err := tx.Scan([]byte("b"), []byte("c"), func(k, v []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Get([]byte("a")); err != nil {
		t.Fatal(err)
	}
	tx.Set([]byte("w"), nil)
	if _, _, req := tx.request(); len(req.Compare) != 4 {
		t.Fatalf("%d comparisons, want 4 (a, b1, b2 and the range [b, c))", len(req.Compare))
	}
}

func TestOptions(t *testing.T) {
	o := Options{Prefix: "", RequestTimeout: -1, MaxTxnOps: -1, MaxRequestBytes: 10, ScanPageSize: -5}
	err := o.Validate()
	for _, w := range []string{"Endpoints", "Prefix", "RequestTimeout", "MaxTxnOps", "MaxRequestBytes", "ScanPageSize"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("Validate = %v, does not name %s", err, w)
		}
	}
	if _, err := Open(o); err == nil {
		t.Fatal("Open with invalid options succeeded")
	}
	if err := (&Options{Endpoints: []string{"x"}, Prefix: "\xff\xff"}).Validate(); err == nil || !strings.Contains(err.Error(), "0xff") {
		t.Fatalf("Validate of an all-0xff prefix: %v", err)
	}
	o = Options{Endpoints: []string{"http://127.0.0.1:1"}, Prefix: "v/"}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	want := `etcdkv.Options{Endpoints: ["http://127.0.0.1:1"], Client: dial, TLS: false, Username: "", Password: none, Prefix: "v/", RequestTimeout: 5s, DialTimeout: 5s, MaxTxnOps: 128, MaxRequestBytes: 1572864, ScanPageSize: 1000, ReadCacheEntries: 131072}`
	if got := o.String(); got != want {
		t.Fatalf("String() = %s\nwant       %s", got, want)
	}
	// The password is never printed.
	o.Username, o.Password = "root", "s3cret"
	if got := o.String(); strings.Contains(got, "s3cret") || !strings.Contains(got, `Username: "root", Password: (set)`) {
		t.Errorf("String() = %s: shows the password, or not that it is set", got)
	}
	if err := (&Options{Endpoints: []string{"x"}, Prefix: "p/", Password: "pw"}).Validate(); err == nil || strings.Contains(err.Error(), "pw\"") {
		t.Errorf("a password without a user: %v", err)
	}
}

// TestParseURL: metadata URLs to endpoints and prefixes.
func TestParseURL(t *testing.T) {
	for _, c := range []struct{ url, eps, prefix string }{
		{"etcd://h1:2379,h2:2380,h3/sluice/vol1", "http://h1:2379 http://h2:2380 http://h3:2379", "sluice/vol1/"},
		{"etcds://[::1]:2379/p/", "https://[::1]:2379", "p/"},
		{"etcd://10.0.0.1//a", "http://10.0.0.1:2379", "a/"},
	} {
		eps, prefix, err := ParseURL(c.url)
		if err != nil || strings.Join(eps, " ") != c.eps || prefix != c.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v; want %s, %q", c.url, eps, prefix, err, c.eps, c.prefix)
		}
	}
	if _, _, err := ParseURL("etcd://root:s3cret@h1/p"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a URL with a password: %v (must be refused without showing it)", err)
	}
}

// TestCheckLimits: Check accepts a cluster whose limits are the KV's and
// refuses, naming the etcd flag, one with lower limits (here: a KV that
// asks for more than the test cluster's defaults).
func TestCheckLimits(t *testing.T) {
	if err := open(t, Options{}).Check(); err != nil {
		t.Fatalf("Check with etcd's default limits: %v", err)
	}
	err := open(t, Options{MaxTxnOps: 1000}).Check()
	if !errors.Is(err, ErrTxnTooLarge) || !strings.Contains(err.Error(), "--max-txn-ops=1000") {
		t.Errorf("Check with MaxTxnOps above the server's: %v", err)
	}
	err = open(t, Options{MaxRequestBytes: 4 << 20}).Check()
	if !errors.Is(err, ErrTxnTooLarge) || !strings.Contains(err.Error(), "--max-request-bytes=4194304") {
		t.Errorf("Check with MaxRequestBytes above the server's: %v", err)
	}
}
