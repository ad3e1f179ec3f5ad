package fusefs

import (
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

func TestLatencyHistBuckets(t *testing.T) {
	var h latencyHist
	for _, d := range []time.Duration{0, 4096, 4097, 8192, 8193, time.Second, time.Hour} {
		h.observe(d)
	}
	want := map[int]uint64{0: 2, 1: 2, 2: 1, 18: 1, 19: 1}
	for i := range h.buckets {
		if got := h.buckets[i].Load(); got != want[i] {
			t.Errorf("bucket %d: %d, want %d", i, got, want[i])
		}
	}
	if h.count.Load() != 7 {
		t.Errorf("count %d", h.count.Load())
	}
}

// TestMetricsEndpoint: the handler serves per-op latency histograms and
// one metric per engine counter.
func TestMetricsEndpoint(t *testing.T) {
	m := NewMetrics()
	e := newMountEnv(t, envOpts{fuse: Options{Metrics: m}})
	if err := os.WriteFile(e.path("x"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	for _, want := range []string{
		`sluice_fuse_op_duration_seconds_count{op="CREATE"} 1`,
		`sluice_fuse_op_duration_seconds_bucket{op="WRITE",le="+Inf"} 1`,
		"sluice_engine_meta_commits_total ",
		"sluice_engine_max_direct_in_flight_file ",
		"sluice_engine_cache_pages ",
		"sluice_fuse_panics_total 0",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}
