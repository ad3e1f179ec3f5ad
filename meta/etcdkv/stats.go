package etcdkv

import (
	"sync/atomic"
	"time"
)

// LatencyBounds are the upper bounds of Stats.Latency's buckets, as a
// Prometheus histogram's le labels: a request that took d is counted in
// the first bucket whose bound is >= d, or in the last (+Inf) bucket.
var LatencyBounds = []time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second,
}

// Stats counts a KV's requests to etcd and their outcomes, since Open.
type Stats struct {
	// Requests counts the round trips to etcd: reads (a scan's pages one
	// each), commits (each send), keep-alives, the owner's checks.
	Requests uint64
	// Errors counts the round trips that failed (a refused comparison is
	// not a failure: it is counted below).
	Errors uint64
	// Latency counts the round trips by duration: Latency[i] those that
	// took at most LatencyBounds[i] (and more than the bound before), the
	// last element those that took longer than every bound.
	Latency [15]uint64
	// LatencySum is the total duration of the round trips.
	LatencySum time.Duration
	// Commits counts the commits that wrote; Conflicts those refused
	// because something they read changed (ErrConflict); NotOwner those
	// refused because the volume's owner key no longer carries this
	// host's lease (ErrNotOwner).
	Commits, Conflicts, NotOwner uint64
	// Retries counts the commits sent again after the cluster refused them
	// before proposing them to raft (no leader, a dropped proposal), or,
	// for an owned KV, after an attempt that got no answer ("Outcomes" in
	// the package doc).
	Retries uint64
	// Reads counts the round trips that read keys (Get, a Scan's pages,
	// a Snapshot's revision, a Txn's reads); CommitRequests those that
	// sent a commit (each send). The rest of Requests are the lease's
	// (grants, keep-alives, the owner's checks) and health checks.
	Reads, CommitRequests uint64
	// CacheHits counts the Gets and Scans served by the read cache,
	// without a round trip.
	CacheHits uint64
}

// counters are a KV's Stats, updated atomically on the request path.
type counters struct {
	requests, errors                    atomic.Uint64
	latency                             [15]atomic.Uint64
	latencySum                          atomic.Int64
	commits, conflicts, notOwner, retry atomic.Uint64
	reads, commitRequests, cacheHits    atomic.Uint64
}

// observeRead counts one round trip that read keys.
func (c *counters) observeRead(start time.Time, err error) {
	c.reads.Add(1)
	c.observe(start, err)
}

// observeCommit counts one round trip that sent a commit.
func (c *counters) observeCommit(start time.Time, err error) {
	c.commitRequests.Add(1)
	c.observe(start, err)
}

// observe counts one round trip that started at start.
func (c *counters) observe(start time.Time, err error) {
	d := time.Since(start)
	c.requests.Add(1)
	if err != nil {
		c.errors.Add(1)
	}
	c.latencySum.Add(int64(d))
	i := 0
	for i < len(LatencyBounds) && d > LatencyBounds[i] {
		i++
	}
	c.latency[i].Add(1)
}

// Stats returns the KV's counters, each read atomically.
func (kv *KV) Stats() Stats {
	c := &kv.stats
	s := Stats{
		Requests:   c.requests.Load(),
		Errors:     c.errors.Load(),
		LatencySum: time.Duration(c.latencySum.Load()),
		Commits:    c.commits.Load(),
		Conflicts:  c.conflicts.Load(),
		NotOwner:   c.notOwner.Load(),
		Retries:    c.retry.Load(),

		Reads:          c.reads.Load(),
		CommitRequests: c.commitRequests.Load(),
		CacheHits:      c.cacheHits.Load(),
	}
	for i := range s.Latency {
		s.Latency[i] = c.latency[i].Load()
	}
	return s
}
