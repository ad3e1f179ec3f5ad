// Package refcount is the table of shared device blocks (reflink): how many
// file extents map each device block that more than one extent maps, which
// blocks were shared until a metadata change not yet durable, and the
// copy-on-write staging set. It is the analogue of XFS's refcount btree
// (shared extents and CoW staging extents, xfs_refcount.c), held in memory
// and persisted by the engine as records; it does no I/O.
//
// # Reference counts
//
// A device block mapped by one extent record has one reference and is not
// in the table; a block mapped by n >= 2 records has n, kept as a run of
// blocks with equal counts (a Run). A volume that was never cloned has an
// empty table, and Any reports it in one atomic load, so write paths pay
// nothing for reflink then. Share adds a reference to every block of a
// range (a clone maps the blocks once more); Drop takes one away (an
// extent record no longer maps them) and returns the blocks that lost
// their last reference, for the caller to free.
//
// # Released blocks
//
// A block whose count Drop lowered to one is no longer shared in core, but
// the transaction that lowered it may not be durable yet: after a crash,
// the other extent may still map it. Writing it in place before then would
// show the write in the file that gave it up. So Drop marks it released,
// with the caller's transaction number, and Shared keeps reporting it
// until Unrelease is called with that number or a later one, once the
// transaction is durable (as the allocator's busy extents wait: package
// alloc).
//
// # Staging
//
// A copy-on-write writes new data to blocks no record maps yet (staging
// blocks, XFS's CoW fork) and switches the file's record to them only once
// that data is durable. Staged blocks are persisted as records of their
// own, so that the next mount frees those a crash left unused
// (xfs_reflink_recover_cow). Stage adds blocks to the set, Unstage removes
// them (the file's record now maps them, or they are freed), and
// SplitStaged tells staged blocks from the others in a range.
//
// # Records
//
// Every mutation reports the record changes it makes to a Recorder: shared
// runs keyed by their start block (PutShared, DeleteShared) and staged
// runs likewise (PutStaged, DeleteStaged), in an order in which they can be
// applied as they come. If R starts as the records the Table was loaded
// from, applying every call leaves R equal to Runs() and StagedRanges().
//
// # Concurrency
//
// A Table is safe for concurrent use: every method takes an internal mutex
// (rank Refcount), held for in-memory work only. The engine mutates it
// inside metadata transactions (under its commit lock) and queries it under
// inode mutexes. A Recorder is called with the mutex held and must not call
// the Table.
package refcount

