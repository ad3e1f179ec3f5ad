package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/btree"
	"github.com/sluicefs/sluice/meta"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxCommitAttempts bounds how often Commit sends a transaction that the
// cluster refused before proposing it (all within one RequestTimeout).
const maxCommitAttempts = 20

// notProposed reports whether err says that the cluster refused a request
// before proposing it to raft, so that sending it again cannot apply it
// twice: no leader, or the proposal dropped by a follower that knows no
// leader (during an election, as raft.ErrProposalDropped).
func notProposed(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrNoLeader) || rpctypes.ErrorDesc(err) == "raft proposal dropped")
}

// requestReserveBytes is kept free below MaxRequestBytes for what etcd adds
// to a transaction before checking its size: the raft request's header
// (request ID, user name, auth revision) and field framing.
const requestReserveBytes = 1 << 10

// txn is an optimistic transaction (see the package doc). It is used by one
// goroutine.
type txn struct {
	kv *KV
	// writes holds the last write to each key, by volume key.
	writes *btree.BTreeG[write]
	// n counts Set and Delete calls (Len).
	n int
	// rev is the revision every read is made at; 0 until the first read.
	rev int64
	// readKeys maps the etcd key of every key read from etcd to the
	// revision it was last modified at (0: absent).
	readKeys map[string]int64
	// readRanges are the etcd ranges scanned, all at rev.
	readRanges []keyRange
	done       bool
}

// write is a buffered Set (del false) or Delete of key.
type write struct {
	key   string
	value []byte
	del   bool
}

// keyRange is the etcd key range [from, to).
type keyRange struct{ from, to string }

func newTxn(kv *KV) *txn {
	return &txn{
		kv:       kv,
		writes:   btree.NewG(16, func(a, b write) bool { return a.key < b.key }),
		readKeys: make(map[string]int64),
	}
}

func (t *txn) Get(key []byte) ([]byte, error) {
	if t.done {
		return nil, errFinished
	}
	if w, ok := t.writes.Get(write{key: string(key)}); ok {
		if w.del {
			return nil, meta.ErrNotFound
		}
		return bytes.Clone(w.value), nil
	}
	v, mod, rev, err := t.kv.get("txn get", key, t.rev)
	if err != nil {
		return nil, err
	}
	if t.rev == 0 {
		t.rev = rev
	}
	t.readKeys[t.kv.key(key)] = mod
	return found(v, mod, nil)
}

// errStopScan ends the etcd scan when fn stopped the Txn's scan.
var errStopScan = errors.New("stop")

// Scan merges the buffered writes in [start, end), as they are when Scan
// starts, with the keys in etcd at the Txn's revision. It records every
// key it delivers from etcd, and the part of the range it delivered: all
// of it, or up to the key at which fn returned an error.
func (t *txn) Scan(start, end []byte, fn func(key, value []byte) error) error {
	if t.done {
		return errFinished
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil
	}
	// The buffered writes in range, copied: fn may write to the Txn.
	var ws []write
	t.writes.AscendGreaterOrEqual(write{key: string(start)}, func(w write) bool {
		if end != nil && w.key >= string(end) {
			return false
		}
		ws = append(ws, w)
		return true
	})
	var (
		last    []byte // the last key delivered
		fnErr   error
		records = make(map[string]int64)
	)
	deliver := func(key, value []byte) bool {
		last = key
		if err := fn(key, value); err != nil {
			fnErr = err
			return false
		}
		return true
	}
	// flush delivers the buffered Sets before key (all if key is nil).
	flush := func(key []byte) bool {
		for len(ws) > 0 && (key == nil || ws[0].key < string(key)) {
			w := ws[0]
			ws = ws[1:]
			if !w.del && !deliver([]byte(w.key), bytes.Clone(w.value)) {
				return false
			}
		}
		return true
	}
	rev, err := t.kv.scan("txn scan", start, end, t.rev, func(e *mvccpb.KeyValue) error {
		key := t.kv.strip(e.Key)
		if !flush(key) {
			return errStopScan
		}
		if len(ws) > 0 && ws[0].key == string(key) {
			return nil // the buffered write hides it; flushed with the next key
		}
		records[string(e.Key)] = e.ModRevision
		if !deliver(key, e.Value) {
			return errStopScan
		}
		return nil
	})
	if err == errStopScan {
		err = nil
	}
	if err == nil && fnErr == nil {
		flush(nil)
	}
	// Record what fn saw, even when the scan failed part way: the caller
	// may go on with the Txn.
	if t.rev == 0 {
		t.rev = rev
	}
	for k, mod := range records {
		t.readKeys[k] = mod
	}
	r := keyRange{from: t.kv.key(start), to: t.kv.rangeEnd(end)}
	if err != nil || fnErr != nil {
		r.to = ""
		if last != nil {
			r.to = t.kv.key(last) + "\x00"
		}
	}
	// rev is 0 if nothing was read from etcd.
	if rev != 0 && r.to != "" {
		t.readRanges = append(t.readRanges, r)
	}
	if err != nil {
		return err
	}
	return fnErr
}

