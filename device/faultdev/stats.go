package faultdev

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicefs/sluice/device"
)

// OpStats counts the requests of one kind.
type OpStats struct {
	// Submitted counts the requests Submit accepted (passed validation).
	Submitted int64
	// Completed counts the requests whose Done has run or is about to:
	// successes and failures alike.
	Completed int64
	// Failed counts the completed requests that reported an error,
	// injected or from the inner device.
	Failed int64
	// Injected counts the requests an injector failed (before or after the
	// I/O).
	Injected int64
	// Corrupted counts the successful reads whose data a Corruption
	// corrupted (see Corruption). It is always 0 for writes and flushes.
	Corrupted int64
	// Bytes counts the bytes read or written by successful requests.
	Bytes int64
	// InFlight is the number of requests accepted and not yet completed,
	// including those delayed or held at a gate.
	InFlight int64
	// MaxInFlight is the largest InFlight since New or ResetStats.
	MaxInFlight int64
}

// Stats is a snapshot of a Device's counters.
type Stats struct {
	Read, Write, Flush OpStats
	// InFlight and MaxInFlight count requests of every kind together.
	InFlight, MaxInFlight int64
}

// Op returns the counters of requests of kind op.
func (s Stats) Op(op device.Op) OpStats {
	switch op {
	case device.OpRead:
		return s.Read
	case device.OpWrite:
		return s.Write
	case device.OpFlush:
		return s.Flush
	}
	return OpStats{}
}

// Injected returns the number of requests of any kind an injector failed.
func (s Stats) Injected() int64 { return s.Read.Injected + s.Write.Injected + s.Flush.Injected }

// String returns the snapshot in a form fit for a test log.
func (s Stats) String() string {
	return fmt.Sprintf("in flight %d (max %d); reads %v; writes %v; flushes %v",
		s.InFlight, s.MaxInFlight, s.Read, s.Write, s.Flush)
}

// String returns the counters in a form fit for a test log. It leaves out
// Corrupted when it is 0.
func (s OpStats) String() string {
	corrupted := ""
	if s.Corrupted != 0 {
		corrupted = fmt.Sprintf(", %d corrupted", s.Corrupted)
	}
	return fmt.Sprintf("%d submitted, %d completed, %d failed, %d injected%s, %d bytes, in flight %d (max %d)",
		s.Submitted, s.Completed, s.Failed, s.Injected, corrupted, s.Bytes, s.InFlight, s.MaxInFlight)
}

// Stats returns a snapshot of the counters. Each is read atomically, but not
// all at the same instant: see the package documentation.
func (d *Device) Stats() Stats {
	c := &d.stats
	s := Stats{InFlight: c.inflight.Load(), MaxInFlight: c.maxInflight.Load()}
	for op, p := range []*OpStats{&s.Read, &s.Write, &s.Flush} {
		o := &c.op[op]
		*p = OpStats{
			Submitted:   o.submitted.Load(),
			Completed:   o.completed.Load(),
			Failed:      o.failed.Load(),
			Injected:    o.injected.Load(),
			Corrupted:   o.corrupted.Load(),
			Bytes:       o.bytes.Load(),
			InFlight:    o.inflight.Load(),
			MaxInFlight: o.maxInflight.Load(),
		}
	}
	return s
}

// ResetStats zeroes the counters and sets each maximum in flight to the
// current number in flight. Requests in flight stay counted as such.
func (d *Device) ResetStats() {
	c := &d.stats
	for op := range c.op {
		o := &c.op[op]
		o.submitted.Store(0)
		o.completed.Store(0)
		o.failed.Store(0)
		o.injected.Store(0)
		o.corrupted.Store(0)
		o.bytes.Store(0)
		o.maxInflight.Store(o.inflight.Load())
	}
	c.maxInflight.Store(c.inflight.Load())
}

// counters are the live counters behind Stats. Each kind's counters sit on
// their own cache lines, so that readers and writers do not slow each
// other down.
type counters struct {
	op                    [device.OpFlush + 1]opCounters
	inflight, maxInflight atomic.Int64
}

type opCounters struct {
	submitted, completed, failed, injected, corrupted, bytes atomic.Int64
	inflight, maxInflight                                    atomic.Int64
	_                                                        [128 - 8*8]byte
}

func (c *counters) submit(op device.Op) {
	o := &c.op[op]
	o.submitted.Add(1)
	raise(&o.maxInflight, o.inflight.Add(1))
	raise(&c.maxInflight, c.inflight.Add(1))
}

func (c *counters) complete(op device.Op, n int, err error) {
	o := &c.op[op]
	if err != nil {
		o.failed.Add(1)
	} else if op != device.OpFlush {
		o.bytes.Add(int64(n))
	}
	o.completed.Add(1)
	o.inflight.Add(-1)
	c.inflight.Add(-1)
}

// raise sets *m to v if v is larger.
func raise(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}
