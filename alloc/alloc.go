// Package alloc manages the free space of a data device, in memory, as
// extents of blocks.
//
// An Allocator owns the blocks [first, end) of the device (block 0 holds the
// volume header, so a volume passes first = 1). It never does I/O: the engine
// persists the free-extent records that Changes reports in the same metadata
// batch as the file-extent changes that use them, so that both commit
// atomically, and rebuilds the Allocator at mount with Load.
//
// # Block states
//
// Every block in [first, end) is in exactly one of three states:
//
//   - used: handed out by Alloc or AllocReserved and not yet freed;
//   - allocatable: free, and Alloc may hand it out;
//   - busy: free, but freed by a metadata change (numbered seq by the
//     caller) that may not be durable yet. Busy blocks are free on disk — the
//     free record that contains them goes into the same batch as the change
//     that freed them — but are not handed out again until Unbusy(s) is
//     called with s >= seq, after that batch is synced. Otherwise a crash
//     could leave the old file still owning blocks that a new file has
//     already written to (XFS "busy extents": xfs_extent_busy_insert, and
//     xfs_extent_busy_clear at log-checkpoint completion).
//
// "Free" means allocatable or busy; the persisted form of the allocator is
// its free extents, maximal runs of free blocks, each a record keyed by its
// start block.
//
// # Invariants (verified by Check)
//
//   - Free extents are non-empty, lie inside [first, end), and are disjoint
//     and never adjacent: a freed extent coalesces with its free neighbours,
//     busy or not. FreeExtents lists them in order of Start.
//   - Allocatable extents are maximal runs too; busy extents are disjoint,
//     disjoint from allocatable ones, and allocatable plus busy is exactly
//     the free set.
//   - Reserved blocks never exceed free blocks (see Reservations).
//   - Journal: if M is a map from start block to extent that starts out as
//     the records the Allocator was built from (empty for New, the records
//     given to Load), then applying every Changes call, in order, to M leaves
//     M equal to FreeExtents().
//
// # Using it from the engine
//
// Under the engine's commit lock, a transaction calls Alloc/AllocReserved for
// the blocks it maps and Free(e, seq) for the blocks it unmaps, where seq is
// the sequence number of the metadata batch being built; then Changes(put,
// del) adds the free-extent record changes to that batch, which is then
// committed. Once a metadata sync covering batch seq has completed, the
// engine calls Unbusy(seq). When Alloc fails with ErrBusy, the engine forces a
// metadata sync (which ends in Unbusy) and retries. An extent that was
// allocated but never referenced by any metadata, because the write using it
// failed, goes back with Cancel, which skips the busy state.
//
// # Placement
//
// Alloc(hint, want) returns one extent of 1..want blocks, chosen thus
// (hint outside [first, end) is taken as first):
//
//  1. If block hint is allocatable, the extent starts exactly at hint and
//     takes as many blocks as are allocatable from there, up to want. The
//     engine passes the block after a file's previous extent, so a file
//     written sequentially stays contiguous.
//  2. Otherwise the allocatable extents at or after hint are visited in
//     order, wrapping around to first, up to scanWindow of them: the first
//     one with at least want blocks is used from its start; if none of them
//     is long enough, the longest (the first of equal ones) is used whole.
//     So a request is not split across a short fragment when a run that
//     holds it all lies just beyond, and big runs are cut from their start,
//     never from their middle.
//
// Each step is O(log n) in the number of free extents; placement is
// deterministic.
//
// # Reservations
//
// Delayed allocation (buffered writes that get their blocks at writeback)
// must not fail with ENOSPC at writeback, so the write reserves its blocks
// up front (analogous to XFS's delalloc reservation against fdblocks, and
// ext4's dirty-clusters counter). Reservation is a single counter, not
// tied to blocks or files; the engine tracks who holds how much.
//
//   - Reserve(n) succeeds if free blocks (allocatable or busy) minus blocks
//     already reserved are at least n, and adds n to the reservation.
//   - AllocReserved(hint, want) allocates as Alloc does and subtracts the
//     blocks it returns from the reservation; want may not exceed the
//     reservation. It never returns ErrNoSpace: at worst ErrBusy, until the
//     next Unbusy, because reserved <= free always holds.
//   - Alloc never dips into reserved blocks: it returns at most free minus
//     reserved blocks, and ErrNoSpace when that is zero.
//   - Unreserve(n) gives back reserved blocks that will not be allocated.
//
// # Concurrency
//
// An Allocator is safe for concurrent use: every method takes an internal
// mutex, held only for the in-memory work (no I/O, no allocation beyond
// B-tree nodes and the journal). The engine normally calls it under its
// commit lock anyway. Changes calls put and del with the mutex held, so
// they must not call the Allocator.
//
// # Errors
//
// Every error is an *Error naming the call, wrapping ErrNoSpace, ErrBusy
// (both ENOSPC), ErrInvalid (EINVAL), ErrDoubleFree or ErrCorrupt (both
// EUCLEAN). A call that returns an error changes nothing.
package alloc

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// scanWindow is how many allocatable extents Alloc looks at, from hint on,
// for one that holds the whole request. See the package doc, Placement.
const scanWindow = 8

