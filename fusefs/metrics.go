package fusefs

import (
	"math/bits"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicefs/sluice"
)

// op names a FUSE operation for the latency histograms.
type op uint8

const (
	opLookup op = iota
	opGetattr
	opSetattr
	opMknod
	opMkdir
	opUnlink
	opRmdir
	opRename
	opLink
	opSymlink
	opReadlink
	opOpen
	opCreate
	opRead
	opWrite
	opRelease
	opFlush
	opFsync
	opFallocate
	opLseek
	opOpendir
	opReaddir
	opReaddirplus
	opReleasedir
	opFsyncdir
	opStatfs
	opGetxattr
	opListxattr
	opSetxattr
	opRemovexattr
	opAccess
	opSyncfs
	opCopyFileRange
	opStatx
	opIoctl
	opCount
)

var opNames = [opCount]string{
	opLookup: "LOOKUP", opGetattr: "GETATTR", opSetattr: "SETATTR", opMknod: "MKNOD", opMkdir: "MKDIR",
	opUnlink: "UNLINK", opRmdir: "RMDIR", opRename: "RENAME", opLink: "LINK", opSymlink: "SYMLINK",
	opReadlink: "READLINK", opOpen: "OPEN", opCreate: "CREATE", opRead: "READ", opWrite: "WRITE",
	opRelease: "RELEASE", opFlush: "FLUSH", opFsync: "FSYNC", opFallocate: "FALLOCATE", opLseek: "LSEEK",
	opOpendir: "OPENDIR", opReaddir: "READDIR", opReaddirplus: "READDIRPLUS", opReleasedir: "RELEASEDIR",
	opFsyncdir: "FSYNCDIR", opStatfs: "STATFS", opGetxattr: "GETXATTR", opListxattr: "LISTXATTR",
	opSetxattr: "SETXATTR", opRemovexattr: "REMOVEXATTR", opAccess: "ACCESS", opSyncfs: "SYNCFS",
	opCopyFileRange: "COPY_FILE_RANGE", opStatx: "STATX", opIoctl: "IOCTL",
}

func (o op) String() string { return opNames[o] }

// engineGauges are the engine counters that are levels, not running
// totals: exported as gauges. The rest are counters.
var engineGauges = map[string]bool{
	"DeviceInFlight": true, "MaxDeviceInFlight": true, "MaxDirectInFlightFile": true,
	"ConversionsPending": true, "CachePages": true, "CacheDirtyPages": true, "CacheLockedPages": true,
	"CacheBytes": true, "CacheBuffers": true, "CacheCapacityPages": true,
}

// Metrics is the Prometheus face of a mount: a histogram of latency per
// FUSE operation (sluice_fuse_op_duration_seconds{op}), counters of
// panics, I/O errors and unaligned O_DIRECT requests, one metric per engine
// counter (sluice_engine_*, read from FS.Counters at each scrape), and the
// Go runtime and process collectors. It is safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	ops      [opCount]latencyHist
	panics   prometheus.Counter
	ioErrors prometheus.Counter
	// unaligned counts O_DIRECT requests served by the unaligned fallback.
	unaligned prometheus.Counter

	mu struct {
		sync.Mutex
		// engine is the file system whose counters are exported.
		// Protected by mu.
		engine *sluice.FS
	}
}

// NewMetrics returns a registry with the FUSE, engine and runtime metrics.
// Pass it in Options.Metrics, then serve Handler.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_fuse_panics_total",
		Help: "FUSE handlers that panicked (each answered EIO, with the stack logged).",
	})
	m.ioErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_fuse_io_errors_total",
		Help: "FUSE requests answered EIO.",
	})
	m.unaligned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_fuse_unaligned_direct_total",
		Help: "O_DIRECT reads and writes not aligned to the I/O unit, served by the fallback path.",
	})
	m.reg.MustRegister(opCollector{m}, m.panics, m.ioErrors, m.unaligned, engineCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry, for adding metrics or gathering in tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns the HTTP handler that serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// watch makes the engine counters of fs part of the metrics.
func (m *Metrics) watch(fs *sluice.FS) {
	m.mu.Lock()
	m.mu.engine = fs
	m.mu.Unlock()
}

// observe records the latency of one request that started at start.
func (m *Metrics) observe(o op, start time.Time) {
	m.ops[o].observe(time.Since(start))
}

// latencyBuckets is the number of buckets of a latencyHist: upper bounds
// 4 us * 2^i for i < latencyBuckets, then +Inf.
const latencyBuckets = 19

// latencyHist is a latency histogram cheap enough for every FUSE request:
// three atomic adds and no search (the bucket is a bit length), where a
// prometheus.Histogram costs a binary search and a compare-and-swap loop.
// It is exported as a Prometheus histogram at scrape time.
type latencyHist struct {
	count   atomic.Uint64
	sumNs   atomic.Uint64
	buckets [latencyBuckets + 1]atomic.Uint64 // not cumulative; the last is +Inf
}

func (h *latencyHist) observe(d time.Duration) {
	ns := uint64(max(d, 0))
	// Bucket i holds (4us*2^(i-1), 4us*2^i]; ns <= 4096 goes to 0.
	i := 0
	if ns > 4096 {
		i = bits.Len64((ns - 1) >> 12)
	}
	if i > latencyBuckets {
		i = latencyBuckets
	}
	h.buckets[i].Add(1)
	h.sumNs.Add(ns)
	h.count.Add(1)
}

// opCollector exports the per-operation latency histograms.
type opCollector struct{ m *Metrics }

var opDesc = prometheus.NewDesc("sluice_fuse_op_duration_seconds",
	"Time the daemon spent serving one FUSE request, by opcode.", []string{"op"}, nil)

func (opCollector) Describe(ch chan<- *prometheus.Desc) { ch <- opDesc }

func (c opCollector) Collect(ch chan<- prometheus.Metric) {
	for o := op(0); o < opCount; o++ {
		h := &c.m.ops[o]
		cum := map[float64]uint64{}
		var n uint64
		for i := 0; i < latencyBuckets; i++ {
			n += h.buckets[i].Load()
			cum[4096e-9*float64(uint64(1)<<i)] = n
		}
		ch <- prometheus.MustNewConstHistogram(opDesc, h.count.Load(), float64(h.sumNs.Load())/1e9, cum, o.String())
	}
}

// engineCollector exports the engine's counters at scrape time.
type engineCollector struct{ m *Metrics }

// Describe sends nothing: the engine's counter set is discovered at scrape
// time, which makes this an unchecked collector.
func (engineCollector) Describe(chan<- *prometheus.Desc) {}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	fs := c.m.mu.engine
	c.m.mu.Unlock()
	if fs == nil {
		return
	}
	vals := fs.Counters()
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		name, t, help := "sluice_engine_"+snake(k)+"_total", prometheus.CounterValue, "Engine counter "+k+" (running total)."
		if engineGauges[k] {
			name, t, help = "sluice_engine_"+snake(k), prometheus.GaugeValue, "Engine gauge "+k+"."
		}
		d := prometheus.NewDesc(name, help, nil, nil)
		ch <- prometheus.MustNewConstMetric(d, t, float64(vals[k]))
	}
}

// snake converts a Go field name to a metric name: MaxDirectInFlightFile
// becomes max_direct_in_flight_file, RMW stays rmw.
func snake(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		if unicode.IsUpper(c) {
			prevLower := i > 0 && unicode.IsLower(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1]) && i > 0 && unicode.IsUpper(r[i-1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
