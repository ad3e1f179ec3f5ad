package extmap

import (
	"math"
	"slices"

	"github.com/sluicefs/sluice/meta"
)

// Every mutation works the same way, on a window of the map:
//
//  1. collect copies into m.old the extents that overlap the range, plus,
//     when the mutation can create mergeable pairs, the extents that touch
//     it on either side;
//  2. the mutation builds m.new, the window as it should be;
//  3. normalize merges mergeable neighbours in m.new;
//  4. commit applies the difference between m.old and m.new to the trees
//     and reports it to the Recorder, key by key.
//
// Because commit reports the difference by key, the record mirror holds by
// construction, and a record is reported only if its persisted form
// changed.

// maxScratch is the capacity above which the scratch slices are dropped
// after a mutation, so that one huge truncate does not pin memory.
const maxScratch = 4096

// Insert maps the range of e, which must currently be wholly a hole, merging
// it with mergeable neighbours (see the package doc, Merging). e must be
// valid: Len > 0, no overflow in the file or on the device, State Written or
// Unwritten, Epoch 0 if Unwritten, and not Remapped (a hole has no blocks
// to replace: remaps are made by Remap alone) with OldDevBlock 0 and
// OldUnwritten false. A Written extent with Epoch > 0 is persisted as
// Unwritten until MarkDurable covers its epoch. On error (ErrInvalid,
// ErrMapped) nothing changes and nothing is recorded.
func (m *Map) Insert(e Extent, rec Recorder) error {
	if !e.valid() || e.Remapped {
		return &Error{Op: "insert", Extent: e, Err: ErrInvalid}
	}
	lo, hi := e.FileBlock, e.End()
	m.collect(lo, hi, true)
	m.new = m.new[:0]
	placed := false
	for _, x := range m.old {
		if x.FileBlock < hi && x.End() > lo {
			err := &Error{Op: "insert", Extent: e, Err: detail(ErrMapped, "overlaps %v", x)}
			m.trimScratch()
			return err
		}
		if !placed && x.FileBlock >= hi {
			m.new = append(m.new, e)
			placed = true
		}
		m.new = append(m.new, x)
	}
	if !placed {
		m.new = append(m.new, e)
	}
	m.normalize()
	m.commit(rec)
	return nil
}

// Convert makes every Unwritten block in [fb, fb+n) Written with the given
// epoch: 0 if the data is already durable (the record says Written at
// once), otherwise the epoch whose MarkDurable will make the record say
// Written. Holes and written blocks (pending or not) are left as they are.
// Extents are split at the range's edges and merged with mergeable
// neighbours. Analogous to xfs_iomap_write_unwritten /
// ext4_convert_unwritten_extents at direct-write completion.
func (m *Map) Convert(fb, n, epoch uint64, rec Recorder) {
	m.restate(fb, n, restate{from: meta.Unwritten, minEpoch: 0, maxEpoch: 0, to: meta.Written, epoch: epoch}, rec, nil)
}

// Unconvert makes every Written block in [fb, fb+n), pending or not,
// Unwritten with Epoch 0: the blocks stay allocated and read as zeros, for
// FALLOC_FL_ZERO_RANGE (analogous to ext4_zero_range's conversion to
// unwritten; XFS punches and preallocates instead). Holes and unwritten
// blocks are left as they are. Extents are split at the range's edges and
// merged with mergeable neighbours.
//
// A remapped block that it makes Unwritten keeps its new device block,
// whose record (Unwritten) then names it instead of the old one: Unconvert
// returns a Remapping for each such piece, as MarkDurable does (with
// OldUnwritten set if the remap replaced a pending conversion), or nil if
// there was none. The engine must not unconvert shared device blocks (see
// the package doc, Extents): an unwritten extent owns its blocks, so it
// must remap or punch them first.
func (m *Map) Unconvert(fb, n uint64, rec Recorder) []Remapping {
	return m.restate(fb, n, restate{from: meta.Written, minEpoch: 0, maxEpoch: math.MaxUint64, to: meta.Unwritten, epoch: 0}, rec, nil)
}

