package etcdkv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The keys the KV reserves under a volume's prefix for its ownership (see
// "Ownership" in the package doc). The schema's keys begin with an
// upper-case kind byte, these with a lower-case letter, so they never
// collide; Scan, Snapshot and Txn scans skip them.
const (
	// OwnerKey holds the Holder of the volume, attached to its lease.
	OwnerKey = "owner"
	// LastOwnerKey holds the Holder of the volume's latest owner, with no
	// lease: it outlives the owner, and says whether it released the
	// volume cleanly (Holder.Released) and on what terms it held it (TTL,
	// margin, I/O bound), which the next owner's wait depends on. mkfs
	// writes a released one (MarkReleased).
	LastOwnerKey = "owner.last"
)

// reserved reports whether volume key k is one of the reserved keys.
func reserved(k []byte) bool {
	return len(k) > 0 && k[0] == 'o' && (string(k) == OwnerKey || string(k) == LastOwnerKey)
}

// DefaultLeaseTTL is OwnerOptions.TTL's default.
const DefaultLeaseTTL = 5 * time.Second

var (
	// ErrHeld is matched (errors.Is) by Acquire's *HeldError when another
	// host owns the volume.
	ErrHeld = errors.New("etcdkv: the volume is owned by another host")
	// ErrNotOwner is wrapped by the error of a commit refused, writing
	// nothing, because the KV's Owner lost the volume: the owner key no
	// longer carries its lease (the lease expired or was revoked, or the
	// key was deleted or taken over), or the Owner already knew it had
	// lost it or had released it. Like every commit error, it also
	// matches syscall.EIO.
	ErrNotOwner = errors.New("etcdkv: not the volume's owner (its lease is lost)")
	// errReleased is an Owner's error after Release.
	errReleased = errors.New("the ownership was released")
)

// Holder says who owns (or last released) a volume: the value of its
// owner key, as JSON.
type Holder struct {
	Host    string    `json:"host"`
	Pid     int       `json:"pid"`
	Mount   string    `json:"mount,omitempty"`
	Started time.Time `json:"started"`
	// TTL and Margin are the holder's lease terms (Owner.TTL, Margin),
	// and IOBound the bound it assumed on its data requests' time in
	// flight (its caller's, recorded for the next owner: etcdkv does not
	// use it). Acquire sets TTL and Margin.
	TTL     time.Duration `json:"ttl_ns,omitempty"`
	Margin  time.Duration `json:"margin_ns,omitempty"`
	IOBound time.Duration `json:"io_bound_ns,omitempty"`
	// Released is when the holder released the volume cleanly
	// (LastOwnerKey only).
	Released time.Time `json:"released,omitzero"`
	// Lease is the ID of the holder's etcd lease. It is stored in the
	// value, so that LastOwnerKey names the lease of the volume's latest
	// owner after that lease is gone (Previous; a caller derives names
	// from it, such as package volume's persistent reservation key); 0
	// in a record written before it was stored, and in mkfs's. For the
	// owner key, etcd's word (the lease the key carries) wins over the
	// value's. TTLLeft is the lease's remaining time to live when it was
	// read, in whole seconds rounded down as etcd reports it; it is not
	// stored in the value (OwnerOf fills it in from etcd).
	Lease   int64         `json:"lease,omitempty"`
	TTLLeft time.Duration `json:"ttl_left_ns,omitempty"`
	// Prior are the leases of the owners before this one, newest first
	// (at most MaxPriorLeases), as LastOwnerKey named them when this
	// holder acquired the volume (its Lease, then its Prior). etcdkv does
	// not use them: they tell a caller which names derived from an
	// earlier owner's lease may still be in use, such as a reservation
	// that an owner took before a later one crashed without taking it
	// over (package volume).
	Prior []int64 `json:"prior_leases,omitempty"`
}

// MaxPriorLeases bounds Holder.Prior.
const MaxPriorLeases = 8

