package etcdkv

import (
	"context"
	"strings"
	"sync"
	"time"
)

// EndpointStatus is one etcd member's answer to a status request (etcd's
// Maintenance.Status, what `etcdctl endpoint status` shows).
type EndpointStatus struct {
	Endpoint string `json:"endpoint"`
	// Healthy: the member answered within RequestTimeout, knows a leader
	// and reports no alarm.
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
	Version string `json:"version,omitempty"`
	// Leader: this member is the raft leader.
	Leader   bool   `json:"leader"`
	RaftTerm uint64 `json:"raft_term,omitempty"`
	// DBSize is the size of the member's database file in bytes.
	DBSize int64 `json:"db_size,omitempty"`
	// Took is the request's round trip.
	Took time.Duration `json:"took_ns"`
}

// Health asks every endpoint for its status, all at once, each within
// RequestTimeout, and returns the answers in the order of the endpoints.
func (kv *KV) Health() []EndpointStatus {
	eps := kv.opts.Endpoints
	if len(eps) == 0 {
		eps = kv.client.Endpoints()
	}
	out := make([]EndpointStatus, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), kv.opts.RequestTimeout)
			defer cancel()
			start := time.Now()
			resp, err := kv.client.Status(ctx, ep)
			kv.stats.observe(start, err)
			s := EndpointStatus{Endpoint: ep, Took: time.Since(start)}
			switch {
			case err != nil:
				s.Error = err.Error()
			default:
				s.Version, s.RaftTerm, s.DBSize = resp.Version, resp.RaftTerm, resp.DbSize
				s.Leader = resp.Leader != 0 && resp.Leader == resp.Header.MemberId
				var problems []string
				if resp.Leader == 0 {
					problems = append(problems, "no leader")
				}
				problems = append(problems, resp.Errors...)
				s.Healthy = len(problems) == 0
				s.Error = strings.Join(problems, "; ")
			}
			out[i] = s
		}()
	}
	wg.Wait()
	return out
}
