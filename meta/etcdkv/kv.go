package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicefs/sluice/meta"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// KV is a meta.KV stored in etcd under one key prefix.
type KV struct {
	opts      Options // Immutable.
	client    *clientv3.Client
	ownClient bool   // Close closes client. Immutable.
	prefixEnd string // the end of the prefix's range. Immutable.

	// owner is the volume's Owner once Acquire took it: every commit is
	// then conditional on it.
	owner atomic.Pointer[Owner]
	// cache serves Get while the KV owns the volume.
	cache readCache
	stats counters
}

var _ meta.KV = (*KV)(nil)

// grpcOverheadBytes is what the client may send beyond MaxRequestBytes:
// etcd's gRPC server accepts messages that much larger than
// --max-request-bytes, and refuses the request itself when it is too large.
const grpcOverheadBytes = 512 << 10

// Open connects to the cluster (or uses o.Client) and returns the KV of the
// volume under o.Prefix. It does not contact the cluster: the first request
// does.
func Open(o Options) (*KV, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.Endpoints = append([]string(nil), o.Endpoints...)
	kv := &KV{opts: o, client: o.Client, prefixEnd: clientv3.GetPrefixRangeEnd(o.Prefix)}
	kv.cache.max = max(o.ReadCacheEntries, 0)
	if kv.client == nil {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:          o.Endpoints,
			DialTimeout:        o.DialTimeout,
			Logger:             o.Logger,
			MaxCallSendMsgSize: o.MaxRequestBytes + grpcOverheadBytes,
			TLS:                o.TLS,
			Username:           o.Username,
			Password:           o.Password,
		})
		if err != nil {
			return nil, fmt.Errorf("etcdkv: connecting to %v: %w", o.Endpoints, err)
		}
		kv.client, kv.ownClient = c, true
	}
	return kv, nil
}

// Options returns the options the KV runs with, defaults filled in.
func (kv *KV) Options() Options { return kv.opts }

// key returns the etcd key of k.
func (kv *KV) key(k []byte) string { return kv.opts.Prefix + string(k) }

// rangeEnd returns the etcd key that ends the range of keys before end;
// nil is the end of the volume's key space.
func (kv *KV) rangeEnd(end []byte) string {
	if end == nil {
		return kv.prefixEnd
	}
	return kv.key(end)
}

// strip returns the volume's key of etcd key k.
func (kv *KV) strip(k []byte) []byte { return k[len(kv.opts.Prefix):] }

func (kv *KV) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), kv.opts.RequestTimeout)
}

// readError converts the error of a read at rev (0: the latest revision).
func readError(op string, key []byte, rev int64, err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		err = fmt.Errorf("%w: reading at revision %d, which etcd has compacted away: %w", ErrCompacted, rev, err)
	}
	return opError(op, bytes.Clone(key), err)
}