// MarkDurable sets Epoch 0 on every extent with 0 < Epoch <= upTo, so that
// its record says Written, and merges it with mergeable neighbours. A
// remapped extent among them becomes a plain one (Remapped false,
// OldDevBlock 0, OldUnwritten false), its record now naming its new
// blocks, Written, whether it named the old ones Written or (OldUnwritten)
// Unwritten, and MarkDurable returns a Remapping for it (see the package
// doc, Copy-on-write remaps), OldUnwritten included: one per extent as it
// was before merging, in no particular order and not coalesced, and no two
// with overlapping New ranges (Old ranges overlap where remaps replaced
// blocks that the file mapped more than once); nil if no remap was made
// durable. The engine calls it once the device flush of epoch upTo has
// completed, and puts what it records, and the reference changes the
// Remappings call for, into the metadata batch it then syncs. Only the
// extents it changes (and neighbours it merges them with) are reported; an
// extent made durable and then merged with a neighbour made durable by a
// later step of the same call may be Put twice. O(1) when nothing is
// pending with Epoch <= upTo, and it allocates nothing unless it returns
// Remappings.
func (m *Map) MarkDurable(upTo uint64, rec Recorder) []Remapping {
	var done []Remapping
	for {
		k, ok := m.pending.Min()
		if !ok || k.Epoch > upTo {
			return done
		}
		e, ok := m.extents.Get(endKey(k.End))
		if !ok || e.FileBlock != k.FileBlock || e.Epoch != k.Epoch || e.State != meta.Written {
			panic("extmap: pending index out of step with the extents")
		}
		done = m.restate(e.FileBlock, e.Len, restate{from: meta.Written, minEpoch: 1, maxEpoch: upTo, to: meta.Written, epoch: 0}, rec, done)
	}
}

// Remap maps file blocks [fb, fb+n) to device blocks [dev, dev+n), Written,
// as a pending remap of epoch epoch (see the package doc, Copy-on-write
// remaps): in core at once, while the records keep naming the blocks
// replaced until MarkDurable covers epoch. The engine calls it when the
// write of the range's new data to the staged blocks from dev has
// completed, with an epoch picked after that, as for Convert. Analogous to
// xfs_reflink_end_cow at the end of a copy-on-write write, except that the
// record's switch to the new blocks waits for the flush.
//
// Every block of the range must be written: durable (Epoch 0), a pending
// conversion (Epoch > 0, not remapped) or already remapped. A durable
// block's piece becomes a remap whose old block is its present block; a
// pending conversion's piece too, with OldUnwritten set, as its record
// says Unwritten; an already remapped block's piece keeps its old block
// and OldUnwritten. Either way the records keep their content, and are
// reported only where the range's edges split one or the new extents
// merge with neighbours (see the package doc, Merging). Remap returns the
// device blocks that already remapped blocks of the range were backed by
// (staged blocks that no record names, now unmapped, for the engine to
// free), sorted by Start and coalesced, or nil if there were none; the
// blocks of a pending conversion are not among them, as its record still
// names them.
//
// It fails with ErrInvalid, changing and recording nothing, if n or epoch
// is 0, if either range runs past block 2^64-1, or if a block of the range
// is a hole or unwritten (its blocks are not shared, and the engine writes
// them in place).
func (m *Map) Remap(fb, n, dev, epoch uint64, rec Recorder) ([]DevRange, error) {
	want := Extent{FileBlock: fb, DevBlock: dev, Len: n, State: meta.Written, Epoch: epoch}
	if !want.valid() || epoch == 0 {
		return nil, &Error{Op: "remap", Extent: want, Err: detail(ErrInvalid, "empty, overflowing or of epoch 0")}
	}
	lo, hi := fb, fb+n
	m.collect(lo, hi, true)
	cur := lo // the first block not yet seen mapped
	for _, x := range m.old {
		if x.End() <= lo || x.FileBlock >= hi {
			continue // a neighbour
		}
		var err error
		switch {
		case x.FileBlock > cur:
			err = detail(ErrInvalid, "block %d is a hole", cur)
		case x.State != meta.Written:
			err = detail(ErrInvalid, "overlaps %v, which is not written", x)
		}
		if err != nil {
			m.trimScratch()
			return nil, &Error{Op: "remap", Extent: want, Err: err}
		}
		cur = x.End()
	}
	if cur < hi {
		m.trimScratch()
		return nil, &Error{Op: "remap", Extent: want, Err: detail(ErrInvalid, "block %d is a hole", cur)}
	}
	var released []DevRange
	m.new = m.new[:0]
	for _, x := range m.old {
		if x.End() <= lo || x.FileBlock >= hi {
			m.new = append(m.new, x)
			continue
		}
		s, e := max(lo, x.FileBlock), min(hi, x.End())
		if x.FileBlock < s {
			m.new = append(m.new, x.piece(x.FileBlock, s))
		}
		p := x.piece(s, e)
		y := want.piece(s, e)
		y.Remapped = true
		if p.Remapped {
			// Its record keeps naming its old blocks; the staged ones go.
			y.OldDevBlock, y.OldUnwritten = p.OldDevBlock, p.OldUnwritten
			released = append(released, DevRange{Start: p.DevBlock, Len: p.Len})
		} else {
			// Durable, or a pending conversion whose record says Unwritten.
			y.OldDevBlock, y.OldUnwritten = p.DevBlock, p.Epoch > 0
		}
		m.new = append(m.new, y)
		if e < x.End() {
			m.new = append(m.new, x.piece(e, x.End()))
		}
	}
	m.normalize()
	m.commit(rec)
	return coalesce(released), nil
}