// String describes h in a few words: "pid 1234 on host a, mounted on /mnt
// since 2025-01-02T15:04:05Z".
func (h *Holder) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d on host %s", h.Pid, h.Host)
	if h.Mount != "" {
		fmt.Fprintf(&b, ", mounted on %s", h.Mount)
	}
	if !h.Started.IsZero() {
		fmt.Fprintf(&b, " since %s", h.Started.Format(time.RFC3339))
	}
	return b.String()
}

// decodeHolder decodes an owner key's value (a damaged one still names
// its lease).
func decodeHolder(e *mvccpb.KeyValue) *Holder {
	h := &Holder{}
	if err := json.Unmarshal(e.Value, h); err != nil {
		h.Host = fmt.Sprintf("? (undecodable owner value %q)", e.Value)
	}
	if e.Lease != 0 {
		h.Lease = e.Lease
	}
	return h
}

// HeldError is Acquire's error when another host owns the volume.
type HeldError struct{ Holder Holder }

func (e *HeldError) Error() string { return "the volume is owned by " + e.Holder.String() }

// Is makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// OwnerOptions configures Acquire.
type OwnerOptions struct {
	// TTL is the lease's time to live: how long after this host's last
	// keep-alive etcd deletes its owner key, and the bound on how long a
	// standby waits after a crash. etcd counts in whole seconds (it is
	// rounded up) and raises a TTL below its minimum (1.5 election
	// timeouts, 2s with etcd's defaults) to it; the Owner uses the TTL
	// etcd granted. The default value is DefaultLeaseTTL (5s).
	TTL time.Duration
	// Margin is how long before the lease could expire the Owner's
	// deadline falls (see "Ownership" in the package doc): it covers the
	// difference in clock rates between this host and etcd's leader over
	// one TTL, and the delivery of the renewal to fence.Extend. The
	// default value is TTL/5.
	Margin time.Duration
	// Holder is what the owner key says about this host. Unset fields
	// default to os.Hostname, os.Getpid and the time of Acquire; Mount
	// defaults to "".
	Holder Holder
	// Standby makes Acquire wait, watching the owner key, while another
	// host owns the volume, and take it once the key is gone; it also
	// waits through an etcd that does not answer (timeouts, no leader).
	// The default value is false: Acquire fails with a *HeldError.
	Standby bool
	// OnWait, if set, is called (on Acquire's goroutine) each time a
	// standby starts waiting for a holder. The default value is nil.
	OnWait func(Holder)
}

// Owner is this host's ownership of a volume: an etcd lease kept alive
// by a goroutine, and the owner key attached to it. While a KV has an
// Owner, each of its commits writes only if the owner key still carries
// the Owner's lease. See "Ownership" in the package doc.
type Owner struct {
	kv       *KV
	id       clientv3.LeaseID // Immutable.
	key      string           // the owner key's etcd key. Immutable.
	holder   Holder           // Immutable.
	ttl      time.Duration    // granted by etcd. Immutable.
	margin   time.Duration    // Immutable.
	acquired time.Time        // Immutable.
	previous *Holder          // LastOwnerKey at the acquisition, or nil. Immutable.
	// lastKey is LastOwnerKey's etcd key and lastValue what Acquire wrote
	// there; every commit writes it again, as its guard. Immutable.
	lastKey, lastValue string

	// commit serializes the owned commits of the KV.
	commit struct {
		sync.Mutex
		// guardRev is LastOwnerKey's mod revision after the last commit
		// known to apply (or the acquisition): the next commit applies
		// only if it is unchanged (see "Outcomes" in the package doc).
		guardRev int64
	}

	// stop ends the keep-alive goroutine, which closes done.
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	// lost is closed when err is set.
	lost chan struct{}

	mu struct {
		sync.Mutex
		deadline, renewed time.Time
		err               error
		released          bool
	}
	// nmu serializes the calls of watchers, and protects the list.
	nmu      sync.Mutex
	watchers []func(deadline time.Time, err error)

	keepAlives, keepAliveFailures atomic.Uint64
}