// Allocator is the free-space map of one data device. See the package doc.
type Allocator struct {
	// first and end bound the managed blocks: [first, end). Immutable.
	first, end BlockNum

	mu struct {
		lockrank.Mutex[lockrank.Alloc]

		// free holds the free extents (allocatable or busy), maximal
		// runs: the persisted form. Protected by mu.
		free *extentTree
		// avail holds the allocatable extents, maximal runs: free minus
		// busy. It is the index Alloc searches. Protected by mu.
		avail *extentTree
		// busy holds the busy extents with the seq they wait for.
		// Adjacent busy extents with the same seq are merged. Protected
		// by mu.
		busy busyTrees

		// freeBlocks, busyBlocks and reserved count blocks in free, in
		// busy, and reserved. Protected by mu.
		freeBlocks, busyBlocks, reserved uint64

		// journal maps each start block whose record may have changed
		// since the last Changes to the record it had then. Protected
		// by mu.
		journal map[BlockNum]journalEntry

		// keys and released are scratch space for Changes and Unbusy.
		// Protected by mu.
		keys     []BlockNum
		released []busyExtent
	}
}

// journalEntry is the free-extent record at one start block as of the last
// Changes call: ext if present, none otherwise.
type journalEntry struct {
	ext     Extent
	present bool
}

func newAllocator(first, end BlockNum) *Allocator {
	a := &Allocator{first: first, end: end}
	a.mu.free = newExtentTree()
	a.mu.avail = newExtentTree()
	a.mu.busy = newBusyTrees()
	a.mu.journal = make(map[BlockNum]journalEntry)
	return a
}

// New returns an Allocator for a fresh device on which every block of
// [first, end) is free and allocatable. Its first Changes reports the single
// record [first, end) (nothing if first == end). New panics if first > end.
func New(first, end BlockNum) *Allocator {
	if first > end {
		panic(fmt.Sprintf("alloc: New: first block %d after end %d", first, end))
	}
	a := newAllocator(first, end)
	if first < end {
		e := Extent{Start: first, Len: uint64(end - first)}
		a.freeAddLocked(e)
		a.mu.avail.ReplaceOrInsert(e)
		a.mu.freeBlocks = e.Len
	}
	return a
}