// Remove unmaps [fb, fb+n) (punch hole, truncate), splitting extents at the
// range's edges, and returns the device blocks it unmapped, sorted by
// Start and coalesced where contiguous: for every block removed, its
// device block and, for a remapped block, also its old block (the
// reference its record held, Written or, if OldUnwritten, Unwritten; see
// the package doc, Copy-on-write remaps), which the engine tells apart
// from the staged new blocks itself. A device block that the range mapped
// more than once (shared blocks, see the package doc, Extents) is returned
// once per mapping, so ranges may then overlap; otherwise none do. A range
// that runs past block 2^64-1 is clipped there, so Remove(size,
// math.MaxUint64, rec) truncates.
func (m *Map) Remove(fb, n uint64, rec Recorder) []DevRange {
	lo, hi := fb, rangeEnd(fb, n)
	if hi <= lo {
		return nil
	}
	m.collect(lo, hi, false)
	if len(m.old) == 0 {
		return nil
	}
	var freed []DevRange
	m.new = m.new[:0]
	for _, x := range m.old {
		s, e := max(lo, x.FileBlock), min(hi, x.End())
		if x.FileBlock < s {
			m.new = append(m.new, x.piece(x.FileBlock, s))
		}
		freed = appendFreed(freed, x.piece(s, e))
		if e < x.End() {
			m.new = append(m.new, x.piece(e, x.End()))
		}
	}
	m.commit(rec)
	return coalesce(freed)
}

// appendFreed appends to freed the device blocks that unmapping x releases:
// its blocks and, if it is remapped, its old blocks.
func appendFreed(freed []DevRange, x Extent) []DevRange {
	freed = append(freed, DevRange{Start: x.DevBlock, Len: x.Len})
	if x.Remapped {
		freed = append(freed, DevRange{Start: x.OldDevBlock, Len: x.Len})
	}
	return freed
}

// coalesce sorts ranges by Start and merges each into the one before it
// when it starts where that one ends, in place. Overlapping ranges are kept
// apart, so that every block appears as many times as it did; ranges of
// which no two overlap come out fully coalesced.
func coalesce(rs []DevRange) []DevRange {
	if len(rs) <= 1 {
		return rs
	}
	slices.SortFunc(rs, func(a, b DevRange) int { return cmpUint64(a.Start, b.Start) })
	out := rs[:1]
	for _, r := range rs[1:] {
		if last := &out[len(out)-1]; last.End() == r.Start {
			last.Len += r.Len
		} else {
			out = append(out, r)
		}
	}
	return out
}

// restate describes a state change: extents whose State is from and whose
// Epoch lies in [minEpoch, maxEpoch] get State to and Epoch epoch. A
// remapped one becomes plain, its record naming its new blocks: the
// restates that apply to remaps (Unconvert, MarkDurable) have to Unwritten
// or epoch 0, so what the old record said (OldUnwritten) no longer matters.
type restate struct {
	from               meta.ExtentState
	minEpoch, maxEpoch uint64
	to                 meta.ExtentState
	epoch              uint64
}

func (r restate) applies(e Extent) bool {
	return e.State == r.from && e.Epoch >= r.minEpoch && e.Epoch <= r.maxEpoch
}

