package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/kvtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The lease TTL of these tests: etcdtest's members have a 500 ms election
// timeout, so etcd grants leases of 1 s (1.5 election timeouts, rounded
// up to a second).
const testTTL = time.Second

// sharePrefix opens another KV on kv's prefix: another host.
func sharePrefix(t *testing.T, kv *KV) *KV {
	t.Helper()
	return open(t, Options{Prefix: kv.Options().Prefix})
}

func acquire(t *testing.T, kv *KV, mount string) *Owner {
	t.Helper()
	own, err := kv.Acquire(context.Background(), OwnerOptions{TTL: testTTL, Holder: Holder{Mount: mount}})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return own
}

// admin is a plain etcd client, for what an operator or another host
// does behind the KV's back.
func admin(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keySpace returns every etcd key under kv's prefix with its value.
func keySpace(t *testing.T, c *clientv3.Client, kv *KV) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), kv.Options().Prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range resp.Kvs {
		m[string(e.Key)] = string(e.Value)
	}
	return m
}

// TestAcquire: the first host takes the volume; a second is refused with
// the holder named, or waits as a standby and takes it once the first
// releases it, knowing the release was clean.
func TestAcquire(t *testing.T) {
	a := open(t, Options{})
	b := sharePrefix(t, a)
	ownA := acquire(t, a, "/mnt/a")
	if ownA.Clean() {
		t.Error("the first owner of a prefix mkfs never marked is clean")
	}
	if ownA.TTL() != testTTL || ownA.Margin() != testTTL/5 {
		t.Errorf("TTL %v, margin %v", ownA.TTL(), ownA.Margin())
	}
	if dl := time.Until(ownA.Deadline()); dl <= 0 || dl > testTTL {
		t.Errorf("deadline in %v, want within the TTL", dl)
	}
	_, err := b.Acquire(context.Background(), OwnerOptions{TTL: testTTL, Holder: Holder{Mount: "/mnt/b"}})
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrHeld) {
		t.Fatalf("second acquire: %v, want a *HeldError", err)
	}
	if want := "mounted on /mnt/a"; !strings.Contains(err.Error(), want) || held.Holder.Lease != ownA.ID() {
		t.Errorf("second acquire: %q (lease %x), want it to name the holder (%q, lease %x)", err, held.Holder.Lease, want, ownA.ID())
	}
	if h, err := a.OwnerOf(); err != nil || h == nil || h.Mount != "/mnt/a" || h.Lease != ownA.ID() {
		t.Errorf("OwnerOf: %+v, %v", h, err)
	}

	waiting := make(chan Holder, 1)
	got := make(chan error, 1)
	var ownB *Owner
	go func() {
		var err error
		ownB, err = b.Acquire(context.Background(), OwnerOptions{TTL: testTTL, Standby: true,
			OnWait: func(h Holder) { waiting <- h }})
		got <- err
	}()
	if h := <-waiting; h.Mount != "/mnt/a" {
		t.Errorf("the standby waits for %+v", h)
	}
	select {
	case err := <-got:
		t.Fatalf("the standby took a held volume: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	released := time.Now()
	if err := ownA.Release(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("standby: %v", err)
	}
	t.Logf("the standby took over %v after the release", time.Since(released).Round(time.Millisecond))
	if !ownB.Clean() {
		t.Error("after a Release, the new owner is not clean")
	}
	if err := ownA.Err(); err == nil {
		t.Error("a released Owner has no error")
	}
	if err := ownB.Release(); err != nil {
		t.Fatal(err)
	}
	if h, err := a.OwnerOf(); err != nil || h != nil {
		t.Errorf("OwnerOf after the release: %+v, %v", h, err)
	}
}

// TestStandbyAfterExpiry: a holder that stops keeping its lease alive (a
// crashed host) loses the volume after the TTL; the standby takes it and
// knows it must wait (not Clean).
func TestStandbyAfterExpiry(t *testing.T) {
	a := open(t, Options{})
	b := sharePrefix(t, a)
	ownA := acquire(t, a, "/mnt/a")
	got := make(chan error, 1)
	var ownB *Owner
	go func() {
		var err error
		ownB, err = b.Acquire(context.Background(), OwnerOptions{TTL: testTTL, Standby: true})
		got <- err
	}()
	ownA.stopLoop() // the crash: no more keep-alives
	crashed := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * testTTL):
		t.Fatal("the standby did not take over after the lease expired")
	}
	took := time.Since(crashed)
	t.Logf("the standby took over %v after the last keep-alive stopped (TTL %v)", took.Round(time.Millisecond), testTTL)
	if took < testTTL/2 {
		t.Errorf("took over after %v, before the lease could have expired", took)
	}
	if ownB.Clean() {
		t.Error("after an expiry, the new owner is clean")
	}
	if err := ownB.Release(); err != nil {
		t.Fatal(err)
	}

	// A standby's wait ends with its context.
	ownC := acquire(t, sharePrefix(t, a), "")
	defer ownC.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, OwnerOptions{TTL: testTTL, Standby: true}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("standby with a context that ends: %v", err)
	}
}