// Acquire takes the ownership of the volume: it grants a lease of o.TTL
// and creates the owner key attached to it, if the key is absent (an etcd
// transaction comparing its CreateRevision with 0). If another host owns
// the volume, it fails with a *HeldError naming the holder, or, with
// o.Standby, waits until the owner key is deleted (the holder released it,
// its lease expired or was revoked) and tries again, until ctx is done.
//
// From then on, every commit of kv is conditional on the ownership, and a
// goroutine keeps the lease alive until Release, kv.Close, or the loss of
// the lease. A KV has at most one Owner at a time.
func (kv *KV) Acquire(ctx context.Context, o OwnerOptions) (*Owner, error) {
	if o.TTL == 0 {
		o.TTL = DefaultLeaseTTL
	}
	if o.TTL < 0 || o.Margin < 0 {
		return nil, fmt.Errorf("etcdkv: acquire: negative TTL %v or margin %v", o.TTL, o.Margin)
	}
	h := o.Holder
	if h.Host == "" {
		h.Host, _ = os.Hostname()
	}
	if h.Pid == 0 {
		h.Pid = os.Getpid()
	}
	if h.Started.IsZero() {
		h.Started = time.Now().UTC().Truncate(time.Second)
	}
	h.Lease, h.TTLLeft, h.Released = 0, 0, time.Time{}
	if cur := kv.owner.Load(); cur != nil && cur.Err() == nil {
		return nil, fmt.Errorf("etcdkv: acquire: this KV already owns the volume (lease %x)", int64(cur.id))
	}
	for {
		own, holder, rev, err := kv.tryAcquire(&o, h)
		if err != nil && o.Standby && transient(err) {
			// A standby outlasts an etcd that does not answer.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("etcdkv: waiting as a standby: %w (last: %w)", ctx.Err(), err)
			case <-time.After(max(o.TTL/2, 100*time.Millisecond)):
			}
			continue
		}
		if err != nil || own != nil {
			return own, err
		}
		if !o.Standby {
			return nil, &HeldError{Holder: *holder}
		}
		if o.OnWait != nil {
			o.OnWait(*holder)
		}
		if err := kv.waitReleased(ctx, rev, o.TTL); err != nil {
			return nil, fmt.Errorf("etcdkv: waiting for %s to release the volume: %w", holder, err)
		}
	}
}

// transient reports whether err may go away by itself: etcd or the network
// did not answer in time, or the cluster had no leader.
func transient(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rpctypes.ErrNoLeader) ||
		errors.Is(err, rpctypes.ErrTimeout) || notProposed(err) ||
		(errors.As(err, &se) && se.GRPCStatus().Code() == codes.Unavailable)
}

