package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicefs/sluice/meta/etcdkv"
	"github.com/sluicefs/sluice/volume"
)

// etcdCollector exports, at each scrape, what a mount of a volume in etcd
// does with etcd (etcdkv.KV.Stats), its lease (etcdkv.Owner) and its data
// fence (fencedev.Device.Stats):
//
//	sluice_etcd_request_duration_seconds       histogram of round trips
//	sluice_etcd_request_errors_total           round trips that failed
//	sluice_etcd_commits_total                  commits that wrote
//	sluice_etcd_txn_conflicts_total            commits refused: a read changed
//	sluice_etcd_txn_retries_total              commits sent again (no leader)
//	sluice_etcd_not_owner_total                commits refused: lease lost
//	sluice_lease_keepalive_age_seconds         since the last confirmed keep-alive was sent
//	sluice_lease_deadline_seconds              until the fence's deadline (negative: passed)
//	sluice_lease_ttl_seconds                   the lease's TTL
//	sluice_lease_keepalives_total{result}      keep-alives sent, by ok/failed
//	sluice_lease_lost                          1 once the lease is lost
//	sluice_fence_requests_total{fate}          data requests: submitted, held, fenced, overdue
//	sluice_fence_inflight                      data requests in the device now
//	sluice_data_reservation{state,key}         1: the data device's persistent reservation, held or unsupported
type etcdCollector struct {
	kv *etcdkv.KV
	v  *volume.Volume
}

var (
	etcdLatencyDesc   = prometheus.NewDesc("sluice_etcd_request_duration_seconds", "Round trips to etcd (reads, scan pages, commits, keep-alives), by duration.", nil, nil)
	etcdErrorsDesc    = prometheus.NewDesc("sluice_etcd_request_errors_total", "Round trips to etcd that failed.", nil, nil)
	etcdCommitsDesc   = prometheus.NewDesc("sluice_etcd_commits_total", "Metadata commits that etcd applied.", nil, nil)
	etcdConflictsDesc = prometheus.NewDesc("sluice_etcd_txn_conflicts_total", "Commits refused because a key they read or a range they scanned had changed.", nil, nil)
	etcdRetriesDesc   = prometheus.NewDesc("sluice_etcd_txn_retries_total", "Commits sent again after etcd refused them before proposing them (no leader).", nil, nil)
	etcdNotOwnerDesc  = prometheus.NewDesc("sluice_etcd_not_owner_total", "Commits refused because this host no longer owns the volume.", nil, nil)
	leaseAgeDesc      = prometheus.NewDesc("sluice_lease_keepalive_age_seconds", "Time since the last keep-alive whose renewal was confirmed was sent.", nil, nil)
	leaseDeadlineDesc = prometheus.NewDesc("sluice_lease_deadline_seconds", "Time left until the data fence's deadline (negative once passed).", nil, nil)
	leaseTTLDesc      = prometheus.NewDesc("sluice_lease_ttl_seconds", "The TTL etcd granted the lease.", nil, nil)
	leaseKADesc       = prometheus.NewDesc("sluice_lease_keepalives_total", "Keep-alives sent, by result.", []string{"result"}, nil)
	leaseLostDesc     = prometheus.NewDesc("sluice_lease_lost", "1 once this host has lost (or released) the volume's lease.", nil, nil)
	fenceDesc         = prometheus.NewDesc("sluice_fence_requests_total", "Data requests through the fence: submitted, held (waited for the window), fenced (failed), overdue (in the device longer than the I/O bound).", []string{"fate"}, nil)
	fenceInflightDesc = prometheus.NewDesc("sluice_fence_inflight", "Data requests in the device now.", nil, nil)
	reservationDesc   = prometheus.NewDesc("sluice_data_reservation", "1, labelled with the state of the data device's persistent reservation (held, or unsupported by the device) and this ownership's key.", []string{"state", "key"}, nil)
)

// registerEtcdMetrics adds the etcd, lease and fence metrics of v (a
// volume in etcd) to reg; it does nothing for a volume on Pebble.
func registerEtcdMetrics(reg *prometheus.Registry, v *volume.Volume) {
	kv, ok := v.KV.(*etcdkv.KV)
	if !ok {
		return
	}
	reg.MustRegister(etcdCollector{kv: kv, v: v})
}

func (c etcdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{etcdLatencyDesc, etcdErrorsDesc, etcdCommitsDesc, etcdConflictsDesc, etcdRetriesDesc,
		etcdNotOwnerDesc, leaseAgeDesc, leaseDeadlineDesc, leaseTTLDesc, leaseKADesc, leaseLostDesc, fenceDesc, fenceInflightDesc, reservationDesc} {
		ch <- d
	}
}

func (c etcdCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.kv.Stats()
	buckets := make(map[float64]uint64, len(etcdkv.LatencyBounds))
	var cum uint64
	for i, b := range etcdkv.LatencyBounds {
		cum += s.Latency[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(etcdLatencyDesc, s.Requests, s.LatencySum.Seconds(), buckets)
	counter := func(d *prometheus.Desc, n uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n), labels...)
	}
	gauge := func(d *prometheus.Desc, x float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x)
	}
	counter(etcdErrorsDesc, s.Errors)
	counter(etcdCommitsDesc, s.Commits)
	counter(etcdConflictsDesc, s.Conflicts)
	counter(etcdRetriesDesc, s.Retries)
	counter(etcdNotOwnerDesc, s.NotOwner)
	if o := c.v.Owner; o != nil {
		now := time.Now()
		gauge(leaseAgeDesc, now.Sub(o.LastRenewal()).Seconds())
		gauge(leaseDeadlineDesc, o.Deadline().Sub(now).Seconds())
		gauge(leaseTTLDesc, o.TTL().Seconds())
		sent, failed := o.KeepAlives()
		counter(leaseKADesc, sent-failed, "ok")
		counter(leaseKADesc, failed, "failed")
		lost := 0.0
		if o.Err() != nil {
			lost = 1
		}
		gauge(leaseLostDesc, lost)
	}
	if f := c.v.Fence; f != nil {
		fs := f.Stats()
		counter(fenceDesc, uint64(fs.Submitted), "submitted")
		counter(fenceDesc, uint64(fs.Held), "held")
		counter(fenceDesc, uint64(fs.Fenced), "fenced")
		counter(fenceDesc, uint64(fs.Overdue), "overdue")
		gauge(fenceInflightDesc, float64(fs.InFlight))
	}
	if r := c.v.Reservation; r != nil {
		state := "unsupported"
		if r.Held {
			state = "held"
		}
		ch <- prometheus.MustNewConstMetric(reservationDesc, prometheus.GaugeValue, 1, state, fmt.Sprintf("%#x", r.Key))
	}
}
