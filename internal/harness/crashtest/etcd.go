package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

// EtcdMeta keeps the metadata of the Envs made with it (EnvConfig.Etcd) in
// an etcd cluster, each volume under a prefix of its own (Prefix followed
// by a sequence number), owned as a mount owns it (etcdkv.KV.Acquire). A
// crash image's metadata is a copy, under a new prefix, of the volume's
// keys as etcd held them at the revision of the last commit the crash
// keeps, without the owner key (EtcdRecKV). It is safe for concurrent use.
type EtcdMeta struct {
	// Client is a connected client of the cluster, which every volume's
	// KV shares. Its MaxCallSendMsgSize must exceed
	// etcdkv.VolumeMaxRequestBytes, and the members must run with
	// --max-txn-ops and --max-request-bytes of at least
	// etcdkv.VolumeMaxTxnOps and etcdkv.VolumeMaxRequestBytes. Required.
	Client *clientv3.Client
	// Prefix begins every volume's prefix. The default value is
	// "crashtest/".
	Prefix string
	// RequestTimeout bounds every etcd call of the volumes' KVs
	// (etcdkv.Options.RequestTimeout) and of the harness. The default
	// value is etcdkv.DefaultRequestTimeout.
	RequestTimeout time.Duration
	// LeaseTTL is the time to live of the lease with which each volume's
	// KV owns its volume (etcdkv.OwnerOptions.TTL). The default value is
	// etcdkv.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// LoseReplyEvery, if not 0, loses etcd's reply to the first attempt
	// of every LoseReplyEvery-th commit of each volume's KV (of commits
	// n*LoseReplyEvery), after etcd applied (or refused) the transaction:
	// as when the member a commit went through stops, or the deadline
	// passes, once raft has applied it. etcdkv then sends the commit again
	// under its guard, which refuses it, and resolves it as applied by
	// the attempt whose reply was lost (etcdkv's "Outcomes"). The default
	// value is 0: every reply arrives.
	LoseReplyEvery uint64

	seq atomic.Uint64
	// stats adds up the etcdkv.Stats of the KVs closed so far.
	stats struct {
		sync.Mutex
		etcdkv.Stats
		// Resolved counts the commits that etcdkv resolved as applied by
		// an attempt that got no answer (the guard moved); Resent those
		// it sent more than once.
		Resolved, Resent uint64
	}
}

// EtcdStats is what the KVs of an EtcdMeta did, added up over those
// closed so far.
type EtcdStats struct {
	etcdkv.Stats
	Resolved, Resent uint64
}

// Stats returns the counters of the KVs closed so far.
func (m *EtcdMeta) Stats() EtcdStats {
	m.stats.Lock()
	defer m.stats.Unlock()
	return EtcdStats{Stats: m.stats.Stats, Resolved: m.stats.Resolved, Resent: m.stats.Resent}
}

func (m *EtcdMeta) addStats(s etcdkv.Stats, resolved, resent uint64) {
	m.stats.Lock()
	defer m.stats.Unlock()
	t := &m.stats.Stats
	t.Requests += s.Requests
	t.Errors += s.Errors
	t.Commits += s.Commits
	t.Conflicts += s.Conflicts
	t.NotOwner += s.NotOwner
	t.Retries += s.Retries
	t.Reads += s.Reads
	t.CommitRequests += s.CommitRequests
	t.CacheHits += s.CacheHits
	m.stats.Resolved += resolved
	m.stats.Resent += resent
}

// copyTxnOps and copyTxnBytes bound one transaction of the copy of a
// volume's keys into a crash image's prefix.
const (
	copyTxnOps   = 1000
	copyTxnBytes = 1 << 20
)

func (m *EtcdMeta) timeout() time.Duration {
	if m.RequestTimeout == 0 {
		return etcdkv.DefaultRequestTimeout
	}
	return m.RequestTimeout
}