// get reads key at rev (0: the latest revision, linearizably) and returns
// its value, the revision it was last modified at (0 when absent) and the
// revision read.
func (kv *KV) get(op string, key []byte, rev int64) (value []byte, modRev, readRev int64, err error) {
	ctx, cancel := kv.ctx()
	defer cancel()
	var opts []clientv3.OpOption
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	start := time.Now()
	resp, err := kv.client.Get(ctx, kv.key(key), opts...)
	kv.stats.observeRead(start, err)
	if err != nil {
		return nil, 0, 0, readError(op, key, rev, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, resp.Header.Revision, nil
	}
	e := resp.Kvs[0]
	value = e.Value
	if value == nil {
		value = []byte{}
	}
	return value, e.ModRevision, resp.Header.Revision, nil
}

// scan calls fn for each etcd key-value in the volume's range [start, end)
// at revision rev (0: the latest; the first page's revision is then used
// for the later ones), reading ScanPageSize keys at a time. It returns the
// revision read (0 if the range is empty and nothing was read).
func (kv *KV) scan(op string, start, end []byte, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return rev, nil
	}
	from, to := kv.key(start), kv.rangeEnd(end)
	for {
		ctx, cancel := kv.ctx()
		opts := []clientv3.OpOption{clientv3.WithRange(to), clientv3.WithLimit(int64(kv.opts.ScanPageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		start := time.Now()
		resp, err := kv.client.Get(ctx, from, opts...)
		kv.stats.observeRead(start, err)
		cancel()
		if err != nil {
			return rev, readError(op, kv.strip([]byte(from)), rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, e := range resp.Kvs {
			if reserved(kv.strip(e.Key)) {
				continue
			}
			if err := fn(e); err != nil {
				return rev, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Get returns the value at key, or meta.ErrNotFound. It is a linearizable
// read: from etcd or, while the KV owns the volume, from the read cache.
func (kv *KV) Get(key []byte) ([]byte, error) {
	k := kv.key(key)
	if reserved(key) {
		v, mod, _, err := kv.get("get", key, 0)
		return found(v, mod, err)
	}
	v, hit, gen := kv.cache.get(k)
	if hit && !kv.cacheExpired() {
		kv.stats.cacheHits.Add(1)
		if v == nil {
			return nil, meta.ErrNotFound
		}
		return v, nil
	}
	v, mod, rev, err := kv.get("get", key, 0)
	if err == nil {
		var cached []byte
		if mod != 0 {
			cached = bytes.Clone(v)
		}
		kv.cache.fill(gen, k, cached, rev)
	}
	return found(v, mod, err)
}

// found turns what get returned into Get's result: meta.ErrNotFound for a
// key that is absent (modified at revision 0).
func found(v []byte, modRev int64, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	if modRev == 0 {
		return nil, meta.ErrNotFound
	}
	return v, nil
}

// Scan calls fn for each key in [start, end) (nil end: to the end of the
// volume's keys) in ascending order, all read at one revision.
// While the KV owns the volume, a range it read whole before is served
// from the read cache.
func (kv *KV) Scan(start, end []byte, fn func(key, value []byte) error) error {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil
	}
	from, to := kv.key(start), kv.rangeEnd(end)
	es, hit, on, gen := kv.cache.scan(from, to)
	if hit && !kv.cacheExpired() {
		kv.stats.cacheHits.Add(1)
		for _, e := range es {
			if err := fn(kv.strip([]byte(e.key)), e.value); err != nil {
				return err
			}
		}
		return nil
	}
	// What the scan read, to fill the cache with if it reads the range
	// whole (and not too much of it).
	var got []cacheEntry
	whole := on
	rev, err := kv.scan("scan", start, end, 0, func(e *mvccpb.KeyValue) error {
		if whole {
			v := e.Value
			if v == nil {
				v = []byte{}
			}
			got = append(got, cacheEntry{key: string(e.Key), value: bytes.Clone(v)})
			whole = len(got) <= kv.cache.max/2
		}
		if err := fn(kv.strip(e.Key), e.Value); err != nil {
			whole = false
			return err
		}
		return nil
	})
	if err == nil && whole && rev != 0 {
		kv.cache.fillRange(gen, from, to, got, rev)
	}
	return err
}

var _ meta.EmptyHinter = (*KV)(nil)

// cacheExpired reports whether the ownership the read cache rests on is
// no longer provably held: past the Owner's deadline (last keep-alive
// answer + TTL - margin), as when etcd stops answering, the lease may have
// expired and another host may write, so reads go to etcd (and fail there
// while it does not answer), as the fence makes data I/O fail.
func (kv *KV) cacheExpired() bool {
	o := kv.owner.Load()
	return o == nil || !time.Now().Before(o.Deadline())
}

// KnownEmpty records in the read cache, while the KV owns the volume, that
// no key in [start, end) exists (meta.EmptyHinter): a Get there is then
// answered from memory. The caller must know it: the owner is the only
// writer, and the range must be empty after every commit that returned.
func (kv *KV) KnownEmpty(start, end []byte) {
	if end != nil && bytes.Compare(start, end) >= 0 {
		return
	}
	kv.cache.knownEmpty(kv.key(start), kv.rangeEnd(end))
}

// NewTxn starts an optimistic, serializable transaction (see the package
// doc).
func (kv *KV) NewTxn() meta.Txn { return newTxn(kv) }

// Snapshot returns a view of the committed state at the current revision.
// If the revision cannot be read, every read of the snapshot returns the
// error.
func (kv *KV) Snapshot() meta.Snapshot {
	ctx, cancel := kv.ctx()
	defer cancel()
	start := time.Now()
	resp, err := kv.client.Get(ctx, kv.opts.Prefix, clientv3.WithCountOnly())
	kv.stats.observeRead(start, err)
	if err != nil {
		return &snapshot{kv: kv, err: opError("snapshot", nil, err)}
	}
	return &snapshot{kv: kv, rev: resp.Header.Revision}
}

// Sync does nothing and returns nil: a commit returns only once a quorum of
// etcd members has it in its fsynced write-ahead log, so every committed
// transaction is already durable.
func (kv *KV) Sync() error { return nil }

// Close stops keeping the Owner's lease alive, if there is one (without
// releasing it: call Owner.Release first, or the lease expires after its
// TTL, as after a crash), and closes the client if Open dialled it. Every
// commit that returned is already durable in the cluster.
func (kv *KV) Close() error {
	if o := kv.owner.Load(); o != nil {
		o.stopLoop()
	}
	kv.cache.disable()
	if !kv.ownClient {
		return nil
	}
	if err := kv.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("etcdkv: closing the client: %w", err)
	}
	return nil
}

// snapshot reads at one revision. It is immutable.
type snapshot struct {
	kv  *KV
	rev int64
	err error // why the snapshot has no revision
}

func (s *snapshot) Get(key []byte) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	v, mod, _, err := s.kv.get("snapshot get", key, s.rev)
	return found(v, mod, err)
}

func (s *snapshot) Scan(start, end []byte, fn func(key, value []byte) error) error {
	if s.err != nil {
		return s.err
	}
	_, err := s.kv.scan("snapshot scan", start, end, s.rev, func(e *mvccpb.KeyValue) error {
		return fn(s.kv.strip(e.Key), e.Value)
	})
	return err
}

// Close does nothing: a snapshot holds nothing in etcd (which is why
// compaction can overtake it).
func (s *snapshot) Close() error { return nil }
