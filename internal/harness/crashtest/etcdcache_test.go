package crashtest

import (
	"context"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicefs/sluice/meta/etcdkv"
)

// TestTargetedEtcdCacheReadsDuringCommit: an owned etcdkv.KV's read cache
// while one of its commits is applied in etcd but has not returned (its
// reply on the way). A KV.Get that reaches etcd sees the commit; a KV.Get
// after it of a key the commit wrote and the cache holds reads the key as
// it was before the commit, from the cache (the commit writes through
// only when it returns): the two Gets, one after the other, show a state
// etcd never held, which linearizable reads cannot (etcdkv's "Reads").
// The engine reads from other goroutines while it commits; whether its
// own locks keep it from such a pair of reads is not shown here. A Txn's
// reads, which go to etcd, must show one state (they did not when the
// cache served them, before 34dbcea).
func TestTargetedEtcdCacheReadsDuringCommit(t *testing.T) {
	c := newChecker(t)
	m := etcdMeta(t, "cache-inflight", campaignEtcdTimeout)
	hold := &holdKV{held: make(chan struct{}), release: make(chan struct{})}
	client := clientv3.NewCtxClient(context.Background())
	client.KV, client.Lease, client.Watcher = hookTxns{KV: m.Client.KV, hook: hold.commit}, m.Client.Lease, m.Client.Watcher
	defer client.Close()
	kv, err := etcdkv.Open(m.kvOptions(client, m.newPrefix()))
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	own, err := kv.Acquire(context.Background(), etcdkv.OwnerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release()

	commit := func(kvs ...string) error {
		tx := kv.NewTxn()
		for i := 0; i < len(kvs); i += 2 {
			tx.Set([]byte(kvs[i]), []byte(kvs[i+1]))
		}
		return tx.Commit(true)
	}
	// Ka, written and so cached.
	if err := commit("Ka", "1"); err != nil {
		t.Fatal(err)
	}
	// The commit in flight writes Ka, Kb and Kc (never read, so not
	// cached); etcd applies it, its reply is held.
	hold.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- commit("Ka", "2", "Kb", "2", "Kc", "2") }()
	<-hold.held

	// A KV.Get of Kb reaches etcd, which holds the commit: then Ka must
	// read as the commit left it too.
	get := func(key string) string {
		v, err := kv.Get([]byte(key))
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return string(v)
	}
	if b, a := get("Kb"), get("Ka"); b == "2" && a != "2" {
		c.errorf("KV.Get read Kb = 2 (the commit in flight applied), then Ka = %s (the read cache, before the commit)", a)
	}
	// A Txn whose first read (Kc) reaches etcd reads at a revision that
	// holds the commit: Ka must read as the commit left it at that
	// revision, and a read-only Txn must not commit anything else.
	tx := kv.NewTxn()
	cv, err := tx.Get([]byte("Kc"))
	if err != nil {
		t.Fatal(err)
	}
	av, err := tx.Get([]byte("Ka"))
	if err != nil {
		t.Fatal(err)
	}
	if string(cv) == "2" && string(av) != "2" {
		if err := tx.Commit(false); err == nil {
			c.errorf("a read-only Txn read Kc = 2 (the commit in flight applied) and Ka = %s (the read cache, before the commit) at one revision, and committed", av)
		} else {
			c.errorf("a Txn read Kc = 2 (the commit in flight applied) and Ka = %s (the read cache, before the commit) at one revision (its commit failed: %v)", av, err)
		}
	} else {
		tx.Abort()
	}

	close(hold.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a := get("Ka"); a != "2" {
		t.Errorf("Ka = %s after the commit returned", a)
	}
}

// holdKV holds the reply to the first transaction committed while armed,
// after etcd applied it: held is closed then, and the reply returns once
// release is closed.
type holdKV struct {
	armed         atomic.Bool
	held, release chan struct{}
}

// commit is the hook of the client's transactions (hookTxns).
func (k *holdKV) commit(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	resp, err := send()
	if k.armed.CompareAndSwap(true, false) {
		close(k.held)
		<-k.release
	}
	return resp, err
}