// newPrefix returns a prefix no volume of m has used.
func (m *EtcdMeta) newPrefix() string {
	p := m.Prefix
	if p == "" {
		p = "crashtest/"
	}
	return fmt.Sprintf("%s%d/", p, m.seq.Add(1))
}

func (m *EtcdMeta) kvOptions(c *clientv3.Client, prefix string) etcdkv.Options {
	return etcdkv.Options{Client: c, Prefix: prefix, RequestTimeout: m.timeout(),
		MaxTxnOps: etcdkv.VolumeMaxTxnOps, MaxRequestBytes: etcdkv.VolumeMaxRequestBytes}
}

// format makes the memory device cfg describes and formats a volume on it
// with its metadata under a new prefix, as mkfs does (a released
// LastOwnerKey, so that the first owner need not wait); it returns the
// device and the volume's recording KV, which owns the volume.
func (m *EtcdMeta) format(cfg EnvConfig) (*memdev.Device, CrashKV, error) {
	mem, err := memdev.New(cfg.DeviceBytes, memdev.Options{IOUnit: cfg.IOUnit})
	if err != nil {
		return nil, nil, err
	}
	prefix := m.newPrefix()
	rk, err := func() (*EtcdRecKV, error) {
		kv, err := etcdkv.Open(m.kvOptions(m.Client, prefix))
		if err != nil {
			return nil, err
		}
		defer kv.Close()
		if err := testvol.FormatOnWith(mem, kv, cfg.BlockSize, cfg.DataChecksums); err != nil {
			return nil, fmt.Errorf("etcd prefix %q: %w", prefix, err)
		}
		if err := kv.MarkReleased(etcdkv.Holder{Mount: "(crashtest mkfs)"}); err != nil {
			return nil, err
		}
		return m.open(prefix, 0)
	}()
	if err != nil {
		mem.Close()
		return nil, nil, err
	}
	return mem, rk, nil
}

// read returns the keys under prefix (the prefix stripped) with their
// values as of revision rev (0: now, read linearizably), LastOwnerKey's
// record (nil if absent), and the revision read.
func (m *EtcdMeta) read(prefix string, rev int64) (map[string][]byte, *mvccpb.KeyValue, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout())
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := m.Client.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("reading etcd prefix %q at revision %d: %w", prefix, rev, err)
	}
	out := make(map[string][]byte, len(resp.Kvs))
	var last *mvccpb.KeyValue
	for _, e := range resp.Kvs {
		k := string(e.Key[len(prefix):])
		out[k] = e.Value
		if k == etcdkv.LastOwnerKey {
			last = e
		}
	}
	return out, last, resp.Header.Revision, nil
}

