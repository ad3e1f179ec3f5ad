package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicefs/sluice/meta"
)

// getN reads key n times and returns the round trips that read keys.
func getN(t *testing.T, kv *KV, key string, n int, want string) uint64 {
	t.Helper()
	before := kv.Stats().Reads
	for range n {
		v, err := kv.Get([]byte(key))
		switch {
		case want == "" && !errors.Is(err, meta.ErrNotFound):
			t.Fatalf("Get(%s) = %q, %v; want not found", key, v, err)
		case want != "" && (err != nil || string(v) != want):
			t.Fatalf("Get(%s) = %q, %v; want %q", key, v, err, want)
		}
	}
	return kv.Stats().Reads - before
}

// TestReadCache: while the KV owns the volume, Get is served from the
// cache, filled by the first read of a key (present or absent) and
// updated by the owner's commits, without a round trip; without the
// ownership, or after it is released, every Get reads etcd.
func TestReadCache(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "a", "1")
	if n := getN(t, kv, "a", 5, "1"); n != 5 {
		t.Fatalf("not owned: 5 Gets made %d reads, want 5", n)
	}
	own := acquire(t, kv, "")
	if n := getN(t, kv, "a", 5, "1"); n != 1 {
		t.Errorf("owned: 5 Gets of a key read before made %d reads, want 1", n)
	}
	if n := getN(t, kv, "b", 5, ""); n != 1 {
		t.Errorf("owned: 5 Gets of an absent key made %d reads, want 1", n)
	}
	tx := kv.NewTxn()
	tx.Set([]byte("b"), []byte("2"))
	tx.Delete([]byte("a"))
	tx.Set([]byte("c"), nil)
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "", "b": "2"} {
		if n := getN(t, kv, k, 3, want); n != 0 {
			t.Errorf("owned: Gets of %s after the owner's commit made %d reads, want 0", k, n)
		}
	}
	before := kv.Stats().Reads
	if v, err := kv.Get([]byte("c")); err != nil || len(v) != 0 {
		t.Errorf("Get(c) = %q, %v; want an empty value", v, err)
	}
	if kv.Stats().Reads != before {
		t.Error("Get(c) after the owner's commit read etcd")
	}
	// A value handed out is the caller's.
	v, _ := kv.Get([]byte("b"))
	v[0] = 'x'
	if n := getN(t, kv, "b", 1, "2"); n != 0 {
		t.Error("Get(b) read etcd")
	}
	if err := own.Release(); err != nil {
		t.Fatal(err)
	}
	if n := getN(t, kv, "b", 3, "2"); n != 3 {
		t.Errorf("released: 3 Gets made %d reads, want 3", n)
	}
}

// TestReadCacheBounded: the cache holds at most ReadCacheEntries keys, and
// is off with a negative bound.
func TestReadCacheBounded(t *testing.T) {
	kv := open(t, Options{ReadCacheEntries: 4})
	acquire(t, kv, "")
	for i := range 10 {
		set(t, kv, fmt.Sprint("k", i), "v")
	}
	if n := kv.cache.len(); n > 4 {
		t.Errorf("cache of 4 holds %d keys", n)
	}
	for i := range 10 {
		getN(t, kv, fmt.Sprint("k", i), 1, "v")
	}
	off := open(t, Options{ReadCacheEntries: -1})
	if _, err := off.Acquire(context.Background(), OwnerOptions{TTL: testTTL}); err != nil {
		t.Fatal(err)
	}
	set(t, off, "a", "1")
	if n := getN(t, off, "a", 3, "1"); n != 3 {
		t.Errorf("no cache: 3 Gets made %d reads, want 3", n)
	}
}

// TestReadCacheAfterLoss: once the volume is lost (here: the owner key
// deleted behind the KV's back and a commit refused), Get reads etcd
// again, and sees what the new writer wrote.
func TestReadCacheAfterLoss(t *testing.T) {
	kv := open(t, Options{})
	acquire(t, kv, "")
	set(t, kv, "a", "1")
	getN(t, kv, "a", 1, "1")
	c := admin(t)
	if _, err := c.Delete(context.Background(), kv.Options().Prefix+OwnerKey); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(context.Background(), kv.Options().Prefix+"a", "2"); err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	tx.Set([]byte("x"), []byte("y"))
	if err := tx.Commit(false); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("commit after the owner key was deleted: %v", err)
	}
	if n := getN(t, kv, "a", 2, "2"); n != 2 {
		t.Errorf("lost: 2 Gets made %d reads, want 2", n)
	}
}

// scanKeys scans [start, end) and returns the keys=values and the round
// trips that read keys.
func scanKeys(t *testing.T, kv *KV, start, end string) (string, uint64) {
	t.Helper()
	before := kv.Stats().Reads
	var out []string
	if err := kv.Scan([]byte(start), []byte(end), func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out), kv.Stats().Reads - before
}