// tryAcquire makes one attempt: it returns the Owner, or the current
// holder and the revision at which it was read.
func (kv *KV) tryAcquire(o *OwnerOptions, h Holder) (*Owner, *Holder, int64, error) {
	ctx, cancel := kv.ctx()
	defer cancel()
	// The lease starts before the grant request is sent: the deadline is
	// measured from here, so that it falls before the lease's expiry on
	// etcd whatever the request's delays.
	sent := time.Now()
	seconds := int64((o.TTL + time.Second - 1) / time.Second)
	grant, err := kv.client.Grant(ctx, seconds)
	kv.stats.observe(sent, err)
	if err != nil {
		return nil, nil, 0, opError("acquire", []byte(OwnerKey), fmt.Errorf("granting a lease: %w", err))
	}
	ttl := time.Duration(grant.TTL) * time.Second
	margin := o.Margin
	if margin == 0 {
		margin = ttl / 5
	}
	h.TTL, h.Margin = ttl, min(margin, ttl)
	h.Lease = int64(grant.ID)
	key, last := kv.key([]byte(OwnerKey)), kv.key([]byte(LastOwnerKey))
	var (
		resp  *clientv3.TxnResponse
		value []byte
	)
	for {
		// LastOwnerKey is read first, for Prior, and the creation of the
		// owner key compares its mod revision: it changes only when
		// another host acquires or releases the volume, or mkfs marks it.
		start := time.Now()
		g, gerr := kv.client.Get(ctx, last)
		kv.stats.observe(start, gerr)
		if gerr != nil {
			kv.revoke(grant.ID)
			return nil, nil, 0, opError("acquire", []byte(LastOwnerKey), gerr)
		}
		lastRev := int64(0)
		h.Prior = nil
		if len(g.Kvs) > 0 {
			lastRev = g.Kvs[0].ModRevision
			if p := decodeHolder(g.Kvs[0]); p.Lease != 0 {
				h.Prior = append([]int64{p.Lease}, p.Prior...)
			} else {
				h.Prior = p.Prior
			}
			h.Prior = h.Prior[:min(len(h.Prior), MaxPriorLeases)]
		}
		if value, err = json.Marshal(&h); err != nil {
			kv.revoke(grant.ID)
			return nil, nil, 0, err
		}
		start = time.Now()
		resp, err = kv.client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), clientv3.Compare(clientv3.ModRevision(last), "=", lastRev)).
			Then(clientv3.OpPut(key, string(value), clientv3.WithLease(grant.ID)), clientv3.OpGet(last), clientv3.OpPut(last, string(value))).
			Else(clientv3.OpGet(key)).
			Commit()
		kv.stats.observe(start, err)
		if err == nil && !resp.Succeeded && len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
			continue // LastOwnerKey moved, the volume is free: read it again
		}
		break
	}
	if err != nil || !resp.Succeeded {
		// Revoking the lease deletes the key too if the transaction was
		// applied after all.
		kv.revoke(grant.ID)
		if err != nil {
			return nil, nil, 0, opError("acquire", []byte(OwnerKey), fmt.Errorf("creating the owner key: %w", err))
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, nil, 0, opError("acquire", []byte(OwnerKey), errors.New("the owner key exists and cannot be read"))
		}
		return nil, decodeHolder(kvs[0]), resp.Header.Revision, nil
	}
	var prev *Holder
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		prev = decodeHolder(kvs[0])
	}
	own := &Owner{
		kv:        kv,
		id:        grant.ID,
		key:       key,
		holder:    h,
		ttl:       h.TTL,
		margin:    h.Margin,
		acquired:  time.Now(),
		previous:  prev,
		lastKey:   last,
		lastValue: string(value),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		lost:      make(chan struct{}),
	}
	own.commit.guardRev = resp.Header.Revision
	own.mu.deadline = sent.Add(ttl - own.margin)
	own.mu.renewed = sent
	kv.owner.Store(own)
	kv.cache.enable()
	go own.run()
	return own, nil, 0, nil
}

// revoke revokes lease id, within RequestTimeout, ignoring errors: a lease
// not revoked expires after its TTL.
func (kv *KV) revoke(id clientv3.LeaseID) {
	ctx, cancel := kv.ctx()
	defer cancel()
	start := time.Now()
	_, err := kv.client.Revoke(ctx, id)
	kv.stats.observe(start, err)
}

// waitReleased waits until the owner key is deleted after revision rev,
// until ctx is done. It returns nil also when the watch breaks (the caller
// tries again), and at least every 5 TTLs.
func (kv *KV) waitReleased(ctx context.Context, rev int64, ttl time.Duration) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := kv.client.Watch(wctx, kv.key([]byte(OwnerKey)), clientv3.WithRev(rev+1))
	recheck := time.NewTimer(5 * ttl)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-recheck.C:
			return nil
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				// A broken watch (no leader, compaction): pause, then
				// the caller looks again.
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				return nil
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					return nil
				}
			}
		}
	}
}

// ID returns the lease's ID.
func (o *Owner) ID() int64 { return int64(o.id) }

// TTL returns the lease's time to live, as etcd granted it.
func (o *Owner) TTL() time.Duration { return o.ttl }

// Margin returns the margin between the Owner's deadline and the lease's
// possible expiry.
func (o *Owner) Margin() time.Duration { return o.margin }

// Holder returns what the owner key says, with the lease's ID.
func (o *Owner) Holder() Holder { return o.holder }

// Acquired returns when Acquire created the owner key.
func (o *Owner) Acquired() time.Time { return o.acquired }