// restate applies r to the blocks of [fb, fb+n), and returns done with a
// Remapping appended for every remapped piece it restated.
func (m *Map) restate(fb, n uint64, r restate, rec Recorder, done []Remapping) []Remapping {
	lo, hi := fb, rangeEnd(fb, n)
	if hi <= lo {
		return done
	}
	m.collect(lo, hi, true)
	m.new = m.new[:0]
	changed := false
	for _, x := range m.old {
		if x.FileBlock >= hi || x.End() <= lo || !r.applies(x) {
			m.new = append(m.new, x)
			continue
		}
		changed = true
		s, e := max(lo, x.FileBlock), min(hi, x.End())
		if x.FileBlock < s {
			m.new = append(m.new, x.piece(x.FileBlock, s))
		}
		y := x.piece(s, e)
		if y.Remapped {
			done = append(done, Remapping{
				Old:          DevRange{Start: y.OldDevBlock, Len: y.Len},
				New:          DevRange{Start: y.DevBlock, Len: y.Len},
				OldUnwritten: y.OldUnwritten,
			})
			y.Remapped, y.OldDevBlock, y.OldUnwritten = false, 0, false
		}
		y.State, y.Epoch = r.to, r.epoch
		m.new = append(m.new, y)
		if e < x.End() {
			m.new = append(m.new, x.piece(e, x.End()))
		}
	}
	if !changed {
		m.trimScratch()
		return done
	}
	m.normalize()
	m.commit(rec)
	return done
}

// collect sets m.old to the extents that overlap [lo, hi), in order, and if
// neighbours is set also to the extent that ends at lo and the one that
// starts at hi, if they exist. lo < hi.
func (m *Map) collect(lo, hi uint64, neighbours bool) {
	m.old = m.old[:0]
	from := lo + 1 // the first extent that ends after lo
	if neighbours {
		from = lo // or at lo
	}
	m.extents.AscendGreaterOrEqual(endKey(from), func(e Extent) bool {
		if e.FileBlock < hi || (neighbours && e.FileBlock == hi) {
			m.old = append(m.old, e)
			return e.FileBlock < hi
		}
		return false
	})
}

// normalize merges mergeable neighbours in m.new, in place.
func (m *Map) normalize() {
	if len(m.new) <= 1 {
		return
	}
	out := m.new[:1]
	for _, e := range m.new[1:] {
		if last := &out[len(out)-1]; mergeable(*last, e) {
			last.Len += e.Len
		} else {
			out = append(out, e)
		}
	}
	m.new = out
}

// commit replaces the extents m.old with the extents m.new (both sorted,
// covering the same window) in the trees, and records the difference by
// key (FileBlock): a Delete for each key only in m.old, a Put for each key
// only in m.new, and a Put for each key in both whose persisted record
// changed. The extent tree is keyed by End, which a new extent may share
// with an old one at another key, so every old extent that changes leaves
// the tree before any new one enters it (except one whose End does not
// change, which is replaced in place: no other new extent can have its End).
func (m *Map) commit(rec Recorder) {
	old, nw := m.old, m.new
	// Pass 1: records, counters, the pending index; old extents out.
	i, j := 0, 0
	for i < len(old) || j < len(nw) {
		switch {
		case j == len(nw) || (i < len(old) && old[i].FileBlock < nw[j].FileBlock):
			x := old[i]
			m.extents.Delete(x)
			m.unindex(x)
			m.blocks -= x.Len
			if rec != nil {
				rec.Delete(x.FileBlock)
			}
			i++
		case i == len(old) || nw[j].FileBlock < old[i].FileBlock:
			y := nw[j]
			m.index(y)
			m.blocks += y.Len
			if rec != nil {
				rec.Put(y)
			}
			j++
		default:
			x, y := old[i], nw[j]
			if x != y {
				if x.End() != y.End() {
					// Otherwise pass 2 replaces x in place.
					m.extents.Delete(x)
				}
				m.unindex(x)
				m.index(y)
				m.blocks = m.blocks - x.Len + y.Len
				if rec != nil && x.Persisted() != y.Persisted() {
					rec.Put(y)
				}
			}
			i++
			j++
		}
	}
	// Pass 2: new and changed extents in.
	i = 0
	for _, y := range nw {
		for i < len(old) && old[i].FileBlock < y.FileBlock {
			i++
		}
		if i < len(old) && old[i] == y {
			continue
		}
		m.extents.ReplaceOrInsert(y)
	}
	m.reindex()
	m.trimScratch()
}