// restore writes kvs under a new prefix, without the owner key, and opens
// a recording KV there, which takes the volume over: the metadata of a
// crash image. The owner key's absence is the crashed owner's lease
// expired; LastOwnerKey, copied as it is, tells the next owner the
// crashed one's terms and that it did not release the volume.
//
// crashed is the crashed owner's lease: the new owner's Previous must name
// it (names derived from it, such as package volume's persistent
// reservation key, outlive it for the next owners).
func (m *EtcdMeta) restore(kvs map[string][]byte, crashed int64) (*EtcdRecKV, error) {
	if _, ok := kvs[etcdkv.LastOwnerKey]; !ok {
		return nil, fmt.Errorf("the crash image's metadata has no %s: the next owner would not know the last one's terms", etcdkv.LastOwnerKey)
	}
	prefix := m.newPrefix()
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.timeout())
		defer cancel()
		if _, err := m.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("copying the crash image's metadata to etcd prefix %q: %w", prefix, err)
		}
		ops, size = nil, 0
		return nil
	}
	keys := make([]string, 0, len(kvs))
	for k := range kvs {
		if k != etcdkv.OwnerKey {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := kvs[k]
		if len(ops) == copyTxnOps || size+len(prefix)+len(k)+len(v) > copyTxnBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		ops = append(ops, clientv3.OpPut(prefix+k, string(v)))
		size += len(prefix) + len(k) + len(v)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return m.open(prefix, crashed)
}

// open returns the recording KV of the volume under prefix, owning the
// volume, its log starting from what the prefix holds once owned. With
// crashed, the lease of a crash image's last owner, that owner must not
// have released the volume: the new owner takes it over as after an
// expired lease, knowing that owner's lease and terms.
func (m *EtcdMeta) open(prefix string, crashed int64) (*EtcdRecKV, error) {
	txns := &revKV{}
	c := clientv3.NewCtxClient(context.Background())
	c.KV, c.Lease, c.Watcher = hookTxns{KV: m.Client.KV, hook: txns.commit}, m.Client.Lease, m.Client.Watcher
	kv, err := etcdkv.Open(m.kvOptions(c, prefix))
	if err != nil {
		c.Close()
		return nil, err
	}
	fail := func(err error) (*EtcdRecKV, error) {
		kv.Close()
		c.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout())
	defer cancel()
	own, err := kv.Acquire(ctx, etcdkv.OwnerOptions{TTL: m.LeaseTTL, Holder: etcdkv.Holder{Mount: "crashtest " + prefix, IOBound: volume.DefaultIOBound}})
	if err != nil {
		return fail(fmt.Errorf("taking the volume's ownership: %w", err))
	}
	if prev := own.Previous(); crashed != 0 && (own.Clean() || prev == nil || prev.TTL == 0 || prev.Lease != crashed) {
		own.Revoke()
		return fail(fmt.Errorf("taking a crash image's volume over: its last owner's record %+v does not say that the owner of lease %x, on known terms, ended uncleanly (takeover wait %v)",
			prev, crashed, own.TakeoverWait(volume.DefaultIOBound)))
	}
	base, last, rev, err := m.read(prefix, 0)
	if err != nil {
		own.Revoke()
		return fail(err)
	}
	if last == nil {
		own.Revoke()
		return fail(fmt.Errorf("etcd prefix %q holds no %s once owned", prefix, etcdkv.LastOwnerKey))
	}
	rk := &EtcdRecKV{inner: kv, owner: own, meta: m, prefix: prefix, client: c, txns: txns, base: base, baseGuard: last.Version}
	rk.mu.revs = []int64{rev}
	return rk, nil
}

// EtcdRecKV is the etcd counterpart of RecKV: the engine's metadata in
// etcd (etcdkv) under the volume's prefix, owned as a mount owns it (an
// etcdkv.Owner: every commit owner-guarded, the read cache on), every
// commit recorded with its writes and the etcd revision it made. An etcd
// commit is durable on a quorum once it returns, and Sync does nothing;
// the KV counts the commits the engine synced (by Sync or a synced
// commit) all the same, so that the crash points check the engine's
// promises as they do on Pebble.
//
// A commit's revision is the one etcd answered it with, or, for a commit
// etcdkv resolved as applied by an attempt that got no answer (the guard,
// LastOwnerKey, moved while the owner key still carried the lease), that
// key's mod revision in the refusal: the revision the unanswered attempt
// made. Every owned commit rewrites LastOwnerKey, so the history checks
// also check that the key was last written at each commit's revision, and
// written once per commit that wrote (its etcd version): no commit
// applied twice, nor anything else between them.
//
// A crash keeping the first k commits (crashPrefix) reads the volume's keys
// at the revision commit k made, checks that they are what the commits
// wrote (the state the KV opened on plus the writes of commits 1..k), and
// copies them under a new prefix, without the owner key (the crashed
// owner's lease expired), where the crash image's volume opens, taken
// over. With k the number of commits, that is exactly what etcd holds when
// the engine's process dies; a smaller k is the process dying after
// commit k, paired with the data device as it is now (the pairs the Pebble
// campaign checks too, where a crash loses the unsynced commits).
//
// Commits are serialised by the KV's mutex (the engine serialises its
// commits anyway, and an Owner's are serialised by etcdkv), so that the
// revision recorded is the commit's.
type EtcdRecKV struct {
	inner  *etcdkv.KV
	owner  *etcdkv.Owner    // Immutable.
	meta   *EtcdMeta        // Immutable.
	prefix string           // Immutable.
	client *clientv3.Client // the KV's own client, on Meta's connection. Immutable.
	txns   *revKV           // client's KV. Immutable.
	// base is what the prefix held when the KV opened (owned), and
	// baseGuard LastOwnerKey's etcd version then. Immutable.
	base      map[string][]byte
	baseGuard int64

	mu struct {
		sync.Mutex
		// commits counts every commit made through this KV, synced those
		// the engine synced.
		commits, synced uint64
		// revs[i] is the etcd revision after commit i (revs[0]: when the
		// KV opened).
		revs []int64
		// log[i] holds the writes of commit i+1.
		log []kvCommit
		// failed lists the commits that returned an error, in order: etcd
		// may or may not have applied them (resolveFailed).
		failed []failedCommit
		// resent lists the commits that returned after etcdkv sent them
		// more than once.
		resent []resentCommit
		// beforeCommit, if set, runs before commit n is sent.
		beforeCommit func(n uint64)
	}
}

// failedCommit is a commit that returned an error.
type failedCommit struct {
	// after is the number of commits that had returned before it.
	after  uint64
	writes kvCommit
	err    error
}

// resentCommit is a commit that returned after etcdkv sent it more than
// once.
type resentCommit struct {
	n        uint64 // its number
	attempts int    // the transactions sent
	// resolved says that a refusal with the guard moved resolved it (an
	// attempt that got no answer applied), rather than an answered one.
	resolved bool
	rev      int64
}

func (c resentCommit) String() string {
	how := "an attempt answered applied it"
	if c.resolved {
		how = "an attempt that got no answer applied it (the guard had moved)"
	}
	return fmt.Sprintf("commit %d sent %d times: %s, at revision %d", c.n, c.attempts, how, c.rev)
}

var (
	_ CrashKV          = (*EtcdRecKV)(nil)
	_ meta.EmptyHinter = (*EtcdRecKV)(nil)
)

func (k *EtcdRecKV) Get(key []byte) ([]byte, error) { return k.inner.Get(key) }
func (k *EtcdRecKV) Scan(start, end []byte, fn func(key, value []byte) error) error {
	return k.inner.Scan(start, end, fn)
}
func (k *EtcdRecKV) NewTxn() meta.Txn        { return &recTxn{rec: k, inner: k.inner.NewTxn()} }
func (k *EtcdRecKV) Snapshot() meta.Snapshot { return k.inner.Snapshot() }

// KnownEmpty passes the engine's hint to etcdkv's read cache.
func (k *EtcdRecKV) KnownEmpty(start, end []byte) { k.inner.KnownEmpty(start, end) }

// Close releases the volume cleanly, as a mount's Close does after its
// last data request (the file system is closed first), and closes the
// etcdkv.KV (the shared connection stays open).
func (k *EtcdRecKV) Close() error {
	err := k.owner.Release()
	err = errors.Join(err, k.inner.Close())
	k.client.Close() // cancels its context only: it has no connection of its own
	k.mu.Lock()
	var resolved uint64
	for _, c := range k.mu.resent {
		if c.resolved {
			resolved++
		}
	}
	resent := uint64(len(k.mu.resent))
	k.mu.Unlock()
	k.meta.addStats(k.inner.Stats(), resolved, resent)
	return err
}

// Sync does what etcdkv's does (nothing) and counts every commit synced.
func (k *EtcdRecKV) Sync() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.inner.Sync(); err != nil {
		return err
	}
	k.mu.synced = k.mu.commits
	return nil
}

