package sluice

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluicefs/sluice/device"
)

// Counters records every decision of the I/O path, cheaply (atomics, no
// locks), so that tests can observe concurrency deterministically and the
// benchmark and the metrics endpoint can report it. Read them with
// FS.Counters; field names are the metric names.
type Counters struct {
	// I/O lock acquisitions by mode and path.
	LockSharedDirectRead    atomic.Int64
	LockExclDirectRead      atomic.Int64 // classic direct reads
	LockSharedDirectWrite   atomic.Int64
	LockExclDirectWrite     atomic.Int64
	LockSharedUnaligned     atomic.Int64 // optimistic sub-block attempts
	LockExclUnaligned       atomic.Int64 // exclusive sub-block writes
	LockExclBuffered        atomic.Int64
	LockSharedBufferedRead  atomic.Int64
	LockExclSpace           atomic.Int64 // truncate, fallocate, punch
	LockUpgrades            atomic.Int64 // shared dropped and retaken exclusive
	UnalignedEAGAINRetries  atomic.Int64 // overwrite-only attempts that fell back
	LockRangeUnaligned      atomic.Int64 // sub-block direct writes under a block range (BlockRangeExclusion)
	LockSharedAppend        atomic.Int64 // parallel appends (shared lock, reserved range)
	ConvsBatched            atomic.Int64 // direct-write conversions committed in another's transaction (convGroup)
	RecordsDeferred         atomic.Int64 // conversions and remaps whose record changes waited for the next transaction (inode.recs)
	DataSyncsFlushOnly      atomic.Int64 // fdatasync and O_DSYNC writes that found the metadata durable and only flushed the device
	InodeLoads              atomic.Int64 // inode records read from the metadata (not a new inode's: create keeps its record)
	AttrsDeferred           atomic.Int64 // attribute changes (chmod, chown, utimes) left in-core for the next transaction or sync point
	ConvLeaderHandoffs      atomic.Int64 // conversion batches a leader left to the batch's newest request
	AppendPublishWaits      atomic.Int64 // appends that completed before an earlier one and waited to be published
	AppendsReleased         atomic.Int64 // failed appends whose reservation was given back (nothing after them)
	AppendsZeroed           atomic.Int64 // failed appends published as zeros (later appends kept)
	AppendConvDeferred      atomic.Int64 // writeback conversions past EOF left to an append's publication
	AppendEOFPagesUncached  atomic.Int64 // EOF pages read while appends were in flight, not kept in the cache
	NoWaitEAGAIN            atomic.Int64 // NOWAIT requests that gave up (fs.nowaitEAGAIN), by reason below
	NoWaitLockBusy          atomic.Int64 // the I/O lock was not free
	NoWaitNeedExclusive     atomic.Int64 // the write needed the lock exclusive
	NoWaitDrain             atomic.Int64 // direct I/O in flight
	NoWaitCachedPages       atomic.Int64 // pages in the range to write back or drop
	NoWaitAllocate          atomic.Int64 // blocks to allocate
	NoWaitSync              atomic.Int64 // an O_DSYNC write-through
	NoWaitPageCache         atomic.Int64 // a page busy or to read, or no room in the cache
	NoWaitRangeBusy         atomic.Int64 // a block range held or queued for
	Drains                  atomic.Int64 // waits for in-flight direct I/O
	DirectReads             atomic.Int64
	DirectWrites            atomic.Int64
	DirectZeroFill          atomic.Int64 // direct-read segments served as zeros
	MaxDirectInFlightFile   atomic.Int64 // max direct I/Os in flight on one file
	DeviceReads             atomic.Int64
	DeviceWrites            atomic.Int64
	DeviceFlushes           atomic.Int64
	DeviceInFlight          atomic.Int64
	MaxDeviceInFlight       atomic.Int64
	MetaCommits             atomic.Int64
	SyncPoints              atomic.Int64
	BlocksAllocated         atomic.Int64
	ConversionsPending      atomic.Int64
	CacheReads              atomic.Int64 // device reads issued by the page cache
	CacheReadsAvoided       atomic.Int64 // page reads the read-before-write rule skipped
	RBWSkipFullWrite        atomic.Int64 // readBeforeWrite: no read, the write covers the page below EOF
	RBWSkipPending          atomic.Int64 // readBeforeWrite: no read, the write extends a pending write
	RBWSkipUnitAligned      atomic.Int64 // readBeforeWrite: no read, the write's ends are I/O-unit aligned
	RBWReadClassic          atomic.Int64 // readBeforeWrite: read, classic policy
	RBWReadPartial          atomic.Int64 // readBeforeWrite: read, a partial write with nothing pending
	RBWReadIncompatible     atomic.Int64 // readBeforeWrite: read, a pending write this one cannot extend
	RBWReadZeroUnit         atomic.Int64 // readBeforeWrite: I/O units read before zeroing part of them on the device
	CacheWritebackPages     atomic.Int64
	CacheRMWUnitReads       atomic.Int64 // readBeforeWrite at writeback: I/O units read back (block-granular devices)
	BufferedReads           atomic.Int64
	BufferedWrites          atomic.Int64
	ReadaheadPages          atomic.Int64
	UnitNeighbourPages      atomic.Int64 // pages filled from an I/O unit read for another page
	WritebackErrors         atomic.Int64
	AsyncReadCallbacksArmed atomic.Int64 // async buffered reads parked on a page
	DontCacheDropped        atomic.Int64 // RWFDontCache: pages dropped once clean
	DontCacheBusy           atomic.Int64 // RWFDontCache: pages kept, locked or dirtied again when they could have gone
	RenameWhiteouts         atomic.Int64 // whiteouts left by RenameWhiteout
	// Reflink and copy-on-write (cow.go, reflink.go).
	Clones             atomic.Int64 // clone and dedupe operations that shared blocks
	ClonedBlocks       atomic.Int64 // blocks they shared
	LockRangeCow       atomic.Int64 // aligned direct writes holding their shared blocks' range
	CowWrites          atomic.Int64 // direct writes that wrote shared blocks out of place
	CowCopiedBlocks    atomic.Int64 // shared blocks copied before a write (unshareLocked)
	CowRemaps          atomic.Int64 // copy-on-write runs remapped in core (pending until a sync point)
	CowStagedBlocks    atomic.Int64 // staging blocks handed to copies-on-write
	CowRefills         atomic.Int64 // transactions that allocated staging blocks ahead
	SharedWriteRefused atomic.Int64 // shared blocks a write path refused to write in place (never expected)
	Exchanges          atomic.Int64 // exchange-range operations that exchanged (ExchangeRange)
	EOFTailsZeroed     atomic.Int64 // EOF blocks whose tail past EOF held a crash's bytes, zeroed before a write at EOF (checkEOFTail)
	// Untorn writes (atomic.go).
	AtomicWrites           atomic.Int64 // RWFAtomic writes accepted
	AtomicWritesInPlace    atomic.Int64 // ... that found only holes and unwritten blocks: their conversion is the switch
	AtomicWritesOutOfPlace atomic.Int64 // ... that wrote written blocks to staging blocks, remapped in one transaction
	// Data checksums (sums.go).
	SumVerifiedBlocks atomic.Int64 // blocks read from the device and verified
	SumMismatches     atomic.Int64 // verifications that failed (or found no checksum)
	SumPartialWrites  atomic.Int64 // data writes of part of a block on a checksummed volume (never expected)
	SumRewrites       atomic.Int64 // writes that copied a block's other bytes to write it whole elsewhere
}