// Load returns an Allocator for [first, end) whose free extents are the
// persisted records free, in any order; all of them are allocatable (nothing
// is busy after a mount). free is not retained. Records that touch are
// merged, and the next Changes rewrites them as one. Load returns an error
// wrapping ErrCorrupt if a record is empty, reaches outside [first, end) or
// overlaps another, and ErrInvalid if first > end.
func Load(first, end BlockNum, free []Extent) (*Allocator, error) {
	if first > end {
		return nil, &Error{Op: "load", Err: detail(ErrInvalid, "first block %d after end %d", first, end)}
	}
	recs := slices.Clone(free)
	slices.SortFunc(recs, func(x, y Extent) int {
		switch {
		case x.Start < y.Start:
			return -1
		case x.Start > y.Start:
			return 1
		}
		return 0
	})
	for i, e := range recs {
		switch {
		case e.Len == 0:
			return nil, &Error{Op: "load", Extent: e, Err: detail(ErrCorrupt, "empty record")}
		case !e.valid(first, end):
			return nil, &Error{Op: "load", Extent: e, Err: detail(ErrCorrupt, "record outside [%d,%d)", first, end)}
		case i > 0 && recs[i-1].End() > e.Start:
			return nil, &Error{Op: "load", Extent: e, Err: detail(ErrCorrupt, "record overlaps %v", recs[i-1])}
		}
	}

	a := newAllocator(first, end)
	for _, e := range recs {
		a.mu.free.ReplaceOrInsert(e)
		a.mu.freeBlocks += e.Len
	}
	// Merge touching records through the journalled helpers, so that
	// Changes reports the merge.
	for i := 0; i < len(recs); {
		run := recs[i]
		j := i + 1
		for ; j < len(recs) && recs[j].Start == run.End(); j++ {
			a.freeDeleteLocked(recs[j])
			run.Len += recs[j].Len
		}
		if j > i+1 {
			a.freeReplaceLocked(recs[i], run)
		}
		i = j
	}
	a.mu.avail = a.mu.free.Clone()
	return a, nil
}

// Alloc allocates one extent of 1..want blocks, placed as the package doc
// (Placement) describes, without touching reserved blocks. It fails with
// ErrInvalid if want is 0, ErrNoSpace if every free block is reserved or
// none is free, and ErrBusy if some free blocks could be allocated but all
// are busy.
func (a *Allocator) Alloc(hint BlockNum, want uint64) (Extent, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allocLocked("alloc", hint, want, false)
}

// AllocReserved is Alloc for a caller that holds a reservation of at least
// want blocks: it may use reserved blocks, and subtracts the length of the
// extent it returns from the reservation. It fails with ErrInvalid if want
// is 0 or more than is reserved, and with ErrBusy if every free block is
// busy; never with ErrNoSpace.
func (a *Allocator) AllocReserved(hint BlockNum, want uint64) (Extent, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.allocLocked("alloc-reserved", hint, want, true)
}

// allocLocked implements Alloc and AllocReserved.
//
// Preconditions: a.mu is held.
func (a *Allocator) allocLocked(op string, hint BlockNum, want uint64, reserved bool) (Extent, error) {
	fail := func(err error) (Extent, error) {
		return Extent{}, &Error{Op: op, Extent: Extent{Start: hint, Len: want}, Err: err}
	}
	if want == 0 {
		return fail(detail(ErrInvalid, "zero-length request"))
	}
	n := want
	if reserved {
		if want > a.mu.reserved {
			return fail(detail(ErrInvalid, "only %d blocks reserved", a.mu.reserved))
		}
	} else {
		n = min(want, a.mu.freeBlocks-a.mu.reserved)
		if n == 0 {
			if a.mu.freeBlocks > 0 {
				return fail(detail(ErrNoSpace, "all %d free blocks are reserved", a.mu.freeBlocks))
			}
			return fail(ErrNoSpace)
		}
	}
	if a.mu.avail.Len() == 0 {
		return fail(detail(ErrBusy, "%d blocks busy", a.mu.busyBlocks))
	}
	e, from := a.placeLocked(hint, n)
	a.takeLocked(e, from)
	if reserved {
		a.mu.reserved -= e.Len
	}
	return e, nil
}