// Commits returns the number of commits made so far and the number the
// engine synced.
func (k *EtcdRecKV) Commits() (commits, synced uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mu.commits, k.mu.synced
}

func (k *EtcdRecKV) commitTxn(t *recTxn, sync bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mu.beforeCommit != nil {
		k.mu.beforeCommit(k.mu.commits + 1)
	}
	k.txns.reset()
	if e := k.meta.LoseReplyEvery; e != 0 && (k.mu.commits+1)%e == 0 {
		k.txns.lose.Store(true)
	}
	if err := t.inner.Commit(sync); err != nil {
		if len(t.writes) > 0 {
			k.mu.failed = append(k.mu.failed, failedCommit{after: k.mu.commits, writes: t.writes, err: err})
		}
		return err
	}
	applied, guard, sent := k.txns.applied.Load(), k.txns.guard.Load(), int(k.txns.sent.Load())
	rev := applied
	switch {
	case applied != 0 && guard != 0:
		return fmt.Errorf("crashtest: a commit was both applied (revision %d) and refused with the guard moved (to revision %d)", applied, guard)
	case rev == 0 && guard != 0:
		// Resolved: an attempt without an answer applied, at the
		// revision that moved the guard.
		rev = guard
	case rev == 0 && len(t.writes) > 0:
		return fmt.Errorf("crashtest: a commit of %d writes returned without an etcd transaction applied", len(t.writes))
	case rev == 0:
		// Nothing written, no request sent: the state is the last one.
		rev = k.mu.revs[len(k.mu.revs)-1]
	}
	k.mu.commits++
	k.mu.revs = append(k.mu.revs, rev)
	k.mu.log = append(k.mu.log, t.writes)
	t.writes = nil
	if sync {
		k.mu.synced = k.mu.commits
	}
	if sent > 1 {
		k.mu.resent = append(k.mu.resent, resentCommit{n: k.mu.commits, attempts: sent, resolved: guard != 0, rev: rev})
		// Check at once that etcd holds the commit, once, at the
		// revision the resolution gave.
		if _, err := k.checkAtLocked(k.mu.commits); err != nil {
			return fmt.Errorf("crashtest: commit %d, sent %d times: %w", k.mu.commits, sent, err)
		}
	}
	return nil
}