// TestReadCacheRanges: while the KV owns the volume, a range read whole
// is served from the cache, and so are Gets of keys absent from it; the
// owner's commits into it keep it complete; a scan its callback stopped
// leaves it to etcd; evicting one of its keys makes it incomplete.
func TestReadCacheRanges(t *testing.T) {
	kv := open(t, Options{ScanPageSize: 2})
	set(t, kv, "a1", "x", "a2", "y", "a3", "", "b", "z")
	acquire(t, kv, "")
	if got, n := scanKeys(t, kv, "a", "b"); got != "[a1=x a2=y a3=]" || n != 2 {
		t.Fatalf("first scan: %s with %d reads, want 2 pages", got, n)
	}
	if got, n := scanKeys(t, kv, "a", "b"); got != "[a1=x a2=y a3=]" || n != 0 {
		t.Errorf("second scan: %s with %d reads, want 0", got, n)
	}
	if got, n := scanKeys(t, kv, "a2", "a3"); got != "[a2=y]" || n != 0 {
		t.Errorf("scan inside: %s with %d reads, want 0", got, n)
	}
	if n := getN(t, kv, "a0", 2, ""); n != 0 {
		t.Errorf("Gets of an absent key in a complete range made %d reads", n)
	}
	tx := kv.NewTxn()
	tx.Set([]byte("a0"), []byte("w"))
	tx.Delete([]byte("a2"))
	if err := tx.Commit(false); err != nil {
		t.Fatal(err)
	}
	if got, n := scanKeys(t, kv, "a", "b"); got != "[a0=w a1=x a3=]" || n != 0 {
		t.Errorf("scan after the owner's commit: %s with %d reads, want 0", got, n)
	}
	// A range beyond the complete one reads etcd.
	if got, n := scanKeys(t, kv, "a", "c"); got != "[a0=w a1=x a3= b=z]" || n == 0 {
		t.Errorf("wider scan: %s with %d reads", got, n)
	}
	// A scan stopped by its callback fills nothing.
	stopped := open(t, Options{})
	set(t, stopped, "k1", "1", "k2", "2")
	acquire(t, stopped, "")
	stop := errors.New("stop")
	if err := stopped.Scan([]byte("k"), []byte("l"), func(k, v []byte) error { return stop }); err != stop {
		t.Fatal(err)
	}
	if _, n := scanKeys(t, stopped, "k", "l"); n == 0 {
		t.Error("a range whose scan was stopped was served from the cache")
	}
	// Eviction of a present key drops the range.
	small := open(t, Options{ReadCacheEntries: 4})
	set(t, small, "r1", "1", "r2", "2")
	acquire(t, small, "")
	scanKeys(t, small, "r", "s")
	if _, n := scanKeys(t, small, "r", "s"); n != 0 {
		t.Fatalf("second scan made %d reads", n)
	}
	set(t, small, "s1", "1", "s2", "2", "s3", "3") // the first key, r1, goes for s3
	if got, n := scanKeys(t, small, "r", "s"); got != "[r1=1 r2=2]" || n == 0 {
		t.Errorf("scan after eviction: %s with %d reads, want a read", got, n)
	}
}