// placeLocked chooses the extent e to allocate, of 1..n blocks, by the
// Placement rules of the package doc, and returns it with the allocatable
// extent it comes from.
//
// Preconditions: a.mu is held; n > 0; some block is allocatable.
func (a *Allocator) placeLocked(hint BlockNum, n uint64) (e, from Extent) {
	if hint < a.first || hint >= a.end {
		hint = a.first
	}
	if v, ok := floor(a.mu.avail, Extent{Start: hint}); ok && v.Contains(hint) {
		return Extent{Start: hint, Len: min(n, uint64(v.End()-hint))}, v
	}
	var best Extent
	seen, done := 0, false
	visit := func(v Extent) bool {
		if v.Len >= n {
			best, done = v, true
			return false
		}
		if v.Len > best.Len {
			best = v
		}
		seen++
		done = seen == scanWindow
		return !done
	}
	a.mu.avail.AscendGreaterOrEqual(Extent{Start: hint}, visit)
	if !done {
		a.mu.avail.AscendLessThan(Extent{Start: hint}, visit)
	}
	return Extent{Start: best.Start, Len: min(n, best.Len)}, best
}

// takeLocked marks the allocatable extent e used.
//
// Preconditions: a.mu is held; e is non-empty; v is the allocatable extent
// that covers it.
func (a *Allocator) takeLocked(e, v Extent) {
	before, after := split(v, e)
	if before.Len > 0 {
		a.mu.avail.ReplaceOrInsert(before)
	} else {
		a.mu.avail.Delete(v)
	}
	if after.Len > 0 {
		a.mu.avail.ReplaceOrInsert(after)
	}

	f, _ := floor(a.mu.free, e)
	before, after = split(f, e)
	if before.Len > 0 {
		a.freeReplaceLocked(f, before)
	} else {
		a.freeDeleteLocked(f)
	}
	if after.Len > 0 {
		a.freeAddLocked(after)
	}
	a.mu.freeBlocks -= e.Len
}

// Free returns the used extent e to the free set, busy until Unbusy(s) for
// some s >= seq: seq numbers the metadata change that stops using e, and
// Changes reports the free record in time to join that change's batch. It
// fails, changing nothing, with ErrInvalid if e is empty or reaches outside
// [first, end), and with ErrDoubleFree if any block of e is already free.
func (a *Allocator) Free(e Extent, seq uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.insertFreeLocked("free", e); err != nil {
		return err
	}
	a.addBusyLocked(busyExtent{Extent: e, seq: seq})
	return nil
}

// Cancel returns the used extent e to the free set and makes it allocatable
// at once. It is for an extent that no metadata, committed or pending, ever
// referenced (the write it was allocated for failed before its mapping was
// added); anything else must go through Free. Cancel does not restore a
// reservation that AllocReserved consumed. Errors are as for Free.
func (a *Allocator) Cancel(e Extent) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.insertFreeLocked("cancel", e); err != nil {
		return err
	}
	a.addAvailLocked(e)
	return nil
}

// insertFreeLocked validates e and adds it to the free extents, coalescing
// with its neighbours.
//
// Preconditions: a.mu is held.
func (a *Allocator) insertFreeLocked(op string, e Extent) error {
	if e.Len == 0 {
		return &Error{Op: op, Extent: e, Err: detail(ErrInvalid, "empty extent")}
	}
	if !e.valid(a.first, a.end) {
		return &Error{Op: op, Extent: e, Err: detail(ErrInvalid, "outside [%d,%d)", a.first, a.end)}
	}
	left, okLeft := floor(a.mu.free, e)
	if okLeft && left.End() > e.Start {
		return &Error{Op: op, Extent: e, Err: detail(ErrDoubleFree, "overlaps free extent %v", left)}
	}
	right, okRight := ceil(a.mu.free, e)
	if okRight && right.Start < e.End() {
		return &Error{Op: op, Extent: e, Err: detail(ErrDoubleFree, "overlaps free extent %v", right)}
	}
	merged := e
	if okRight && right.Start == e.End() {
		a.freeDeleteLocked(right)
		merged.Len += right.Len
	}
	if okLeft && left.End() == e.Start {
		a.freeReplaceLocked(left, Extent{Start: left.Start, Len: left.Len + merged.Len})
	} else {
		a.freeAddLocked(merged)
	}
	a.mu.freeBlocks += e.Len
	return nil
}