func (t *txn) Set(key, value []byte) {
	if t.done {
		panic("etcdkv: Set on a finished transaction")
	}
	t.writes.ReplaceOrInsert(write{key: string(key), value: bytes.Clone(value)})
	t.n++
}

func (t *txn) Delete(key []byte) {
	if t.done {
		panic("etcdkv: Delete on a finished transaction")
	}
	t.writes.ReplaceOrInsert(write{key: string(key), del: true})
	t.n++
}

func (t *txn) Len() int { return t.n }

func (t *txn) Abort() { t.done = true }

// Commit applies the writes if nothing the Txn read has changed and, when
// the KV has an Owner, if the owner key still carries its lease (see the
// package doc); sync is ignored, every commit being durable on a quorum.
func (t *txn) Commit(sync bool) error {
	if t.done {
		return errFinished
	}
	t.done = true
	if t.writes.Len() == 0 {
		// Its reads were one consistent state: nothing to check or write.
		return nil
	}
	kv := t.kv
	own := kv.owner.Load()
	if own != nil {
		if err := own.Err(); err != nil {
			kv.stats.notOwner.Add(1)
			if !errors.Is(err, ErrNotOwner) {
				err = fmt.Errorf("%w: %w", ErrNotOwner, err)
			}
			return opError("commit", nil, fmt.Errorf("%w; nothing written", err))
		}
	}
	if own != nil {
		// One owned commit at a time: each is guarded by the last
		// (see "Outcomes" in the package doc).
		own.commit.Lock()
		defer own.commit.Unlock()
		var keys []string // sorted: t.writes is
		t.writes.Ascend(func(w write) bool { keys = append(keys, kv.opts.Prefix+w.key); return true })
		kv.cache.begin(keys)
		defer kv.cache.end()
	}
	cmps, ops, inner := t.request()
	req, maxOps := inner, kv.opts.MaxTxnOps
	if own != nil {
		req, maxOps = own.wrap(inner), maxOps-1
	}
	if err := t.checkLimits(req, inner, maxOps); err != nil {
		return opError("commit", nil, err)
	}
	ctx, cancel := kv.ctx()
	defer cancel()
	// A member that knows no leader refuses the request at once (rather
	// than queueing it until the timeout), and send tries again: the
	// outcome of a refused commit is known.
	resp, attempts, err := t.send(clientv3.WithRequireLeader(ctx), own, cmps, ops)
	resolving := own != nil && unanswered(err)
	if resolving {
		var more int
		resp, more, err = t.resolve(own, cmps, ops, err)
		attempts += more
	}
	kv.stats.retry.Add(uint64(attempts - 1))
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return opError("commit", nil, fmt.Errorf("%w: the server's --max-txn-ops is lower than MaxTxnOps %d (%d reads to check, %d writes): %w",
			ErrTxnTooLarge, kv.opts.MaxTxnOps, len(cmps), len(ops), err))
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return opError("commit", nil, fmt.Errorf("%w: the server's --max-request-bytes is lower than MaxRequestBytes %d (request of %d bytes): %w",
			ErrTxnTooLarge, kv.opts.MaxRequestBytes, proto.Size(req), err))
	case notProposed(err):
		return opError("commit", nil, fmt.Errorf("not applied, refused before raft %d times: %w", attempts, err))
	case err != nil:
		// The commit may yet be applied: what the cache holds of its
		// keys can no longer be trusted.
		kv.cache.disable()
		return opError("commit", nil, fmt.Errorf("outcome unknown: %w", err))
	case own != nil && !resp.Succeeded:
		ours, rev := own.refusal(resp)
		switch {
		case ours && resolving:
			// The guard moved while the owner key carries the lease:
			// the attempt whose outcome was unknown was applied, at rev.
			resp.Header.Revision = rev
		case ours:
			// Another writer changed the volume: the cache, which
			// rests on there being none, can no longer be trusted.
			kv.cache.disable()
			kv.stats.conflicts.Add(1)
			err := fmt.Errorf("%w: the volume changed at revision %d, after this owner's last commit known to apply (revision %d); nothing written",
				ErrConflict, rev, own.commit.guardRev)
			own.commit.guardRev = rev
			return opError("commit", nil, err)
		default:
			kv.stats.notOwner.Add(1)
			lost := fmt.Errorf("%w: %s", ErrNotOwner, own.describeLoss(resp))
			own.lose(lost)
			if resolving && rev != own.commit.guardRev {
				return opError("commit", nil, fmt.Errorf("outcome unknown (sent again after an attempt without an answer, and the volume changed hands): %w", lost))
			}
			return opError("commit", nil, fmt.Errorf("%w; nothing written", lost))
		}
	case own != nil && !resp.Responses[0].GetResponseTxn().Succeeded, own == nil && !resp.Succeeded:
		kv.stats.conflicts.Add(1)
		return opError("commit", nil, fmt.Errorf("%w (read at revision %d, refused at revision %d)", ErrConflict, t.rev, resp.Header.Revision))
	}
	kv.stats.commits.Add(1)
	if own != nil {
		own.commit.guardRev = resp.Header.Revision
	}
	if own != nil {
		var ws []write
		t.writes.Ascend(func(w write) bool { ws = append(ws, w); return true })
		kv.cache.committed(ws, kv.opts.Prefix, resp.Header.Revision)
	}
	return nil
}