// TestKnownEmpty: while the KV owns the volume, a range declared empty
// answers Gets in it from memory (absent, or what the owner's commits put
// there since); without the ownership the hint is ignored.
func TestKnownEmpty(t *testing.T) {
	kv := open(t, Options{})
	kv.KnownEmpty([]byte("d/"), []byte("d0"))
	if n := getN(t, kv, "d/x", 2, ""); n != 2 {
		t.Errorf("not owned: 2 Gets in a range declared empty made %d reads, want 2", n)
	}
	acquire(t, kv, "")
	set(t, kv, "other", "1") // the owner has committed
	kv.KnownEmpty([]byte("d/"), []byte("d0"))
	if n := getN(t, kv, "d/x", 3, ""); n != 0 {
		t.Errorf("owned: 3 Gets in a range declared empty made %d reads, want 0", n)
	}
	set(t, kv, "d/y", "1")
	if n := getN(t, kv, "d/y", 1, "1"); n != 0 {
		t.Errorf("Get of a key committed into the range made %d reads, want 0", n)
	}
	var keys []string
	before := kv.Stats().Reads
	if err := kv.Scan([]byte("d/"), []byte("d0"), func(k, _ []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(keys) != "[d/y]" || kv.Stats().Reads != before {
		t.Errorf("Scan of the range = %v with %d reads; want [d/y] from memory", keys, kv.Stats().Reads-before)
	}
}

// TestReadCacheFullFills: a cache with no room for a fill empties itself
// (a new generation) rather than dropping some keys: a range read whole
// that holds the cache's lowest keys stays whole (it once evicted its own
// keys and was still recorded complete, so a Get of one answered not
// found), and a fill read before a commit whose entry the emptying took
// cannot put back the state before it.
func TestReadCacheFullFills(t *testing.T) {
	c := readCache{max: 4}
	c.enable()
	_, _, gen := c.get("z")
	for _, k := range []string{"z1", "z2", "z3", "z4"} {
		c.fill(gen, k, []byte("v"), 1)
	}
	_, _, gen = c.get("a")
	c.fillRange(gen, "a", "b", []cacheEntry{{key: "a1", value: []byte("1")}, {key: "a2", value: []byte("2")}}, 3)
	if got, hit, _, _ := c.scan("a", "b"); hit && len(got) != 2 {
		t.Errorf("scan [a,b) from the cache: %d keys, want 2", len(got))
	}
	if v, hit, _ := c.get("a1"); hit && v == nil {
		t.Error("get(a1) hit as absent; a1 is present")
	}

	c = readCache{max: 2}
	c.enable()
	_, _, gen = c.get("D")                                       // a Scan misses and reads etcd at 4
	c.committed([]write{{key: "Dx", value: []byte("1")}}, "", 5) // a commit at 5 creates Dx
	c.fill(gen, "Zy", []byte("y"), 6)
	c.fill(gen, "Zz", []byte("z"), 6)  // full
	c.fillRange(gen, "D", "E", nil, 4) // the Scan's fill, read at 4
	if v, hit, _ := c.get("Dx"); hit && v == nil {
		t.Error("Dx, created at revision 5, cached as absent")
	}
}

// TestReadCacheFullKV: TestReadCacheFullFills through the KV: Scans of a
// range holding the cache's lowest keys, and Gets of them, see them all.
func TestReadCacheFullKV(t *testing.T) {
	kv := open(t, Options{ReadCacheEntries: 4})
	set(t, kv, "A1", "1", "A2", "2", "Z1", "z", "Z2", "z", "Z3", "z", "Z4", "z")
	acquire(t, kv, "")
	for _, k := range []string{"Z1", "Z2", "Z3", "Z4"} {
		getN(t, kv, k, 1, "z")
	}
	for i := range 3 {
		n := 0
		if err := kv.Scan([]byte("A"), []byte("B"), func(k, v []byte) error { n++; return nil }); err != nil || n != 2 {
			t.Fatalf("Scan %d of [A,B): %d keys, %v; want 2", i, n, err)
		}
	}
	getN(t, kv, "A1", 1, "1")
}

// TestReadCacheAfterDeadline: past the Owner's deadline (etcd not
// answering its keep-alives, so the lease may have expired and another
// host may write) the cache serves nothing: reads go to etcd.
func TestReadCacheAfterDeadline(t *testing.T) {
	kv := open(t, Options{})
	set(t, kv, "a", "1")
	own := acquire(t, kv, "")
	if n := getN(t, kv, "a", 3, "1"); n != 1 {
		t.Fatalf("owned: 3 Gets made %d reads, want 1", n)
	}
	own.mu.Lock()
	own.mu.deadline = time.Now().Add(-time.Second) // as if keep-alives had gone unanswered
	own.mu.Unlock()
	if n := getN(t, kv, "a", 2, "1"); n != 2 {
		t.Errorf("past the deadline: 2 Gets made %d reads, want 2", n)
	}
}

// TestReadCachePending: while an owned commit is in flight (etcd may hold
// it already), the cache serves none of its keys, by Get or by a Scan of a
// range holding one: a read from memory must not follow a read from etcd
// that saw the commit with the state before it.
func TestReadCachePending(t *testing.T) {
	c := readCache{max: 16}
	c.enable()
	_, _, gen := c.get("a")
	c.fillRange(gen, "a", "b", []cacheEntry{{key: "a1", value: []byte("1")}}, 3)
	if _, hit, _ := c.get("a1"); !hit {
		t.Fatal("a1 not cached")
	}
	c.begin([]string{"a1", "a2", "c"})
	if _, hit, _ := c.get("a1"); hit {
		t.Error("get of a key of the commit in flight served from memory")
	}
	if _, hit, _ := c.get("a3"); !hit {
		t.Error("get of a key absent from a complete range, not in the commit, missed")
	}
	if _, hit, _, _ := c.scan("a", "b"); hit {
		t.Error("scan of a range holding keys of the commit in flight served from memory")
	}
	c.committed([]write{{key: "a1", value: []byte("2")}, {key: "a2", value: []byte("2")}, {key: "c", value: []byte("2")}}, "", 4)
	c.end()
	if v, hit, _ := c.get("a1"); !hit || string(v) != "2" {
		t.Errorf("get(a1) after the commit = %q, %v; want 2 from memory", v, hit)
	}
}