// index adds e to the pending index if it is pending.
func (m *Map) index(e Extent) {
	if e.Epoch > 0 {
		m.pending.ReplaceOrInsert(pendingKey{Epoch: e.Epoch, FileBlock: e.FileBlock, End: e.End()})
	}
}

// unindex removes e from the pending index if it is pending.
func (m *Map) unindex(e Extent) {
	if e.Epoch > 0 {
		m.pending.Delete(pendingKey{Epoch: e.Epoch, FileBlock: e.FileBlock})
	}
}

// trimScratch drops scratch slices that one large mutation grew.
func (m *Map) trimScratch() {
	if cap(m.old) > maxScratch {
		m.old = nil
	}
	if cap(m.new) > maxScratch {
		m.new = nil
	}
}

// CollapseRange removes file blocks [fb, fb+n) and moves every extent past
// them n blocks down, so the blocks after the range follow the blocks
// before it (FALLOC_FL_COLLAPSE_RANGE; analogous to XFS's
// xfs_collapse_file_space, which punches the range and then shifts with
// xfs_bmap_collapse_extents, one transaction per extent: here the whole
// shift is one mutation, so the engine can commit it in one transaction).
// Extents are split at fb and fb+n, and the extent that ends at fb merges
// with the first one moved next to it if they are mergeable. It returns
// the device blocks it unmapped, as Remove does (a remapped block's old
// block included). A range that runs past block 2^64-1 is clipped there
// (nothing is left to move: it is Remove); n == 0 is a no-op. Every moved extent changes key, so the Recorder sees a
// Delete or a Put for each record from fb on: O(k log n) for the k extents
// at or after fb.
func (m *Map) CollapseRange(fb, n uint64, rec Recorder) []DevRange {
	lo, hi := fb, rangeEnd(fb, n)
	if hi <= lo {
		return nil
	}
	if hi == math.MaxUint64 {
		return m.Remove(fb, n, rec)
	}
	shift := hi - lo
	m.collect(lo, math.MaxUint64, true)
	if len(m.old) == 0 {
		m.trimScratch()
		return nil
	}
	var freed []DevRange
	m.new = m.new[:0]
	for _, x := range m.old {
		if x.FileBlock < lo {
			// The extent that ends at or after lo: its part before lo stays.
			m.new = append(m.new, x.piece(x.FileBlock, min(lo, x.End())))
		}
		if s, e := max(lo, x.FileBlock), min(hi, x.End()); s < e {
			freed = appendFreed(freed, x.piece(s, e))
		}
		if x.End() > hi {
			y := x.piece(max(hi, x.FileBlock), x.End())
			y.FileBlock -= shift
			m.new = append(m.new, y)
		}
	}
	m.normalize()
	m.commit(rec)
	return coalesce(freed)
}

// InsertRange moves every extent at or after file block fb n blocks up,
// leaving [fb, fb+n) a hole (FALLOC_FL_INSERT_RANGE; analogous to XFS's
// xfs_insert_file_space: split at fb with xfs_bmap_split_extent, then
// xfs_bmap_insert_extents). An extent that contains fb is split there (the
// pieces of a remapped one keep their old blocks and OldUnwritten). It
// fails with ErrInvalid, changing nothing, if a moved extent would run
// past block 2^64-1; n == 0 is a no-op. As CollapseRange, it costs
// O(k log n) for the k extents at or after fb, each of which changes key.
func (m *Map) InsertRange(fb, n uint64, rec Recorder) error {
	if n == 0 {
		return nil
	}
	if last, ok := m.extents.Max(); ok && last.End() > fb && last.End() > math.MaxUint64-n {
		return &Error{Op: "insert range", Extent: last, Err: detail(ErrInvalid, "would move past block 2^64-1 by %d blocks", n)}
	}
	if fb == math.MaxUint64 {
		return nil
	}
	m.collect(fb, math.MaxUint64, false)
	if len(m.old) == 0 {
		m.trimScratch()
		return nil
	}
	m.new = m.new[:0]
	for _, x := range m.old {
		if x.FileBlock < fb {
			m.new = append(m.new, x.piece(x.FileBlock, fb))
		}
		y := x.piece(max(fb, x.FileBlock), x.End())
		y.FileBlock += n
		m.new = append(m.new, y)
	}
	m.commit(rec)
	return nil
}