// send sends the transaction (nested in the owner's comparison, with an
// owner), again while the cluster refuses it before proposing it (at most
// maxCommitAttempts times, within ctx).
func (t *txn) send(ctx context.Context, own *Owner, cmps []clientv3.Cmp, ops []clientv3.Op) (resp *clientv3.TxnResponse, attempts int, err error) {
	backoff := 10 * time.Millisecond
	for attempts = 1; ; attempts++ {
		start := time.Now()
		if own == nil {
			resp, err = t.kv.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
		} else {
			resp, err = t.kv.client.Txn(ctx).
				If(own.cmp(), own.guardCmp()).
				Then(clientv3.OpTxn(cmps, append(slices.Clip(ops), own.guardPut()), nil)).
				Else(clientv3.OpGet(own.key), clientv3.OpGet(own.lastKey)).
				Commit()
		}
		t.kv.stats.observeCommit(start, err)
		if !notProposed(err) || attempts == maxCommitAttempts {
			return resp, attempts, err
		}
		select {
		case <-ctx.Done():
			return resp, attempts, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// unanswered reports whether a commit's attempt failed without etcd saying
// whether it was applied: anything but a refusal before raft (no leader),
// a refusal of the request itself (too large, invalid, not permitted, no
// space) or success. A deadline, a member unreachable or stopping, a
// leader lost mid-request are such failures.
func unanswered(err error) bool {
	if err == nil || notProposed(err) || errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return false
	}
	code := codes.Unknown
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition, codes.ResourceExhausted, codes.OutOfRange:
		return false
	}
	return true
}

// resolve sends again, for up to RequestTimeout, an owned commit whose
// first attempt failed with err without an answer (the member it went
// through stopped, or the leader it was forwarded to died, or the
// deadline passed), until etcd answers: the owner's guard makes the
// commit apply at most once, so the answer says whether it is applied
// (now, or by the first attempt: the guard moved while the owner key
// still carries the lease). An attempt may itself be forwarded to a
// leader that just died (its followers have not noticed yet), so the
// first attempts wait RequestTimeout/4, each later one twice as long. If
// etcd does not answer in time, it returns err, still of unknown outcome,
// with the last attempt's error.
func (t *txn) resolve(own *Owner, cmps []clientv3.Cmp, ops []clientv3.Op, err error) (*clientv3.TxnResponse, int, error) {
	ctx, cancel := t.kv.ctx()
	defer cancel()
	attempts, backoff, wait := 0, 20*time.Millisecond, t.kv.opts.RequestTimeout/4
	for {
		actx, acancel := context.WithTimeout(ctx, wait)
		resp, n, last := t.send(clientv3.WithRequireLeader(actx), own, cmps, ops)
		acancel()
		attempts += n
		if last == nil || !unanswered(last) && !notProposed(last) {
			return resp, attempts, last
		}
		select {
		case <-ctx.Done():
			return nil, attempts, fmt.Errorf("%w; sent again %d times for %v: %v", err, attempts, t.kv.opts.RequestTimeout, last)
		case <-time.After(backoff):
		}
		backoff, wait = min(2*backoff, 200*time.Millisecond), 2*wait
	}
}

// request returns the commit's comparisons and operations, and the same as
// the request etcd receives, to check its size.
func (t *txn) request() ([]clientv3.Cmp, []clientv3.Op, *pb.TxnRequest) {
	req := &pb.TxnRequest{}
	var cmps []clientv3.Cmp
	keys := make([]string, 0, len(t.readKeys))
	for k := range t.readKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys) // a deterministic request
	for _, k := range keys {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", t.readKeys[k]))
	}
	for _, r := range mergeRanges(t.readRanges) {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r.from).WithRange(r.to), "<", t.rev+1))
	}
	for i := range cmps {
		req.Compare = append(req.Compare, cmps[i].GetCompare())
	}
	var ops []clientv3.Op
	t.writes.Ascend(func(w write) bool {
		k := t.kv.key([]byte(w.key))
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
			req.Success = append(req.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
				RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k)}}})
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.value)))
			req.Success = append(req.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: []byte(k), Value: w.value}}})
		}
		return true
	})
	return cmps, ops, req
}

