package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// PebbleOptions configures OpenPebble.
type PebbleOptions struct {
	// FS is the filesystem Pebble stores its files in. Tests pass
	// vfs.NewCrashableMem() to simulate crashes. The default value is
	// vfs.Default (the host filesystem).
	FS vfs.FS
	// CreateIfMissing creates an empty database when dir holds none.
	// The default value is false: opening a missing database is an error.
	CreateIfMissing bool
	// ReadOnly opens the database without writing to it.
	// The default value is false.
	ReadOnly bool
}

// pebbleKV is the embedded KV engine.
type pebbleKV struct {
	db *pebble.DB
}

// OpenPebble opens (or with CreateIfMissing creates) the Pebble database in
// dir.
func OpenPebble(dir string, o PebbleOptions) (KV, error) {
	fs := o.FS
	if fs == nil {
		fs = vfs.Default
	}
	opts := &pebble.Options{
		FS:               fs,
		ErrorIfNotExists: !o.CreateIfMissing,
		ReadOnly:         o.ReadOnly,
		Logger:           quietLogger{},
		MemTableSize:     16 << 20,
		CacheSize:        32 << 20,
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		if errors.Is(err, pebble.ErrDBDoesNotExist) {
			return nil, fmt.Errorf("metadata database %s does not exist: %w", dir, ErrNotFound)
		}
		return nil, fmt.Errorf("metadata database %s: %w", dir, err)
	}
	return &pebbleKV{db: db}, nil
}

func (p *pebbleKV) Get(key []byte) ([]byte, error) { return getReader(p.db, key) }

// getReader returns a copy of the value at key in r, or ErrNotFound.
func getReader(r pebbleReader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(v)
	closer.Close()
	return out, nil
}

// pebbleReader is what a DB, a Snapshot and an indexed Batch share.
type pebbleReader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func scanReader(r pebbleReader, start, end []byte, fn func(k, v []byte) error) (err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}

func (p *pebbleKV) Scan(start, end []byte, fn func(k, v []byte) error) error {
	return scanReader(p.db, start, end, fn)
}

func (p *pebbleKV) NewTxn() Txn { return &pebbleTxn{db: p.db, b: p.db.NewIndexedBatch()} }

func (p *pebbleKV) Snapshot() Snapshot { return pebbleSnapshot{p.db.NewSnapshot()} }

type pebbleSnapshot struct{ s *pebble.Snapshot }

func (s pebbleSnapshot) Get(key []byte) ([]byte, error) { return getReader(s.s, key) }
func (s pebbleSnapshot) Scan(start, end []byte, fn func(k, v []byte) error) error {
	return scanReader(s.s, start, end, fn)
}
func (s pebbleSnapshot) Close() error { return s.s.Close() }

// Sync writes an empty log record with the Sync option: Pebble syncs the WAL
// through it, which makes every earlier commit durable. Concurrent Syncs
// share WAL syncs through Pebble's commit pipeline.
func (p *pebbleKV) Sync() error {
	b := p.db.NewBatch()
	defer b.Close()
	if err := b.LogData(nil, nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func (p *pebbleKV) Close() error { return p.db.Close() }

type pebbleTxn struct {
	db *pebble.DB
	b  *pebble.Batch
	n  int
}

func (t *pebbleTxn) Get(key []byte) ([]byte, error) { return getReader(t.b, key) }

func (t *pebbleTxn) Scan(start, end []byte, fn func(k, v []byte) error) error {
	return scanReader(t.b, start, end, fn)
}

func (t *pebbleTxn) Set(key, value []byte) { _ = t.b.Set(key, value, nil); t.n++ }
func (t *pebbleTxn) Delete(key []byte)     { _ = t.b.Delete(key, nil); t.n++ }
func (t *pebbleTxn) Len() int              { return t.n }

func (t *pebbleTxn) Commit(sync bool) error {
	if t.b == nil {
		return errors.New("meta: transaction already finished")
	}
	wo := pebble.NoSync
	if sync {
		wo = pebble.Sync
	}
	err := t.b.Commit(wo)
	t.b.Close()
	t.b = nil
	return err
}

func (t *pebbleTxn) Abort() {
	if t.b != nil {
		t.b.Close()
		t.b = nil
	}
}

// quietLogger drops Pebble's informational chatter; errors still reach the
// caller through return values.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
