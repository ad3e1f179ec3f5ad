package crashtest

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/meta"
)

// RecKV wraps the engine's metadata store (Pebble on a crashable in-memory
// FS) and records every committed transaction since the last sync, so that
// a crash can keep exactly the synced state plus a chosen prefix of the
// unsynced commits. Pebble's own MemFS.CrashClone keeps a random subset of
// unsynced 4 KiB blocks chosen while iterating a Go map, so two runs of the
// same seed can keep different commits; the prefix crash is deterministic.
//
// Commits and syncs are serialised by RecKV's mutex (the engine serialises
// its commits anyway), so that the log position and the MemFS's synced state
// always agree.
type RecKV struct {
	inner meta.KV
	fs    *vfs.MemFS // Immutable.

	mu struct {
		sync.Mutex
		// commits counts every commit ever made through this KV.
		commits uint64
		// synced is the number of commits known durable.
		synced uint64
		// log holds commits synced+1..commits, in order.
		log []kvCommit
	}
}

// kvCommit is one committed transaction: its writes in order.
type kvCommit []kvWrite

type kvWrite struct {
	key, value []byte
	del        bool
}

var _ CrashKV = (*RecKV)(nil)

// openRecKV opens the metadata database on fs (testvol.MetaDir).
func openRecKV(fs *vfs.MemFS) (*RecKV, error) {
	kv, err := meta.OpenPebble(testvol.MetaDir, meta.PebbleOptions{FS: fs})
	if err != nil {
		return nil, err
	}
	return &RecKV{inner: kv, fs: fs}, nil
}

func (k *RecKV) Get(key []byte) ([]byte, error) { return k.inner.Get(key) }
func (k *RecKV) Scan(start, end []byte, fn func(key, value []byte) error) error {
	return k.inner.Scan(start, end, fn)
}
func (k *RecKV) NewTxn() meta.Txn        { return &recTxn{rec: k, inner: k.inner.NewTxn()} }
func (k *RecKV) Snapshot() meta.Snapshot { return k.inner.Snapshot() }
func (k *RecKV) Close() error            { return k.inner.Close() }

// Sync makes every commit durable.
func (k *RecKV) Sync() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.inner.Sync(); err != nil {
		return err
	}
	k.syncedLocked()
	return nil
}

func (k *RecKV) syncedLocked() {
	k.mu.synced = k.mu.commits
	k.mu.log = nil
}

// Commits returns the number of commits made so far and the number known
// durable.
func (k *RecKV) Commits() (commits, synced uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.commits, k.mu.synced
}

// crashPrefix returns the metadata a crash now could leave if the first
// upTo commits survived, open: the synced state (MemFS.CrashClone keeping no
// unsynced byte, reopened, so Pebble recovers it) plus the unsynced commits
// up to upTo (at least the synced ones), re-applied and synced. It returns
// the prefix actually kept.
func (k *RecKV) crashPrefix(upTo uint64) (CrashKV, uint64, error) {
	k.mu.Lock()
	clone := k.fs.CrashClone(vfs.CrashCloneCfg{})
	upTo = min(max(upTo, k.mu.synced), k.mu.commits)
	redo := k.mu.log[:upTo-k.mu.synced]
	k.mu.Unlock()
	rk, err := openRecKV(clone)
	if err != nil {
		return nil, 0, fmt.Errorf("reopening the synced metadata: %w", err)
	}
	kv := rk.inner
	for _, c := range redo {
		t := kv.NewTxn()
		for _, w := range c {
			if w.del {
				t.Delete(w.key)
			} else {
				t.Set(w.key, w.value)
			}
		}
		if err := t.Commit(false); err != nil {
			kv.Close()
			return nil, 0, err
		}
	}
	if err := kv.Sync(); err != nil {
		kv.Close()
		return nil, 0, err
	}
	return rk, upTo, nil
}

// crashRandom returns a MemFS as Pebble's MemFS.CrashClone makes it: the
// synced data plus each unsynced 4 KiB block with probability pct%. It is
// not reproducible (see RecKV).
func (k *RecKV) crashRandom(pct int, seed uint64) *vfs.MemFS {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: newRand(seed, 0x6b76)})
}

// recTxn is a transaction of a recording KV (RecKV, EtcdRecKV): it keeps
// its writes, and its recorder commits it.
type recTxn struct {
	rec    recorder
	inner  meta.Txn
	writes kvCommit
}

// recorder commits a recTxn and records the commit.
type recorder interface {
	commitTxn(t *recTxn, sync bool) error
}

func (t *recTxn) Get(key []byte) ([]byte, error) { return t.inner.Get(key) }
func (t *recTxn) Scan(start, end []byte, fn func(key, value []byte) error) error {
	return t.inner.Scan(start, end, fn)
}
func (t *recTxn) Set(key, value []byte) {
	t.writes = append(t.writes, kvWrite{key: bytes.Clone(key), value: bytes.Clone(value)})
	t.inner.Set(key, value)
}
func (t *recTxn) Delete(key []byte) {
	t.writes = append(t.writes, kvWrite{key: bytes.Clone(key), del: true})
	t.inner.Delete(key)
}
func (t *recTxn) Len() int { return t.inner.Len() }
func (t *recTxn) Abort()   { t.inner.Abort() }

func (t *recTxn) Commit(sync bool) error { return t.rec.commitTxn(t, sync) }

func (k *RecKV) commitTxn(t *recTxn, sync bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := t.inner.Commit(sync); err != nil {
		return err
	}
	k.mu.commits++
	k.mu.log = append(k.mu.log, t.writes)
	t.writes = nil
	if sync {
		k.syncedLocked()
	}
	return nil
}
