package meta

import "errors"

// ErrNotFound is returned by Get for a key that is not present.
var ErrNotFound = errors.New("meta: not found")

// KV is the ordered key-value engine under the schema: the seam at which a
// distributed engine (TiKV, etcd, FoundationDB) can replace the embedded
// Pebble default, in the spirit of JuiceFS's tkv layer.
//
// Keys and values are byte strings ordered by bytes.Compare. Every method is
// safe for concurrent use. Reads see every committed transaction.
type KV interface {
	// Get returns a copy of the value stored at key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [start, end) in ascending order. fn must
	// not retain key or value. Iteration stops at the first error fn returns,
	// which Scan returns.
	Scan(start, end []byte, fn func(key, value []byte) error) error
	// NewTxn starts a write transaction.
	NewTxn() Txn
	// Snapshot returns a read-only view of the committed state as of the
	// call, unchanged by later commits (what a consistency check of a live
	// file system must read). Close it when done.
	Snapshot() Snapshot
	// Sync makes every committed transaction durable.
	Sync() error
	// Close releases the engine. Committed but unsynced transactions may be
	// lost only by a crash, never by Close.
	Close() error
}

// Reader is the read side shared by KV, Snapshot and Txn.
type Reader interface {
	Get(key []byte) ([]byte, error)
	Scan(start, end []byte, fn func(key, value []byte) error) error
}

// Snapshot is a consistent read-only view of a KV. It is safe for
// concurrent use.
type Snapshot interface {
	Reader
	Close() error
}

// Txn is a write transaction: its writes become visible and durable
// together, or not at all. Reads through a Txn see the committed state plus
// the transaction's own writes. A Txn is used by one goroutine.
type Txn interface {
	Get(key []byte) ([]byte, error)
	Scan(start, end []byte, fn func(key, value []byte) error) error
	Set(key, value []byte)
	Delete(key []byte)
	// Len returns the number of writes in the transaction.
	Len() int
	// Commit applies the writes atomically. With sync, it returns only once
	// they (and every earlier commit) are durable; without, they survive a
	// process crash but a machine crash may lose them, together with every
	// later commit (commits become durable in commit order).
	Commit(sync bool) error
	// Abort discards the writes. It is safe to call after Commit.
	Abort()
}

// EmptyHinter is implemented by a KV that caches what it reads (etcdkv,
// while it owns the volume). KnownEmpty tells it that no key in
// [start, end) exists now and that none will but through its own commits,
// so that a read there (a lookup of a name not yet created) can be answered
// without asking the backend; the caller must know it (a directory it has
// just created, its entries' range). A KV ignores what it cannot use.
type EmptyHinter interface {
	KnownEmpty(start, end []byte)
}