// Clean reports whether the previous owner released the volume cleanly
// (Release, after its last I/O) or there was none since mkfs: then no
// request of another host can still be in flight, and a new owner need not
// wait before its first data request. It is false after a lease that
// expired or was revoked, or an owner key deleted by hand.
func (o *Owner) Clean() bool { return o.previous != nil && !o.previous.Released.IsZero() }

// Previous returns the volume's previous owner as LastOwnerKey said at the
// acquisition (its terms, its lease's ID if recorded, and whether it
// released the volume), or nil for a volume that never recorded one.
func (o *Owner) Previous() *Holder {
	if o.previous == nil {
		return nil
	}
	p := *o.previous
	return &p
}

// TakeoverWait returns how long after Acquire this host must wait before
// its first data request, given ioBound, its own bound on a request's time
// in flight: nothing after a clean release; otherwise the longest of its
// own TTL + Margin + ioBound and the previous owner's, since the previous
// owner's deadline may have ended up to its TTL after the takeover (a
// revoked lease) and its requests then in flight up to its I/O bound
// later.
func (o *Owner) TakeoverWait(ioBound time.Duration) time.Duration {
	if o.Clean() {
		return 0
	}
	wait := o.ttl + o.margin + ioBound
	if p := o.previous; p != nil {
		wait = max(wait, p.TTL+p.Margin+p.IOBound)
	}
	return wait
}

// Deadline returns the instant until which this host provably owns the
// volume: the send time of the last keep-alive whose success, and the
// owner key's, was confirmed, plus the TTL, minus the margin.
func (o *Owner) Deadline() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.deadline
}

// LastRenewal returns the send time of the last confirmed keep-alive (or
// of the grant).
func (o *Owner) LastRenewal() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.renewed
}

// KeepAlives returns the number of keep-alives sent, and of those that
// failed.
func (o *Owner) KeepAlives() (sent, failed uint64) {
	return o.keepAlives.Load(), o.keepAliveFailures.Load()
}

// Lost returns a channel closed when the Owner has lost the volume (or
// released it); Err then says how.
func (o *Owner) Lost() <-chan struct{} { return o.lost }

// Err returns nil while the Owner has not lost the volume, and then why.
func (o *Owner) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.mu.err
}

// Notify calls fn with the current deadline (and nil, or the loss's
// error), then again after every renewal with the new deadline, and once
// when the volume is lost or released. The calls are never concurrent; fn
// must not block, nor call Notify.
func (o *Owner) Notify(fn func(deadline time.Time, err error)) {
	o.nmu.Lock()
	defer o.nmu.Unlock()
	o.watchers = append(o.watchers, fn)
	o.mu.Lock()
	dl, err := o.mu.deadline, o.mu.err
	o.mu.Unlock()
	fn(dl, err)
}

// notify calls the watchers with the current state.
func (o *Owner) notify() {
	o.nmu.Lock()
	defer o.nmu.Unlock()
	o.mu.Lock()
	dl, err := o.mu.deadline, o.mu.err
	o.mu.Unlock()
	for _, fn := range o.watchers {
		fn(dl, err)
	}
}

// lose records that the volume is lost (the first cause wins) and tells
// the watchers.
func (o *Owner) lose(err error) {
	o.mu.Lock()
	if o.mu.err != nil {
		o.mu.Unlock()
		return
	}
	o.mu.err = err
	close(o.lost)
	o.mu.Unlock()
	o.kv.cache.disable()
	o.notify()
}

// run keeps the lease alive: a keep-alive every TTL/4 (every TTL/20 after
// a failure) until stop, or the loss of the lease.
func (o *Owner) run() {
	defer close(o.done)
	interval, retry := o.ttl/4, max(o.ttl/20, 20*time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-o.lost:
			return
		case <-t.C:
		}
		err := o.renew()
		var lost *lostError
		if errors.As(err, &lost) {
			o.lose(lost.err)
			return
		}
		next := interval
		if err != nil {
			o.keepAliveFailures.Add(1)
			next = retry
		}
		t.Reset(next)
	}
}

// lostError marks renew's errors that prove the lease lost.
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }

// renew sends one keep-alive and, if etcd renewed the lease, checks that
// the owner key still carries it before moving the deadline: an operator
// may have deleted the key (a forced takeover) while the lease lives on.
func (o *Owner) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), min(o.kv.opts.RequestTimeout, o.ttl/2))
	defer cancel()
	sent := time.Now()
	o.keepAlives.Add(1)
	resp, err := o.kv.client.KeepAliveOnce(ctx, o.id)
	o.kv.stats.observe(sent, err)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return &lostError{fmt.Errorf("%w: lease %x expired or was revoked", ErrNotOwner, int64(o.id))}
	}
	if err != nil {
		return err
	}
	start := time.Now()
	g, err := o.kv.client.Get(ctx, o.key)
	o.kv.stats.observe(start, err)
	if err != nil {
		return err
	}
	if len(g.Kvs) == 0 {
		return &lostError{fmt.Errorf("%w: the owner key was deleted (lease %x still alive)", ErrNotOwner, int64(o.id))}
	}
	if g.Kvs[0].Lease != int64(o.id) {
		return &lostError{fmt.Errorf("%w: the volume is now owned by %s", ErrNotOwner, decodeHolder(g.Kvs[0]))}
	}
	o.mu.Lock()
	o.mu.deadline = sent.Add(time.Duration(resp.TTL)*time.Second - o.margin)
	o.mu.renewed = sent
	o.mu.Unlock()
	o.notify()
	return nil
}

// stopLoop ends the keep-alive goroutine and waits for it.
func (o *Owner) stopLoop() {
	o.stopOnce.Do(func() { close(o.stop) })
	<-o.done
}

// Release gives the volume up cleanly, for a host that has completed its
// last data request and whose predecessor's requests are over too (its
// takeover wait has passed, or it was Clean): it deletes the owner key and
// marks LastOwnerKey released in one transaction (if the key still carries
// the lease), so that the next owner need not wait (Clean), then revokes
// the lease. Afterwards every commit fails with ErrNotOwner, and the watchers
// are told. A lost Owner only revokes its lease. Release and Revoke are
// idempotent: the first call counts.
func (o *Owner) Release() error { return o.release(true) }

// Revoke gives the volume up without vouching for the data requests: it
// revokes the lease (etcd deletes the owner key with it), so the next
// owner waits as after a crash. It is for a host that gives up before its
// takeover wait has passed.
func (o *Owner) Revoke() error { return o.release(false) }

func (o *Owner) release(clean bool) error {
	o.stopLoop()
	o.mu.Lock()
	already, lostErr := o.mu.released, o.mu.err
	o.mu.released = true
	o.mu.Unlock()
	if already {
		return nil
	}
	o.kv.cache.disable()
	var err error
	if lostErr == nil && clean {
		h := o.holder
		h.Released = time.Now().UTC().Truncate(time.Second) // h.Lease stays: the next owner's Previous
		value, _ := json.Marshal(&h)
		ctx, cancel := o.kv.ctx()
		start := time.Now()
		_, err = o.kv.client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(o.key), "=", int64(o.id))).
			Then(clientv3.OpDelete(o.key), clientv3.OpPut(o.kv.key([]byte(LastOwnerKey)), string(value))).
			Commit()
		o.kv.stats.observe(start, err)
		cancel()
		if err != nil {
			err = opError("release", []byte(OwnerKey), fmt.Errorf("the lease expires in %v instead: %w", o.ttl, err))
		}
	}
	o.kv.revoke(o.id)
	o.lose(errReleased)
	return err
}