// resentCommits returns the commits etcdkv sent more than once.
func (k *EtcdRecKV) resentCommits() []resentCommit {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.mu.resent)
}

// setBeforeCommit makes fn run before each commit is sent, with the
// number that commit will have (under the KV's mutex: no commit is in
// flight while fn runs, and fn must not use the KV).
func (k *EtcdRecKV) setBeforeCommit(fn func(n uint64)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.beforeCommit = fn
}

// replayLocked returns the volume's keys after commit n as the log says:
// the state the KV opened on plus the writes of commits 1..n, then extra's.
//
// Preconditions: k.mu is held.
func (k *EtcdRecKV) replayLocked(n uint64, extra ...kvCommit) map[string][]byte {
	out := make(map[string][]byte, len(k.base))
	for key, v := range k.base {
		out[key] = v
	}
	for _, c := range append(slices.Clone(k.mu.log[:n]), extra...) {
		for _, w := range c {
			if w.del {
				delete(out, string(w.key))
			} else {
				out[string(w.key)] = w.value
			}
		}
	}
	return out
}

// checkGuardLocked checks LastOwnerKey as etcd held it at commit n's
// revision (last): each commit that wrote rewrote it once, the last of
// them at its revision, and nothing else did.
//
// Preconditions: k.mu is held.
func (k *EtcdRecKV) checkGuardLocked(n uint64, last *mvccpb.KeyValue) error {
	if last == nil {
		return fmt.Errorf("etcd prefix %q at revision %d holds no %s", k.prefix, k.mu.revs[n], etcdkv.LastOwnerKey)
	}
	wrote, lastWrote := int64(0), uint64(0)
	for i, c := range k.mu.log[:n] {
		if len(c) > 0 {
			wrote, lastWrote = wrote+1, uint64(i+1)
		}
	}
	if v := last.Version - k.baseGuard; v != wrote {
		return fmt.Errorf("etcd prefix %q at revision %d: %s was written %d times since the KV opened, by %d commits that wrote (a commit applied more than once or lost, another writer, or a commit recorded at a revision not its own)",
			k.prefix, k.mu.revs[n], etcdkv.LastOwnerKey, v, wrote)
	}
	if lastWrote > 0 && last.ModRevision != k.mu.revs[lastWrote] {
		return fmt.Errorf("commit %d is recorded at revision %d, but it wrote %s at revision %d", lastWrote, k.mu.revs[lastWrote], etcdkv.LastOwnerKey, last.ModRevision)
	}
	return nil
}