// CounterValues is a snapshot of Counters by name.
type CounterValues map[string]int64

// Counters returns a snapshot of every counter, plus the page cache's.
func (fs *FS) Counters() CounterValues {
	out := CounterValues{}
	v := reflect.ValueOf(&fs.counters).Elem()
	for i := 0; i < v.NumField(); i++ {
		out[v.Type().Field(i).Name] = v.Field(i).Addr().Interface().(*atomic.Int64).Load()
	}
	for k, val := range fs.cache.Stats().Values() {
		out["Cache"+k] = val
	}
	return out
}

// ResetCounters sets every counter to zero (maxima to the current value).
func (fs *FS) ResetCounters() {
	v := reflect.ValueOf(&fs.counters).Elem()
	for i := 0; i < v.NumField(); i++ {
		v.Field(i).Addr().Interface().(*atomic.Int64).Store(0)
	}
	fs.counters.MaxDeviceInFlight.Store(fs.counters.DeviceInFlight.Load())
}

// String renders the non-zero counters.
func (c CounterValues) String() string {
	var b strings.Builder
	for k, v := range c {
		if v != 0 {
			fmt.Fprintf(&b, "%s=%d ", k, v)
		}
	}
	return strings.TrimSpace(b.String())
}

// storeMax raises m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

// countingDevice wraps the data device to count I/Os and the depth in
// flight, as the engine issues them. It is the engine's only handle for
// data I/O (FS.dev) and the only place device requests are counted: every
// read, write and flush of the engine goes through Submit (ReadAt, WriteAt
// and Flush are Submit and a wait).
type countingDevice struct {
	device.Device
	c *Counters
}

func (d *countingDevice) count(op device.Op) {
	switch op {
	case device.OpRead:
		d.c.DeviceReads.Add(1)
	case device.OpWrite:
		d.c.DeviceWrites.Add(1)
	case device.OpFlush:
		d.c.DeviceFlushes.Add(1)
	}
	storeMax(&d.c.MaxDeviceInFlight, d.c.DeviceInFlight.Add(1))
}

// countedDone stands in for a request's Done while it is in flight, to
// count its completion. Pooled, with its method value bound once, so that
// counting allocates nothing per request.
type countedDone struct {
	c    *Counters
	done func(*device.Request, error)
	fn   func(*device.Request, error) // complete, bound once
}

var countedDonePool = sync.Pool{New: func() any { return new(countedDone) }}

func (cd *countedDone) complete(r *device.Request, err error) {
	c, done := cd.c, cd.done
	cd.c, cd.done = nil, nil
	countedDonePool.Put(cd)
	c.DeviceInFlight.Add(-1)
	r.Done = done
	done(r, err)
}

// Submit counts r and submits it.
func (d *countingDevice) Submit(r *device.Request) error {
	d.count(r.Op)
	cd := countedDonePool.Get().(*countedDone)
	if cd.fn == nil {
		cd.fn = cd.complete
	}
	cd.c, cd.done = d.c, r.Done
	r.Done = cd.fn
	if err := d.Device.Submit(r); err != nil {
		r.Done = cd.done
		cd.c, cd.done = nil, nil
		countedDonePool.Put(cd)
		d.c.DeviceInFlight.Add(-1)
		return err
	}
	return nil
}