// OwnerOf returns the volume's holder, with its lease's ID and remaining
// time to live, or nil if nobody owns the volume.
func (kv *KV) OwnerOf() (*Holder, error) {
	ctx, cancel := kv.ctx()
	defer cancel()
	start := time.Now()
	resp, err := kv.client.Get(ctx, kv.key([]byte(OwnerKey)))
	kv.stats.observe(start, err)
	if err != nil {
		return nil, opError("owner", []byte(OwnerKey), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	h := decodeHolder(resp.Kvs[0])
	if h.Lease != 0 {
		start := time.Now()
		ttl, err := kv.client.TimeToLive(ctx, clientv3.LeaseID(h.Lease))
		kv.stats.observe(start, err)
		if err == nil && ttl.TTL >= 0 {
			h.TTLLeft = time.Duration(ttl.TTL) * time.Second
		}
	}
	return h, nil
}

// MarkReleased records h as the volume's last owner, released
// (LastOwnerKey), unless someone owns the volume: mkfs does, so that the
// first owner of a new volume need not wait (Owner.Clean).
func (kv *KV) MarkReleased(h Holder) error {
	h.Lease, h.TTLLeft = 0, 0
	if h.Released.IsZero() {
		h.Released = time.Now().UTC().Truncate(time.Second)
	}
	value, err := json.Marshal(&h)
	if err != nil {
		return err
	}
	ctx, cancel := kv.ctx()
	defer cancel()
	start := time.Now()
	resp, err := kv.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(kv.key([]byte(OwnerKey))), "=", 0)).
		Then(clientv3.OpPut(kv.key([]byte(LastOwnerKey)), string(value))).
		Commit()
	kv.stats.observe(start, err)
	if err != nil {
		return opError("mark released", []byte(LastOwnerKey), err)
	}
	if !resp.Succeeded {
		return opError("mark released", []byte(LastOwnerKey), ErrHeld)
	}
	return nil
}

// cmp is the comparison every commit of an owned KV makes: the owner key
// still carries the Owner's lease. (etcd compares the lease of an absent
// key as 0, which no lease has.)
func (o *Owner) cmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.LeaseValue(o.key), "=", int64(o.id))
}

// guardCmp is the comparison that makes a commit of an owned KV apply at
// most once, however often it is sent: LastOwnerKey has not changed since
// the last commit known to apply, each of which writes it (guardPut).
//
// Preconditions: o.commit is held.
func (o *Owner) guardCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(o.lastKey), "=", o.commit.guardRev)
}

// guardPut writes LastOwnerKey again, as it is: its mod revision becomes
// the commit's.
func (o *Owner) guardPut() clientv3.Op { return clientv3.OpPut(o.lastKey, o.lastValue) }

// refusal reads a commit refused by the owner's comparisons: whether the
// owner key still carries the lease (then the guard moved), and
// LastOwnerKey's mod revision.
func (o *Owner) refusal(resp *clientv3.TxnResponse) (ours bool, lastRev int64) {
	if len(resp.Responses) < 2 {
		return false, 0
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		ours = kvs[0].Lease == int64(o.id)
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		lastRev = kvs[0].ModRevision
	}
	return ours, lastRev
}

// wrap returns the request etcd receives for a commit inner of an owned
// KV, to check its size: inner, with the guard's write, nested in the
// owner's and the guard's comparisons, reading the owner key and
// LastOwnerKey otherwise.
//
// Preconditions: o.commit is held.
func (o *Owner) wrap(inner *pb.TxnRequest) *pb.TxnRequest {
	c, g := o.cmp(), o.guardCmp()
	in := proto.Clone(inner).(*pb.TxnRequest)
	in.Success = append(in.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
		RequestPut: &pb.PutRequest{Key: []byte(o.lastKey), Value: []byte(o.lastValue)}}})
	get := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
	}
	return &pb.TxnRequest{
		Compare: []*pb.Compare{c.GetCompare(), g.GetCompare()},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: in}}},
		Failure: []*pb.RequestOp{get(o.key), get(o.lastKey)},
	}
}

// describeLoss says, from a commit refused by the owner's comparison, who
// holds the owner key now.
func (o *Owner) describeLoss(resp *clientv3.TxnResponse) string {
	if len(resp.Responses) > 0 {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			return fmt.Sprintf("the owner key no longer carries lease %x: the volume is owned by %s", int64(o.id), decodeHolder(kvs[0]))
		}
	}
	return fmt.Sprintf("the owner key (lease %x) is gone: the lease expired or was revoked", int64(o.id))
}