// TestCommitAfterLoss: once the lease is revoked (an operator's etcdctl
// lease revoke, or its expiry), the owner's next commit writes nothing and
// fails with ErrNotOwner and EIO, the Owner is lost (its watchers told),
// and so are later commits, without a round trip. A key deleted by hand
// under a live lease (a forced takeover) is noticed by the keep-alive.
func TestCommitAfterLoss(t *testing.T) {
	kv := open(t, Options{})
	own := acquire(t, kv, "")
	var lastErr error
	notified := make(chan struct{}, 8)
	own.Notify(func(_ time.Time, err error) {
		lastErr = err
		notified <- struct{}{}
	})
	<-notified
	set(t, kv, "I1", "one", "I2", "two")
	c := admin(t)
	before := keySpace(t, c, kv)
	if _, err := c.Revoke(context.Background(), clientv3.LeaseID(own.ID())); err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	if _, err := tx.Get([]byte("I1")); err != nil {
		t.Fatal(err)
	}
	tx.Set([]byte("I1"), []byte("changed"))
	tx.Set([]byte("I3"), []byte("new"))
	tx.Delete([]byte("I2"))
	err := tx.Commit(false)
	if !errors.Is(err, ErrNotOwner) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("commit after the revoke: %v, want ErrNotOwner and EIO", err)
	}
	t.Logf("commit after the revoke: %v", err)
	after := keySpace(t, c, kv)
	delete(before, kv.key([]byte(OwnerKey))) // the revoke deleted it
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("the refused commit changed the key space:\nbefore %v\nafter  %v", before, after)
	}
	select {
	case <-own.Lost():
	default:
		t.Fatal("the Owner does not know it lost the volume")
	}
	<-notified
	for len(notified) > 0 {
		<-notified
	}
	if !errors.Is(lastErr, ErrNotOwner) {
		t.Errorf("the watcher was told %v", lastErr)
	}
	reqs := kv.Stats().Requests
	tx = kv.NewTxn()
	tx.Set([]byte("I4"), []byte("x"))
	if err := tx.Commit(false); !errors.Is(err, ErrNotOwner) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("second commit: %v", err)
	}
	if s := kv.Stats(); s.Requests != reqs || s.NotOwner != 2 || s.Commits != 1 {
		t.Errorf("stats %+v: want the second refusal without a round trip", s)
	}
	if err := own.Release(); err != nil {
		t.Errorf("release of a lost Owner: %v", err)
	}

	// The same KV may own the volume again; then an operator deletes the
	// key under the live lease: the keep-alive notices.
	own = acquire(t, kv, "")
	set(t, kv, "I4", "four")
	if _, err := c.Delete(context.Background(), kv.key([]byte(OwnerKey))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-own.Lost():
		if err := own.Err(); !errors.Is(err, ErrNotOwner) || !strings.Contains(err.Error(), "deleted") {
			t.Errorf("lost with %v", err)
		}
	case <-time.After(5 * testTTL):
		t.Fatal("the keep-alive did not notice the owner key's deletion")
	}
	own.Release()
}