import (
	"fmt"
	"sync/atomic"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// Range is a run of device blocks.
type Range struct{ Start, Len uint64 }

// End returns the block after the range's last.
func (r Range) End() uint64 { return r.Start + r.Len }

// Run is a range of blocks with Refs references each (Refs >= 2).
type Run struct {
	Start, Len uint64
	Refs       uint32
}

// Recorder receives the record changes of a mutation.
type Recorder interface {
	// PutShared records that the shared run starting at r.Start is r.
	PutShared(r Run)
	// DeleteShared records that no shared run starts at start.
	DeleteShared(start uint64)
	// PutStaged records that the staged run starting at r.Start is r.
	PutStaged(r Range)
	// DeleteStaged records that no staged run starts at start.
	DeleteStaged(start uint64)
}

// Table is the shared-block table of one volume. See the package doc.
type Table struct {
	mu struct {
		lockrank.Mutex[lockrank.Refcount]
		// counts holds the blocks with two references or more.
		counts runs[uint32]
		// released holds the blocks Drop lowered to one reference, with
		// the transaction that did it.
		released runs[uint64]
		// staged holds the copy-on-write staging blocks.
		staged runs[struct{}]
	}
	// any says counts or released is not empty: some block may be
	// shared.
	any atomic.Bool
}

// New returns an empty table.
func New() *Table {
	t := &Table{}
	t.mu.counts = newRuns[uint32]()
	t.mu.released = newRuns[uint64]()
	t.mu.staged = newRuns[struct{}]()
	return t
}

// Load returns the table persisted as the records shared and staged. It
// fails with an error wrapping ErrCorrupt if a record is empty, overflows,
// counts fewer than two references, or overlaps another record.
func Load(shared []Run, staged []Range) (*Table, error) {
	t := New()
	for _, r := range shared {
		if r.Len == 0 || r.Start+r.Len < r.Start || r.Refs < 2 {
			return nil, fmt.Errorf("refcount: shared run %+v: %w", r, ErrCorrupt)
		}
		bad := false
		t.mu.counts.overlapping(r.Start, r.End(), func(run[uint32]) bool { bad = true; return false })
		if bad {
			return nil, fmt.Errorf("refcount: shared run %+v overlaps another: %w", r, ErrCorrupt)
		}
		t.mu.counts.tree.ReplaceOrInsert(run[uint32]{start: r.Start, n: r.Len, v: r.Refs})
	}
	for _, r := range staged {
		if r.Len == 0 || r.Start+r.Len < r.Start {
			return nil, fmt.Errorf("refcount: staged run %+v: %w", r, ErrCorrupt)
		}
		bad := false
		t.mu.staged.overlapping(r.Start, r.End(), func(run[struct{}]) bool { bad = true; return false })
		t.mu.counts.overlapping(r.Start, r.End(), func(run[uint32]) bool { bad = true; return false })
		if bad {
			return nil, fmt.Errorf("refcount: staged run %+v overlaps another or a shared run: %w", r, ErrCorrupt)
		}
		t.mu.staged.tree.ReplaceOrInsert(run[struct{}]{start: r.Start, n: r.Len})
	}
	t.any.Store(t.mu.counts.tree.Len() > 0)
	return t, nil
}

// End returns the block after the run's last.
func (r Run) End() uint64 { return r.Start + r.Len }

// ErrCorrupt is wrapped by Load's errors.
var ErrCorrupt = fmt.Errorf("corrupt refcount record")

// Any reports whether some block may be shared (has two references or
// more, or is released). It is one atomic load: when it is false, no
// block is shared and Shared need not be asked.
func (t *Table) Any() bool { return t.any.Load() }

func (t *Table) noteAnyLocked() {
	t.any.Store(t.mu.counts.tree.Len() > 0 || t.mu.released.tree.Len() > 0)
}

// sharedRec adapts rec for the counts runs.
func sharedRec(rec Recorder) (func(run[uint32]), func(uint64)) {
	if rec == nil {
		return nil, nil
	}
	return func(r run[uint32]) { rec.PutShared(Run{Start: r.start, Len: r.n, Refs: r.v}) }, rec.DeleteShared
}

// Share adds one reference to every block of r: a block with none yet
// (mapped by one extent) gets two. The blocks must not be staged.
func (t *Table) Share(r Range, rec Recorder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	put, del := sharedRec(rec)
	t.mu.counts.update(r.Start, r.End(), func(v uint32, had bool) (uint32, bool) {
		if !had {
			return 2, true
		}
		return v + 1, true
	}, put, del)
	// A shared block is shared whatever its release said.
	t.mu.released.update(r.Start, r.End(), func(uint64, bool) (uint64, bool) { return 0, false }, nil, nil)
	t.noteAnyLocked()
}

// Drop takes one reference away from every block of r, in the transaction
// numbered seq, and returns the blocks that had only one (not in the
// table): they have none now, and the caller frees them. Blocks left with
// one reference are released until Unrelease(seq). The blocks must not be
// staged (see SplitStaged).
func (t *Table) Drop(r Range, seq uint64, rec Recorder) []Range {
	t.mu.Lock()
	defer t.mu.Unlock()
	var freed, released []Range
	put, del := sharedRec(rec)
	// Walk the pieces first: update's f sees values, not positions.
	cur := r.Start
	t.mu.counts.overlapping(r.Start, r.End(), func(x run[uint32]) bool {
		s, e := max(r.Start, x.start), min(r.End(), x.end())
		if cur < s {
			freed = appendRange(freed, Range{cur, s - cur})
		}
		if x.v == 2 {
			released = appendRange(released, Range{s, e - s})
		}
		cur = e
		return true
	})
	if cur < r.End() {
		freed = appendRange(freed, Range{cur, r.End() - cur})
	}
	t.mu.counts.update(r.Start, r.End(), func(v uint32, had bool) (uint32, bool) {
		if !had || v <= 2 {
			return 0, false
		}
		return v - 1, true
	}, put, del)
	for _, f := range freed {
		t.mu.released.update(f.Start, f.End(), func(uint64, bool) (uint64, bool) { return 0, false }, nil, nil)
	}
	for _, x := range released {
		t.mu.released.update(x.Start, x.End(), func(old uint64, had bool) (uint64, bool) {
			return max(old, seq), true
		}, nil, nil)
	}
	t.noteAnyLocked()
	return freed
}

func appendRange(rs []Range, r Range) []Range {
	if k := len(rs); k > 0 && rs[k-1].End() == r.Start {
		rs[k-1].Len += r.Len
		return rs
	}
	return append(rs, r)
}

// Unrelease ends the release of the blocks released by transactions
// numbered seq or lower: they are durable, and no other extent maps those
// blocks any more, even after a crash.
func (t *Table) Unrelease(seq uint64) {
	if !t.any.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.released.tree.Len() == 0 {
		return
	}
	for _, x := range t.mu.released.all() {
		if x.v <= seq {
			t.mu.released.update(x.start, x.end(), func(uint64, bool) (uint64, bool) { return 0, false }, nil, nil)
		}
	}
	t.noteAnyLocked()
}

// Shared reports whether some block of r is shared: it has two references
// or more, or it is released (see the package doc). Such a block must not
// be written in place.
func (t *Table) Shared(r Range) bool {
	if !t.any.Load() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	found := false
	hit := func(run[uint32]) bool { found = true; return false }
	t.mu.counts.overlapping(r.Start, r.End(), hit)
	if !found {
		t.mu.released.overlapping(r.Start, r.End(), func(run[uint64]) bool { found = true; return false })
	}
	return found
}

// SharedRanges appends to out the blocks of r that are shared (as Shared
// reports them), in order, touching ranges merged.
func (t *Table) SharedRanges(r Range, out []Range) []Range {
	if !t.any.Load() {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var rs []Range
	t.mu.counts.overlapping(r.Start, r.End(), func(x run[uint32]) bool {
		rs = append(rs, clip(r, x.start, x.end()))
		return true
	})
	t.mu.released.overlapping(r.Start, r.End(), func(x run[uint64]) bool {
		rs = append(rs, clip(r, x.start, x.end()))
		return true
	})
	return append(out, merge(rs)...)
}

// Refs appends to out the runs of r that have two references or more
// (released blocks have one: they are not listed), clipped to r. It is
// what FIEMAP_EXTENT_SHARED and the space accounting report.
func (t *Table) Refs(r Range, out []Run) []Run {
	if !t.any.Load() {
		return out
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.counts.overlapping(r.Start, r.End(), func(x run[uint32]) bool {
		c := clip(r, x.start, x.end())
		out = append(out, Run{Start: c.Start, Len: c.Len, Refs: x.v})
		return true
	})
	return out
}

func clip(r Range, s, e uint64) Range {
	s, e = max(s, r.Start), min(e, r.End())
	return Range{s, e - s}
}

// merge sorts rs and merges overlapping or touching ranges.
func merge(rs []Range) []Range {
	if len(rs) <= 1 {
		return rs
	}
	for i := 1; i < len(rs); i++ { // insertion sort: a handful of ranges
		for j := i; j > 0 && rs[j].Start < rs[j-1].Start; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Start <= last.End() {
			last.Len = max(last.End(), r.End()) - last.Start
			continue
		}
		out = append(out, r)
	}
	return out
}

// Stage adds the blocks of r to the staging set. They must not be staged
// or shared.
func (t *Table) Stage(r Range, rec Recorder) { t.setStaged(r, true, rec) }

// Unstage removes the blocks of r from the staging set (those that are in
// it).
func (t *Table) Unstage(r Range, rec Recorder) { t.setStaged(r, false, rec) }

func (t *Table) setStaged(r Range, staged bool, rec Recorder) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var put func(run[struct{}])
	var del func(uint64)
	if rec != nil {
		put = func(x run[struct{}]) { rec.PutStaged(Range{x.start, x.n}) }
		del = rec.DeleteStaged
	}
	t.mu.staged.update(r.Start, r.End(), func(struct{}, bool) (struct{}, bool) { return struct{}{}, staged }, put, del)
}

// SplitStaged appends the staged blocks of r to staged and the others to
// rest, in order.
func (t *Table) SplitStaged(r Range, staged, rest []Range) ([]Range, []Range) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := r.Start
	t.mu.staged.overlapping(r.Start, r.End(), func(x run[struct{}]) bool {
		c := clip(r, x.start, x.end())
		if cur < c.Start {
			rest = append(rest, Range{cur, c.Start - cur})
		}
		staged = append(staged, c)
		cur = c.End()
		return true
	})
	if cur < r.End() {
		rest = append(rest, Range{cur, r.End() - cur})
	}
	return staged, rest
}

// Runs returns every shared run, in order.
func (t *Table) Runs() []Run {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Run
	for _, x := range t.mu.counts.all() {
		out = append(out, Run{Start: x.start, Len: x.n, Refs: x.v})
	}
	return out
}

// StagedRanges returns every staged run, in order.
func (t *Table) StagedRanges() []Range {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Range
	for _, x := range t.mu.staged.all() {
		out = append(out, Range{x.start, x.n})
	}
	return out
}

// Stats counts the table's blocks.
type Stats struct {
	// SharedBlocks is the number of blocks with two references or more.
	SharedBlocks uint64
	// SavedBlocks is the sum over shared blocks of their references but
	// one: the blocks the sharing saves.
	SavedBlocks uint64
	// ReleasedBlocks is the number of released blocks.
	ReleasedBlocks uint64
	// StagedBlocks is the number of staging blocks.
	StagedBlocks uint64
}

// Stats returns the table's counts. O(n) in the number of runs.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s Stats
	for _, x := range t.mu.counts.all() {
		s.SharedBlocks += x.n
		s.SavedBlocks += x.n * uint64(x.v-1)
	}
	for _, x := range t.mu.released.all() {
		s.ReleasedBlocks += x.n
	}
	for _, x := range t.mu.staged.all() {
		s.StagedBlocks += x.n
	}
	return s
}