// addAvailLocked makes the free, non-allocatable extent e allocatable,
// coalescing it with allocatable neighbours.
//
// Preconditions: a.mu is held.
func (a *Allocator) addAvailLocked(e Extent) {
	if left, ok := floor(a.mu.avail, e); ok && left.End() == e.Start {
		e = Extent{Start: left.Start, Len: left.Len + e.Len}
	}
	if right, ok := a.mu.avail.Get(Extent{Start: e.End()}); ok {
		a.mu.avail.Delete(right)
		e.Len += right.Len
	}
	a.mu.avail.ReplaceOrInsert(e)
}

// addBusyLocked records the free extent b as busy, merging it with
// adjacent busy extents of the same seq.
//
// Preconditions: a.mu is held; b is free and neither allocatable nor busy.
func (a *Allocator) addBusyLocked(b busyExtent) {
	a.mu.busyBlocks += b.Len
	if left, ok := floor(a.mu.busy.byStart, b); ok && left.End() == b.Start && left.seq == b.seq {
		a.mu.busy.delete(left)
		b.Extent = Extent{Start: left.Start, Len: left.Len + b.Len}
	}
	if right, ok := a.mu.busy.byStart.Get(busyExtent{Extent: Extent{Start: b.End()}}); ok && right.seq == b.seq {
		a.mu.busy.delete(right)
		b.Len += right.Len
	}
	a.mu.busy.insert(b)
}

// Unbusy makes allocatable every busy extent freed with a seq <= seq: call
// it once the metadata changes up to seq are durable. It costs O(log n) per
// extent released and nothing more.
func (a *Allocator) Unbusy(seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rel := a.mu.released[:0]
	a.mu.busy.bySeq.Ascend(func(b busyExtent) bool {
		if b.seq > seq {
			return false
		}
		rel = append(rel, b)
		return true
	})
	for _, b := range rel {
		a.mu.busy.delete(b)
		a.mu.busyBlocks -= b.Len
		a.addAvailLocked(b.Extent)
	}
	a.mu.released = rel[:0]
}

// Reserve sets n free blocks aside for AllocReserved. It fails with
// ErrNoSpace, changing nothing, unless free blocks (allocatable or busy)
// not yet reserved number at least n. Reserve(0) does nothing.
func (a *Allocator) Reserve(n uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if avail := a.mu.freeBlocks - a.mu.reserved; n > avail {
		return &Error{Op: "reserve", Extent: Extent{Len: n}, Err: detail(ErrNoSpace, "%d blocks available", avail)}
	}
	a.mu.reserved += n
	return nil
}

// Unreserve gives back n reserved blocks that will not be allocated. It
// fails with ErrInvalid, changing nothing, if fewer than n are reserved.
func (a *Allocator) Unreserve(n uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > a.mu.reserved {
		return &Error{Op: "unreserve", Extent: Extent{Len: n}, Err: detail(ErrInvalid, "only %d blocks reserved", a.mu.reserved)}
	}
	a.mu.reserved -= n
	return nil
}

// Changes reports, and forgets, how the persisted free-extent records
// changed since the last call (or since New or Load): for each start block,
// in increasing order, whose record is now different, put(the record) if
// there is one, del(start) if there is none. A record that changed and
// changed back is not reported. The cost is O(k log n) for k records
// touched. put and del run with the Allocator's mutex held and must not
// call it.
func (a *Allocator) Changes(put func(Extent), del func(start BlockNum)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	keys := a.mu.keys[:0]
	for k := range a.mu.journal {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		was := a.mu.journal[k]
		cur, ok := a.mu.free.Get(Extent{Start: k})
		switch {
		case ok && (!was.present || was.ext != cur):
			put(cur)
		case !ok && was.present:
			del(k)
		}
	}
	// Go maps keep their capacity when cleared, and ranging over one costs
	// its capacity: after a large batch (a mkfs-time Load, freeing a huge
	// fragmented file), start afresh so that later calls stay cheap.
	if len(keys) > journalShrink {
		a.mu.journal = make(map[BlockNum]journalEntry)
		keys = nil
	} else {
		clear(a.mu.journal)
	}
	a.mu.keys = keys[:0]
}