// mergeRanges returns rs sorted, with overlapping or adjacent ranges
// merged: one comparison each. (No range ends at etcd's "\x00", "to the
// end of the key space": Validate refuses a prefix of 0xff bytes only.)
func mergeRanges(rs []keyRange) []keyRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b keyRange) int { return strings.Compare(a.from, b.from) })
	var out []keyRange
	for _, r := range rs {
		if n := len(out); n > 0 && r.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, r.to)
			continue
		}
		out = append(out, r)
	}
	return out
}

// checkLimits refuses a transaction etcd would refuse: more than maxOps
// comparisons or writes in inner (MaxTxnOps, less the one operation of the
// owner's transaction around it), or a request req (inner, or the owner's
// transaction around it) larger than MaxRequestBytes.
func (t *txn) checkLimits(req, inner *pb.TxnRequest, maxOps int) error {
	limit := t.kv.opts.MaxTxnOps
	less := ""
	if maxOps < limit {
		less = ", less one for the owner's comparison"
	}
	if n := len(inner.Compare); n > maxOps {
		return fmt.Errorf("%w: %d reads to check (keys read and ranges scanned) exceed etcd's --max-txn-ops %d (MaxTxnOps%s)", ErrTxnTooLarge, n, limit, less)
	}
	if n := len(inner.Success); n > maxOps {
		return fmt.Errorf("%w: %d writes (distinct keys set or deleted) exceed etcd's --max-txn-ops %d (MaxTxnOps%s)", ErrTxnTooLarge, n, limit, less)
	}
	if n := proto.Size(req); n > t.kv.opts.MaxRequestBytes-requestReserveBytes {
		return fmt.Errorf("%w: a request of %d bytes (plus %d reserved for etcd's header) exceeds etcd's --max-request-bytes %d (MaxRequestBytes)",
			ErrTxnTooLarge, n, requestReserveBytes, t.kv.opts.MaxRequestBytes)
	}
	return nil
}