// TestTakeoverWait: after a lease revoked behind its owner's back, the
// next owner waits the longest of its own TTL + margin + I/O bound and the
// previous owner's, which LastOwnerKey recorded; after a clean release it
// does not wait.
func TestTakeoverWait(t *testing.T) {
	a := open(t, Options{})
	b := sharePrefix(t, a)
	ownA, err := a.Acquire(context.Background(), OwnerOptions{TTL: 3 * time.Second, Holder: Holder{IOBound: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t).Revoke(context.Background(), clientv3.LeaseID(ownA.ID())); err != nil {
		t.Fatal(err)
	}
	ownB := acquire(t, b, "")
	p := ownB.Previous()
	if p == nil || p.TTL != 3*time.Second || p.Margin != 600*time.Millisecond || p.IOBound != time.Second || !p.Released.IsZero() {
		t.Fatalf("previous owner %+v", p)
	}
	if w := ownB.TakeoverWait(300 * time.Millisecond); w != 4600*time.Millisecond {
		t.Errorf("takeover wait %v, want the previous owner's 3s + 600ms + 1s", w)
	}
	if w := ownB.TakeoverWait(5 * time.Second); w != testTTL+testTTL/5+5*time.Second {
		t.Errorf("takeover wait %v, want its own terms when longer", w)
	}
	if err := ownB.Release(); err != nil {
		t.Fatal(err)
	}
	ownC := acquire(t, sharePrefix(t, a), "")
	defer ownC.Release()
	if !ownC.Clean() || ownC.TakeoverWait(time.Hour) != 0 {
		t.Errorf("after a clean release: clean %v, wait %v", ownC.Clean(), ownC.TakeoverWait(time.Hour))
	}
}

// TestRenewal: the keep-alives move the deadline forward, from their send
// times, and tell the watchers.
func TestRenewal(t *testing.T) {
	kv := open(t, Options{})
	own := acquire(t, kv, "")
	defer own.Release()
	deadlines := make(chan time.Time, 64)
	own.Notify(func(dl time.Time, err error) {
		if err == nil {
			deadlines <- dl
		}
	})
	first := <-deadlines
	var last time.Time
	for range 3 {
		select {
		case last = <-deadlines:
		case <-time.After(5 * testTTL):
			t.Fatal("no renewal")
		}
	}
	if !last.After(first) {
		t.Errorf("deadline %v after renewals, was %v", last, first)
	}
	if age := time.Since(own.LastRenewal()); age > testTTL {
		t.Errorf("last renewal %v ago", age)
	}
	if sent, failed := own.KeepAlives(); sent < 3 || failed != 0 {
		t.Errorf("keep-alives: %d sent, %d failed", sent, failed)
	}
}

// TestOwnedConformance: an owned KV passes the conformance suite: the
// owner's comparison changes no result, and scans never show the
// reserved keys.
func TestOwnedConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) meta.KV {
		kv := open(t, Options{ScanPageSize: 3})
		own := acquire(t, kv, "")
		if err := own.Release(); err != nil { // leaves LastOwnerKey
			t.Fatal(err)
		}
		acquire(t, kv, "")
		return kv
	})
}

// TestOwnedLimits: the owner's comparison takes one of --max-txn-ops.
func TestOwnedLimits(t *testing.T) {
	kv := open(t, Options{MaxTxnOps: 8})
	acquire(t, kv, "")
	tx := kv.NewTxn()
	for i := range 8 {
		tx.Set([]byte(fmt.Sprint("I", i)), []byte("x"))
	}
	err := tx.Commit(false)
	if !errors.Is(err, ErrTxnTooLarge) || !strings.Contains(err.Error(), "less one for the owner's comparison") {
		t.Fatalf("8 writes with MaxTxnOps 8, owned: %v", err)
	}
	tx = kv.NewTxn()
	for i := range 7 {
		tx.Set([]byte(fmt.Sprint("I", i)), []byte("x"))
	}
	if err := tx.Commit(false); err != nil {
		t.Fatalf("7 writes: %v", err)
	}
}

// TestMarkReleased: mkfs marks a new volume released, so its first owner
// is clean; nobody may mark an owned volume; after a Revoke, the next
// owner is not clean.
func TestMarkReleased(t *testing.T) {
	kv := open(t, Options{})
	if err := kv.MarkReleased(Holder{Host: "mkfs"}); err != nil {
		t.Fatal(err)
	}
	own := acquire(t, kv, "")
	if !own.Clean() {
		t.Error("the first owner after MarkReleased is not clean")
	}
	if err := kv.MarkReleased(Holder{}); !errors.Is(err, ErrHeld) {
		t.Errorf("MarkReleased of an owned volume: %v", err)
	}
	// Revoke vouches for nothing: the next owner waits.
	if err := own.Revoke(); err != nil {
		t.Fatal(err)
	}
	own = acquire(t, kv, "")
	if own.Clean() {
		t.Error("the owner after a Revoke is clean")
	}
	own.Release()
}