// journalShrink is the number of journal entries beyond which Changes
// replaces the journal map instead of clearing it.
const journalShrink = 1024

// noteLocked remembers that the record at start is cur, unless a record
// for start is already remembered: the first change to a start block since
// the last Changes call fixes what Changes compares with. Every change to
// a.mu.free goes through freeAddLocked, freeReplaceLocked or
// freeDeleteLocked, which call it first with the record they change.
//
// Preconditions: a.mu is held; cur is the record at start now.
func (a *Allocator) noteLocked(start BlockNum, cur journalEntry) {
	if _, ok := a.mu.journal[start]; !ok {
		a.mu.journal[start] = cur
	}
}

// freeAddLocked adds the free record e.
//
// Preconditions: a.mu is held; there is no record at e.Start.
func (a *Allocator) freeAddLocked(e Extent) {
	a.noteLocked(e.Start, journalEntry{})
	a.mu.free.ReplaceOrInsert(e)
}

// freeReplaceLocked replaces the free record old by e.
//
// Preconditions: a.mu is held; old is the record at e.Start.
func (a *Allocator) freeReplaceLocked(old, e Extent) {
	a.noteLocked(e.Start, journalEntry{ext: old, present: true})
	a.mu.free.ReplaceOrInsert(e)
}

// freeDeleteLocked deletes the free record e.
//
// Preconditions: a.mu is held; e is a record.
func (a *Allocator) freeDeleteLocked(e Extent) {
	a.noteLocked(e.Start, journalEntry{ext: e, present: true})
	a.mu.free.Delete(e)
}

// FreeExtents returns the free extents, busy ones included, in order of
// Start: the records a later Load takes.
func (a *Allocator) FreeExtents() []Extent {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Extent, 0, a.mu.free.Len())
	a.mu.free.Ascend(func(e Extent) bool {
		out = append(out, e)
		return true
	})
	return out
}

// Stats is a snapshot of an Allocator's counters. Counts are in blocks
// unless the name says extents.
type Stats struct {
	// TotalBlocks is end - first.
	TotalBlocks uint64
	// FreeBlocks are free on disk: allocatable or busy.
	FreeBlocks uint64
	// BusyBlocks are free but wait for Unbusy.
	BusyBlocks uint64
	// AllocatableBlocks are FreeBlocks - BusyBlocks.
	AllocatableBlocks uint64
	// ReservedBlocks are set aside by Reserve.
	ReservedBlocks uint64
	// AvailableBlocks are FreeBlocks - ReservedBlocks: what Reserve and
	// Alloc may still take, now or after Unbusy (statfs f_bavail).
	AvailableBlocks uint64
	// FreeExtents is the number of persisted free-extent records.
	FreeExtents int
	// AllocatableExtents and BusyExtents count the allocatable and busy
	// extents.
	AllocatableExtents, BusyExtents int
}

// String formats s on one line, for logs and tests.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "total %d free %d busy %d allocatable %d reserved %d available %d",
		s.TotalBlocks, s.FreeBlocks, s.BusyBlocks, s.AllocatableBlocks, s.ReservedBlocks, s.AvailableBlocks)
	fmt.Fprintf(&b, "; extents: free %d allocatable %d busy %d", s.FreeExtents, s.AllocatableExtents, s.BusyExtents)
	return b.String()
}

// Stats returns the Allocator's counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Stats{
		TotalBlocks:        uint64(a.end - a.first),
		FreeBlocks:         a.mu.freeBlocks,
		BusyBlocks:         a.mu.busyBlocks,
		AllocatableBlocks:  a.mu.freeBlocks - a.mu.busyBlocks,
		ReservedBlocks:     a.mu.reserved,
		AvailableBlocks:    a.mu.freeBlocks - a.mu.reserved,
		FreeExtents:        a.mu.free.Len(),
		AllocatableExtents: a.mu.avail.Len(),
		BusyExtents:        a.mu.busy.byStart.Len(),
	}
}

// Bounds returns the range of blocks the Allocator manages, [first, end).
func (a *Allocator) Bounds() (first, end BlockNum) { return a.first, a.end }