// diffKVs describes the first differences between the keys etcd held
// (got) and those the log says (want), or returns "".
func diffKVs(got, want map[string][]byte) string {
	var d []string
	keys := make([]string, 0, len(got)+len(want))
	for key := range got {
		keys = append(keys, key)
	}
	for key := range want {
		if _, ok := got[key]; !ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		g, gok := got[key]
		w, wok := want[key]
		switch {
		case !gok:
			d = append(d, fmt.Sprintf("key %q missing", key))
		case !wok:
			d = append(d, fmt.Sprintf("key %q not written by any commit", key))
		case !bytes.Equal(g, w):
			d = append(d, fmt.Sprintf("key %q holds another value", key))
		}
		if len(d) == 5 {
			d = append(d, "...")
			break
		}
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

// checkAt reads the volume's keys at commit n's revision and checks them
// (checkGuardLocked, and the keys against the log); it returns them.
func (k *EtcdRecKV) checkAt(n uint64) (map[string][]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checkAtLocked(n)
}

// checkAtLocked is checkAt.
//
// Preconditions: k.mu is held.
func (k *EtcdRecKV) checkAtLocked(n uint64) (map[string][]byte, error) {
	rev := k.mu.revs[n]
	got, last, _, err := k.meta.read(k.prefix, rev)
	if err != nil {
		return nil, err
	}
	if err := k.checkGuardLocked(n, last); err != nil {
		return nil, err
	}
	if d := diffKVs(got, k.replayLocked(n)); d != "" {
		return nil, fmt.Errorf("etcd prefix %q at revision %d does not hold what commits 1..%d wrote: %s", k.prefix, rev, n, d)
	}
	return got, nil
}

// crashPrefix returns, open under a new prefix and taken over, the
// volume's keys as etcd held them after commit upTo (at least the synced
// commits, at most all), after checking that they are what the commits
// wrote.
func (k *EtcdRecKV) crashPrefix(upTo uint64) (CrashKV, uint64, error) {
	k.mu.Lock()
	upTo = min(max(upTo, k.mu.synced), k.mu.commits)
	k.mu.Unlock()
	got, err := k.checkAt(upTo)
	if err != nil {
		return nil, 0, err
	}
	rk, err := k.meta.restore(got, k.owner.ID())
	if err != nil {
		return nil, 0, err
	}
	return rk, upTo, nil
}

// checkHistory checks that etcd held, at the revision each commit made,
// exactly what the commits up to it wrote: nothing a commit that returned
// wrote was lost, nothing else was written, and no commit applied twice.
func (k *EtcdRecKV) checkHistory() error {
	n, _ := k.Commits()
	for i := uint64(0); i <= n; i++ {
		if _, err := k.checkAt(i); err != nil {
			return err
		}
	}
	return nil
}

// resolveFailed reads what etcd holds now, once the engine has stopped
// committing, and returns the failed commits it applied: the prefix must
// hold the writes of every commit that returned, and of each failed one
// made after them either all or none. It returns an error if it holds
// anything else.
func (k *EtcdRecKV) resolveFailed() (applied []failedCommit, err error) {
	got, _, _, err := k.meta.read(k.prefix, 0)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var doubt []failedCommit
	for _, f := range k.mu.failed {
		if f.after == k.mu.commits {
			doubt = append(doubt, f)
		}
	}
	if len(doubt) > 8 {
		return nil, fmt.Errorf("%d failed commits in doubt: too many to try every subset", len(doubt))
	}
	for set := 0; set < 1<<len(doubt); set++ {
		var extra []kvCommit
		var fs []failedCommit
		for i, f := range doubt {
			if set&(1<<i) != 0 {
				extra, fs = append(extra, f.writes), append(fs, f)
			}
		}
		if diffKVs(got, k.replayLocked(k.mu.commits, extra...)) == "" {
			return fs, nil
		}
	}
	return nil, fmt.Errorf("etcd prefix %q holds neither what the %d commits that returned wrote nor that plus any of the %d failed after them: %s",
		k.prefix, k.mu.commits, len(doubt), diffKVs(got, k.replayLocked(k.mu.commits)))
}

// crashHead returns, open under a new prefix and taken over, the volume's
// keys as etcd holds them now (failed commits included, if etcd applied
// them).
func (k *EtcdRecKV) crashHead() (CrashKV, error) {
	got, _, _, err := k.meta.read(k.prefix, 0)
	if err != nil {
		return nil, err
	}
	return k.meta.restore(got, k.owner.ID())
}

// hookTxns passes every call to KV, and every transaction's Commit
// through hook, which sends it by calling commit.
type hookTxns struct {
	clientv3.KV
	hook func(commit func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error)
}

func (k hookTxns) Txn(ctx context.Context) clientv3.Txn {
	return &hookTxn{Txn: k.KV.Txn(ctx), hook: k.hook}
}

type hookTxn struct {
	clientv3.Txn
	hook func(commit func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error)
}

func (t *hookTxn) If(cs ...clientv3.Cmp) clientv3.Txn     { t.Txn = t.Txn.If(cs...); return t }
func (t *hookTxn) Then(ops ...clientv3.Op) clientv3.Txn   { t.Txn = t.Txn.Then(ops...); return t }
func (t *hookTxn) Else(ops ...clientv3.Op) clientv3.Txn   { t.Txn = t.Txn.Else(ops...); return t }
func (t *hookTxn) Commit() (*clientv3.TxnResponse, error) { return t.hook(t.Txn.Commit) }

// revKV, the hook of the shared connection's transactions (hookTxns),
// records, for the commit in progress (EtcdRecKV serialises them; reset starts one),
// what etcd answered its transactions: the revision of one applied, the
// guard's mod revision in a refusal by the owner's comparisons, and how
// many were sent. With lose, the reply to the commit's first transaction
// is lost (EtcdMeta.LoseReplyEvery): it records nothing of it, and
// returns an error that says nothing of its outcome.
type revKV struct {
	applied, guard, sent atomic.Int64
	lose                 atomic.Bool
}

func (k *revKV) reset() {
	k.applied.Store(0)
	k.guard.Store(0)
	k.sent.Store(0)
	k.lose.Store(false)
}

// errReplyLost is the error of a transaction whose reply revKV lost: the
// gRPC status of a connection lost mid-request.
var errReplyLost = status.Error(codes.Unavailable, "crashtest: the reply was lost (the transaction reached etcd)")

// commit sends a transaction and records etcd's answer: an owned commit is applied if both the
// owner's transaction and the one nested in it succeeded; refused by the
// owner's comparisons, its answer reads the owner key and LastOwnerKey
// (etcdkv's Owner.refusal), whose mod revision is the guard's.
func (k *revKV) commit(send func() (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
	n := k.sent.Add(1)
	resp, err := send()
	if err != nil {
		return resp, err
	}
	if n == 1 && k.lose.Load() {
		return nil, errReplyLost
	}
	switch {
	case resp.Succeeded:
		if len(resp.Responses) == 1 {
			if in := resp.Responses[0].GetResponseTxn(); in != nil && !in.Succeeded {
				break // a conflict: nothing applied
			}
		}
		k.applied.Store(resp.Header.Revision)
	case len(resp.Responses) == 2:
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			k.guard.Store(kvs[0].ModRevision)
		}
	}
	return resp, err
}