// TestHealth: every member answers, one is the leader; an endpoint where
// nothing listens is reported, within the timeout.
func TestHealth(t *testing.T) {
	eps := append(cluster.Endpoints(), "http://127.0.0.1:1")
	kv, err := Open(Options{Endpoints: eps, Prefix: "health/", RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	start := time.Now()
	hs := kv.Health()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Health took %v", took)
	}
	leaders := 0
	for i, h := range hs {
		if h.Endpoint != eps[i] {
			t.Errorf("status %d is %s's, want %s's", i, h.Endpoint, eps[i])
		}
		if i < len(eps)-1 && (!h.Healthy || h.Version == "") {
			t.Errorf("member %s: %+v", h.Endpoint, h)
		}
		if h.Leader {
			leaders++
		}
	}
	if last := hs[len(hs)-1]; last.Healthy || last.Error == "" {
		t.Errorf("a dead endpoint: %+v", last)
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v", leaders, hs)
	}
}

// TestTransient: a standby waits through the errors of an etcd that does
// not answer, not through a refusal.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{opError("acquire", nil, fmt.Errorf("granting a lease: %w", context.DeadlineExceeded)), true},
		{opError("acquire", nil, rpctypes.ErrGRPCNoLeader), true},
		{opError("acquire", nil, status.Error(codes.Unavailable, "connection refused")), true},
		{opError("acquire", nil, rpctypes.ErrGRPCPermissionDenied), false},
		{opError("acquire", nil, errors.New("the owner key exists and cannot be read")), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v", c.err, got)
		}
	}
}

// TestOwnedCommitAtMostOnce: an owned commit sent twice (as Commit sends
// one again after an attempt that got no answer) applies once: the second
// is refused by the guard with the owner key still carrying the lease,
// which says the first was applied, at the guard's revision. A commit
// whose guard moved with nothing unanswered (another writer of
// LastOwnerKey) fails with ErrConflict, writing nothing, and the next one
// goes through.
func TestOwnedCommitAtMostOnce(t *testing.T) {
	kv := open(t, Options{})
	own := acquire(t, kv, "/mnt/once")
	defer own.Release()
	tx := kv.NewTxn().(*txn)
	tx.Set([]byte("k"), []byte("1"))
	own.commit.Lock()
	cmps, ops, _ := tx.request()
	first, _, err := tx.send(context.Background(), own, cmps, ops)
	if err != nil || !first.Succeeded {
		own.commit.Unlock()
		t.Fatalf("first send: %+v, %v", first, err)
	}
	again, _, err := tx.send(context.Background(), own, cmps, ops)
	own.commit.Unlock()
	if err != nil || again.Succeeded {
		t.Fatalf("the same commit sent again: %+v, %v; want it refused by the guard", again, err)
	}
	if ours, rev := own.refusal(again); !ours || rev != first.Header.Revision {
		t.Fatalf("refusal: owner key ours %v, guard at revision %d; want ours, at the first send's %d", ours, rev, first.Header.Revision)
	}
	c := admin(t)
	resp, err := c.Get(context.Background(), kv.key([]byte("k")))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Fatalf("k after two sends: %+v, %v; want written once", resp, err)
	}

	own.commit.Lock()
	own.commit.guardRev = first.Header.Revision // what Commit records
	own.commit.Unlock()
	set(t, kv, "k", "2")
	if _, err := c.Put(context.Background(), kv.key([]byte(LastOwnerKey)), "{}"); err != nil {
		t.Fatal(err)
	}
	tx2 := kv.NewTxn()
	tx2.Set([]byte("k"), []byte("3"))
	if err := tx2.Commit(false); !errors.Is(err, ErrConflict) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("commit after another writer moved the guard: %v, want ErrConflict", err)
	}
	if v, err := kv.Get([]byte("k")); err != nil || string(v) != "2" {
		t.Fatalf("k = %q, %v; want 2 (the refused commit wrote nothing)", v, err)
	}
	set(t, kv, "k", "4")
}
