// Package extmap is the in-core extent map of one file: which device block
// backs each file block, and whether it holds data (written) or only reads
// as zeros (unwritten). A file block that no extent covers is a hole. It is
// the analogue of the kernel's in-core extent tree (XFS's incore extent
// list, xfs_iext_*; ext4's extent status tree), and it does no I/O.
//
// # Extents
//
// An Extent maps Len file blocks from FileBlock to device blocks from
// DevBlock, in state Written or Unwritten. The map keeps its extents
// non-empty, disjoint and sorted by FileBlock, and never lets an extent run
// past block 2^64-1 in the file or on the device (so the block numbered
// math.MaxUint64 is never mapped, and NextHole always has an answer).
//
// With reflink, device blocks may be shared, and one file may map the same
// device block more than once (a clone of a range of the file into another
// range of the same file). Only durable written blocks are ever shared:
// extents may overlap on the device only when both are Written with Epoch
// 0. The device blocks of every other extent (an
// unwritten extent, a pending conversion, the new blocks of a remap; see
// Copy-on-write remaps) belong to it alone, and overlap no other extent's.
// The blocks a remap replaced (Extent.OldDevBlock) are not blocks the map
// reads, but a reference its record holds: durable written blocks, which
// may be shared, or, for a remap of a pending conversion (OldUnwritten),
// the conversion's blocks, which still belong to it alone. So the records
// overlap on the device only where both say Written, as Load requires. The
// map does not count references; the engine does, outside it.
//
// # Durability epochs
//
// A write into unwritten blocks makes them written in core as soon as it
// completes, but their data is durable only after the next device flush.
// Until then the persisted record must still say unwritten, or a crash
// would expose whatever the blocks held before (stale data of another
// file). So a Written extent carries an Epoch: 0 when its persisted record
// says Written, or the conversion epoch (the number of the device flush
// that will make its data durable) when its persisted record still says
// Unwritten. Extent.Persisted gives the record to store. After flush E
// completes, the engine calls MarkDurable(E), which turns every epoch in
// 1..E to 0 and reports the records that now say Written, for the metadata
// batch that the fsync then syncs. Unwritten extents always have Epoch 0.
//
// For that to be safe the engine must pick a write's epoch after the
// write's device I/O has completed, and move its epoch counter past E before
// it issues flush E: then every block converted at an epoch <= E had its
// data on the device before flush E began. (A conversion that races with
// the counter's move gets E+1, which is merely conservative.)
//
// # The record mirror
//
// The engine persists the map as one meta.Extent record per extent, keyed by
// FileBlock. Every mutation reports, through a Recorder, the records it
// creates or replaces (Put) and the ones it removes (Delete), in an order in
// which they can simply be applied. The invariant, checked by the tests
// after every operation:
//
//	if R is a map from file block to meta.Extent that starts out as the
//	records the Map was loaded from, then applying every Recorder call, in
//	order, to R (Put stores e.Persisted() under e.FileBlock, Delete removes
//	the key) leaves R equal to {e.FileBlock: e.Persisted()} for every e in
//	Extents().
//
// Records that did not change are not reported: a mutation reports only
// the extents it split, merged, changed or removed, and a change that
// leaves the persisted record as it was (for instance an Epoch that moves
// from one non-zero value to another, or a remap, whose record keeps
// naming the old blocks) reports nothing for that record.
//
// # Merging
//
// Two extents are mergeable when they touch in the file and on the device,
// have the same State and the same Epoch, and are both plain or both
// remapped, with old blocks that touch too and the same OldUnwritten (so
// that the merged extent's record is the two records joined). Every
// mutation merges the extents it creates or changes with mergeable
// neighbours, so a map built by mutations alone (or loaded from merged
// records) never holds a mergeable pair; Check verifies it. Load keeps
// the records' boundaries as they are, because the record mirror starts
// from them.
//
// Pending extents (Epoch > 0) merge only when their epochs are equal, not
// by taking the larger epoch. Taking the larger one would make blocks
// converted in epoch E wait for flush E+1: an fsync that flushed the device
// and called MarkDurable(E) would leave their records saying Unwritten, and
// a crash after that fsync returned would read them as zeros. Equal-epoch
// merging keeps every block's epoch exact, so MarkDurable(E) makes durable
// exactly the blocks whose data flush E covered.
//
// # Copy-on-write remaps
//
// A write into a shared device block (see Extents) must not change it in
// place, and neither may a second write into a pending conversion (see
// below). The engine writes the new data out of place, to a freshly
// allocated "staged" block, and once that write has completed calls Remap,
// which maps the file block to the staged block in core at once (reads
// must see the new data). The persisted record, though, must go on naming
// the old block until a device flush has made the new block's data
// durable: a crash before that flush must find what the record named
// before (the old data, which is durable, or zeros), and never a record
// naming a block whose data the device may have lost. So a remapped
// extent is pending, like a conversion: it has Remapped set, OldDevBlock
// the block it replaced, and Epoch the epoch whose flush makes its data
// durable; Extent.Persisted gives its record, {FileBlock, OldDevBlock,
// Len, Written}, or Unwritten if OldUnwritten is set (see below). This is
// the deferral of the durability epochs, applied to the device block
// instead of the state, and it has the same rule: the engine may Remap
// only blocks whose data is on the device, and must pick the epoch after
// the write has completed.
//
// Remap takes every written block, and only those: holes and unwritten
// blocks are never shared, and the engine writes them in place, converting
// them. What a block's record says does not change:
//
//   - a durable written block becomes a remap of its own block, whose
//     record keeps naming it, Written;
//   - a pending conversion (written in place, its record still Unwritten)
//     becomes a remap of its own block with OldUnwritten set, whose record
//     keeps naming it, Unwritten: a crash before the flush shows zeros, as
//     it would have without the remap. The engine remaps these too because
//     it writes a block in place at most once before it frees it (a second
//     write of a block whose conversion is pending goes out of place, so
//     that the data a checksum was computed for never changes under it).
//     The old block still belongs to the file alone;
//   - a block remapped again keeps its old block and OldUnwritten (what its
//     record names), and Remap returns the staged blocks it replaces, which
//     no record names, for the engine to free at once.
//
// MarkDurable(E) switches the record of every remap with epoch <= E to its
// new blocks, Written, and returns a Remapping{Old, New, OldUnwritten} for
// each: the engine then drops one reference to Old (frees it, if
// OldUnwritten: a conversion's blocks have no other) and marks New no
// longer staged, in the metadata batch that the fsync syncs. Unconvert of a
// remapped block reports the same, since its record then names the new
// blocks (Unwritten). Remove and CollapseRange return, for a remapped
// block, both its new block (staged, named by no record) and its old one
// (the reference its record held, unwritten or not): the engine, which
// knows which blocks are staged, tells them apart. InsertRange moves
// remapped extents as it moves any other, OldUnwritten included.
//
// Two remaps merge only if they agree on OldUnwritten (their records, one
// Written and one Unwritten, could not be joined otherwise), and a remap
// never merges with a plain extent (see Merging).
//
// # Costs
//
// The extents live in a B-tree ordered by End (the same order as by
// FileBlock, and the extent that contains a block is then found in one
// descent); pending extents (conversions and remaps) are also indexed by
// (Epoch, FileBlock). A map of at most 64 extents (a preallocated or
// sequentially written file) also keeps them in a flat sorted slice, which
// Lookup and At binary-search without the B-tree's callbacks (a one-block
// Lookup in a two-extent map, BenchmarkLookup: about 60 ns instead of 175
// on a loaded 2-CPU VM), and which every mutation rebuilds. Lookup, At,
// NextData, LastBlock and every mutation cost O(log n + k), where k is
// the number of extents the call returns or touches; Lookup, Convert,
// Unconvert and MarkDurable allocate nothing once the map's scratch space
// has grown (B-tree nodes aside), except the Remappings that Unconvert and
// MarkDurable return when they touch remapped extents; Remap, Remove and
// CollapseRange allocate the ranges they return. MarkDurable costs O(1)
// when nothing is pending, O(log p) for p pending extents none of which is
// due, and O((k+1) log n) for k pending extents made durable. NextHole
// walks the run of touching extents from its start; LastWritten walks back
// over trailing unwritten extents. Load, Extents and Check are O(n) or
// O(n log n).
//
// # Concurrency
//
// A Map does no locking. The engine guards each inode's Map with the
// inode's extent mutex, short-held and never across device I/O. Mutations
// (Insert, Convert, Unconvert, Remap, Remove, CollapseRange, InsertRange,
// MarkDurable) need the lock held exclusively; the queries (Lookup, At,
// NextData, NextHole, LastBlock, LastWritten, Extents, Len, Blocks,
// Pending, PendingLen, Check) only read, so they may run concurrently with
// each other, for example under the read side of a sync.RWMutex. A
// Recorder is called synchronously from inside the mutation, while the Map
// is half-updated: it must not call the Map.
//
// # Errors
//
// Insert fails with ErrInvalid or ErrMapped, and Remap and InsertRange
// with ErrInvalid, and then change nothing; Load and Check fail with
// ErrCorrupt. Every error is an *Error. The other mutations cannot fail:
// ranges that run past block 2^64-1 are clipped there, and n == 0 is a
// no-op.
package extmap

import (
	"fmt"
	"math"
	"slices"

	"github.com/google/btree"

	"github.com/sluicefs/sluice/meta"
)

// Extent maps Len file blocks starting at FileBlock to Len device blocks
// starting at DevBlock.
type Extent struct {
	FileBlock, DevBlock, Len uint64
	// State is the in-core state: Written blocks read as the data stored
	// on the device, Unwritten blocks read as zeros.
	State meta.ExtentState
	// Remapped is set only on a Written extent with Epoch > 0 whose blocks
	// replaced, by copy-on-write, the written blocks starting at
	// OldDevBlock (see the package doc, Copy-on-write remaps): its
	// persisted record still maps FileBlock..+Len to OldDevBlock, Written
	// (Unwritten if OldUnwritten), until MarkDurable covers Epoch.
	// (Declared beside State, as OldUnwritten is, so that an Extent stays
	// 48 bytes.)
	Remapped bool
	// OldUnwritten is set only on a Remapped extent whose old blocks were
	// a pending conversion: their record says Unwritten, and they belong
	// to the file alone. Otherwise they were durable written, and their
	// record says Written.
	OldUnwritten bool
	// Epoch is 0 when the persisted record states State and DevBlock. A
	// Written extent with Epoch > 0 was converted from unwritten in core
	// at conversion epoch Epoch, but its data is not yet known durable, so
	// its persisted record still says Unwritten (a crash must show zeros,
	// never stale blocks); or, if Remapped, still names OldDevBlock.
	// Unwritten extents have Epoch 0.
	Epoch uint64
	// OldDevBlock is the first device block that a Remapped extent
	// replaced, which its persisted record still names; 0 unless Remapped.
	OldDevBlock uint64
}

// End returns the file block after the extent's last.
func (e Extent) End() uint64 { return e.FileBlock + e.Len }

// Persisted returns the record to store for e: the same extent, with State
// Unwritten while Epoch > 0, except that a Remapped extent's record is
// {FileBlock, OldDevBlock, Len, Written}, or Unwritten if OldUnwritten.
func (e Extent) Persisted() meta.Extent {
	switch {
	case e.Remapped && e.OldUnwritten:
		return meta.Extent{FileBlock: e.FileBlock, DevBlock: e.OldDevBlock, Len: e.Len, State: meta.Unwritten}
	case e.Remapped:
		return meta.Extent{FileBlock: e.FileBlock, DevBlock: e.OldDevBlock, Len: e.Len, State: meta.Written}
	case e.Epoch > 0:
		return meta.Extent{FileBlock: e.FileBlock, DevBlock: e.DevBlock, Len: e.Len, State: meta.Unwritten}
	}
	return meta.Extent{FileBlock: e.FileBlock, DevBlock: e.DevBlock, Len: e.Len, State: e.State}
}

func (e Extent) String() string {
	switch {
	case e.Remapped && e.OldUnwritten:
		return fmt.Sprintf("[%d+%d @%d %v epoch %d, remap of unwritten @%d]", e.FileBlock, e.Len, e.DevBlock, e.State, e.Epoch, e.OldDevBlock)
	case e.Remapped:
		return fmt.Sprintf("[%d+%d @%d %v epoch %d, remap of @%d]", e.FileBlock, e.Len, e.DevBlock, e.State, e.Epoch, e.OldDevBlock)
	case e.Epoch > 0:
		return fmt.Sprintf("[%d+%d @%d %v epoch %d]", e.FileBlock, e.Len, e.DevBlock, e.State, e.Epoch)
	}
	return fmt.Sprintf("[%d+%d @%d %v]", e.FileBlock, e.Len, e.DevBlock, e.State)
}

// valid reports whether e is a well-formed extent: non-empty, not running
// past block 2^64-1 in the file or on the device, of a known state,
// unwritten only with Epoch 0, and either Remapped (then Written, with
// Epoch > 0, and old blocks not running past block 2^64-1 either) or with
// OldDevBlock 0 and OldUnwritten false.
func (e Extent) valid() bool {
	if !(e.Len > 0 && e.FileBlock+e.Len > e.FileBlock && e.DevBlock+e.Len > e.DevBlock &&
		(e.State == meta.Written || (e.State == meta.Unwritten && e.Epoch == 0))) {
		return false
	}
	if e.Remapped {
		return e.State == meta.Written && e.Epoch > 0 && e.OldDevBlock+e.Len > e.OldDevBlock
	}
	return e.OldDevBlock == 0 && !e.OldUnwritten
}

// shareable reports whether e's device blocks may be shared with other
// extents: whether e is durable written (see the package doc, Extents).
func (e Extent) shareable() bool {
	return e.State == meta.Written && e.Epoch == 0
}

// piece returns the part of e that covers file blocks [lo, hi), which must
// lie inside e.
func (e Extent) piece(lo, hi uint64) Extent {
	p := Extent{FileBlock: lo, DevBlock: e.DevBlock + (lo - e.FileBlock), Len: hi - lo, State: e.State, Epoch: e.Epoch}
	if e.Remapped {
		p.Remapped, p.OldDevBlock, p.OldUnwritten = true, e.OldDevBlock+(lo-e.FileBlock), e.OldUnwritten
	}
	return p
}

// mergeable reports whether b can be appended to a as one extent: they
// touch in the file and on the device, have the same state and epoch, and
// are both plain or both remapped, with old blocks that touch as well and
// the same OldUnwritten.
func mergeable(a, b Extent) bool {
	return a.End() == b.FileBlock && a.DevBlock+a.Len == b.DevBlock && a.State == b.State && a.Epoch == b.Epoch &&
		a.Remapped == b.Remapped && a.OldUnwritten == b.OldUnwritten && (!a.Remapped || a.OldDevBlock+a.Len == b.OldDevBlock)
}

// Recorder receives the changes a mutation makes to the persisted extent
// records, keyed by FileBlock. Calls come in an order in which they can be
// applied as they arrive; one mutation never names the same key twice.
// (MarkDurable, which runs one step per pending extent, may Put a key more
// than once; the last Put wins.)
type Recorder interface {
	// Put records that the record keyed e.FileBlock is now e.Persisted(),
	// created or replaced.
	Put(e Extent)
	// Delete records that the record keyed fileBlock no longer exists.
	Delete(fileBlock uint64)
}

// Segment is one piece of a Lookup: a hole, or part of an extent clipped
// to the range looked up.
type Segment struct {
	FileBlock, Len uint64
	// Hole is set when no extent maps the segment; DevBlock and State are
	// then zero.
	Hole bool
	// DevBlock is the device block that backs FileBlock in core (for a
	// remapped extent the new block, whose data reads must see).
	DevBlock uint64
	// State is the in-core state (Written for an extent converted but not
	// yet durable: its data is on the device, and reads must see it).
	State meta.ExtentState
}

// End returns the file block after the segment's last.
func (s Segment) End() uint64 { return s.FileBlock + s.Len }

// DevRange is a run of device blocks.
type DevRange struct {
	Start, Len uint64
}

// End returns the device block after the range's last.
func (r DevRange) End() uint64 { return r.Start + r.Len }

// Remapping reports a remap whose record MarkDurable or Unconvert switched
// from the old device blocks to the new ones (see the package doc,
// Copy-on-write remaps): the file blocks that Old backed in the record are
// now backed by New, block for block (Old.Len == New.Len). The engine
// drops one reference to Old and marks New no longer staged.
type Remapping struct {
	Old, New DevRange
	// OldUnwritten is set when Old was a pending conversion's blocks, its
	// record Unwritten (Extent.OldUnwritten): they belong to the file
	// alone, so dropping the reference frees them.
	OldUnwritten bool
}

// btreeDegree is the degree of both B-trees: nodes of up to 63 items,
// 3 KiB of extents, a few cache lines per level searched.
const btreeDegree = 32

// pendingKey indexes a pending extent (Epoch > 0) by epoch, for
// MarkDurable. It is ordered by (Epoch, FileBlock); End locates the extent
// in Map.extents.
type pendingKey struct {
	Epoch, FileBlock, End uint64
}

// endKey returns a search key for Map.extents: the extents are ordered by
// End, so AscendGreaterOrEqual(endKey(b+1)) starts at the extent that
// contains block b, or else the first one after it, in one descent.
func endKey(end uint64) Extent { return Extent{Len: end} }

// Map is the extent map of one file. See the package doc. The zero value
// is not usable: use New or Load.
type Map struct {
	// extents holds every extent, ordered by End (the same order as by
	// FileBlock, as extents are disjoint and non-empty; keying by End finds
	// the extent containing a block in one descent). Protected by the
	// owner's lock (the inode's extent mutex), as is every field.
	extents *btree.BTreeG[Extent]
	// pending holds (Epoch, FileBlock, End) of every extent with Epoch > 0.
	pending *btree.BTreeG[pendingKey]
	// blocks is the sum of the extents' lengths.
	blocks uint64
	// small holds every extent, in order, while there are at most
	// smallMax of them (smallSet is then true): the index Lookup and At
	// search, without the B-tree's callbacks. Every mutation rebuilds it.
	// smallLimit is smallMax (tests lower it).
	small      []Extent
	smallSet   bool
	smallLimit int
	// unmerged is set when Load was given mergeable neighbours; Check then
	// does not require the map to be merged.
	unmerged bool

	// old and new are scratch for mutations: the extents of the window a
	// mutation rewrites, before and after.
	old, new []Extent
}

// smallMax is the most extents a map keeps in its flat index (Map.small):
// 64 extents are 3 KiB, copied once per mutation.
const smallMax = 64

// reindex rebuilds the flat index after a mutation.
func (m *Map) reindex() {
	m.small, m.smallSet = m.small[:0], m.extents.Len() <= m.smallLimit
	if !m.smallSet {
		m.small = nil
		return
	}
	m.extents.Ascend(func(e Extent) bool {
		m.small = append(m.small, e)
		return true
	})
}

// New returns an empty map: a file that is one hole.
func New() *Map {
	return &Map{
		smallSet:   true,
		smallLimit: smallMax,
		extents:    btree.NewG(btreeDegree, func(a, b Extent) bool { return a.End() < b.End() }),
		pending: btree.NewG(btreeDegree, func(a, b pendingKey) bool {
			return a.Epoch < b.Epoch || (a.Epoch == b.Epoch && a.FileBlock < b.FileBlock)
		}),
	}
}

// Load builds the map of a file from its persisted extent records, in any
// order. Every extent gets Epoch 0: the records state what they state.
// Boundaries are kept as they are, even between mergeable records. It fails
// with ErrCorrupt if a record is empty, runs past block 2^64-1 in the file
// or on the device, has an unknown state, or overlaps another in the file,
// or if an Unwritten record shares a device block with another record
// (two Written records may share device blocks: see the package doc,
// Extents).
func Load(records []meta.Extent) (*Map, error) {
	m := New()
	sorted := make([]Extent, len(records))
	for i, r := range records {
		sorted[i] = Extent{FileBlock: r.FileBlock, DevBlock: r.DevBlock, Len: r.Len, State: r.State}
		if !sorted[i].valid() {
			return nil, &Error{Op: "load", Extent: sorted[i], Err: detail(ErrCorrupt, "empty, overflowing or of unknown state")}
		}
	}
	slices.SortFunc(sorted, func(a, b Extent) int { return cmpUint64(a.FileBlock, b.FileBlock) })
	for i, e := range sorted {
		if i > 0 {
			prev := sorted[i-1]
			if prev.End() > e.FileBlock {
				return nil, &Error{Op: "load", Extent: e, Err: detail(ErrCorrupt, "overlaps %v in the file", prev)}
			}
			if mergeable(prev, e) {
				m.unmerged = true
			}
		}
	}
	if err := checkDevOverlap("load", slices.Clone(sorted)); err != nil {
		return nil, err
	}
	for _, e := range sorted {
		m.extents.ReplaceOrInsert(e)
		m.blocks += e.Len
	}
	m.reindex()
	return m, nil
}

// checkDevOverlap returns an error if two of the extents share a device
// block (of their DevBlock ranges: a remap's old blocks are not checked)
// and one of them is not shareable. It sorts exts by DevBlock and sweeps
// them, keeping the extent that reaches furthest on the device among those
// seen, and among the unshareable ones seen: an extent overlaps an earlier
// one exactly when it starts before the end of the first, and an earlier
// unshareable one exactly when it starts before the end of the second.
func checkDevOverlap(op string, exts []Extent) error {
	slices.SortFunc(exts, func(a, b Extent) int { return cmpUint64(a.DevBlock, b.DevBlock) })
	// far and farOwn are zero (ending at block 0) until there is one.
	var far, farOwn Extent
	for _, b := range exts {
		a, overlap := farOwn, farOwn.DevBlock+farOwn.Len > b.DevBlock
		if !overlap && !b.shareable() {
			a, overlap = far, far.DevBlock+far.Len > b.DevBlock
		}
		if overlap {
			return &Error{Op: op, Extent: b, Err: detail(ErrCorrupt, "shares device blocks with %v, and one is not durable written", a)}
		}
		if b.DevBlock+b.Len > far.DevBlock+far.Len {
			far = b
		}
		if !b.shareable() && b.DevBlock+b.Len > farOwn.DevBlock+farOwn.Len {
			farOwn = b
		}
	}
	return nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// rangeEnd returns the end of [fb, fb+n), clipped at 2^64-1.
func rangeEnd(fb, n uint64) uint64 {
	if n > math.MaxUint64-fb {
		return math.MaxUint64
	}
	return fb + n
}

// Lookup appends to out the segments that cover exactly [fb, fb+n), in
// order: a hole segment for each maximal unmapped run, and for each extent
// that overlaps the range its overlapping part. Two mapped segments may
// touch (they are different extents); two holes never do. A range that
// runs past block 2^64-1 is clipped there; n == 0 appends nothing. Lookup
// allocates nothing when out has room for the segments.
func (m *Map) Lookup(fb, n uint64, out []Segment) []Segment {
	hi := rangeEnd(fb, n)
	if hi <= fb {
		return out
	}
	if !m.smallSet {
		return m.lookupTree(fb, hi, out)
	}
	cur := fb
	// Every extent that ends after fb and starts before hi.
	for _, e := range m.small[m.smallAfter(fb):] {
		if e.FileBlock >= hi {
			break
		}
		if out, cur = appendPiece(out, e, cur, hi); cur >= hi {
			break
		}
	}
	return appendHole(out, cur, hi)
}

// lookupTree is Lookup of [fb, hi) (fb < hi) in the B-tree.
func (m *Map) lookupTree(fb, hi uint64, out []Segment) []Segment {
	cur := fb
	m.extents.AscendGreaterOrEqual(endKey(fb+1), func(e Extent) bool {
		if e.FileBlock >= hi {
			return false
		}
		out, cur = appendPiece(out, e, cur, hi)
		return cur < hi
	})
	return appendHole(out, cur, hi)
}

// appendPiece appends to out the part of extent e that lies in [cur, hi),
// after a hole segment from cur to e if there is one, and returns out and
// the end of what it appended. e ends after cur and starts before hi.
func appendPiece(out []Segment, e Extent, cur, hi uint64) ([]Segment, uint64) {
	start := max(e.FileBlock, cur)
	if start > cur {
		out = append(out, Segment{FileBlock: cur, Len: start - cur, Hole: true})
	}
	end := min(e.End(), hi)
	out = append(out, Segment{FileBlock: start, Len: end - start, DevBlock: e.DevBlock + (start - e.FileBlock), State: e.State})
	return out, end
}

// appendHole appends a hole segment [cur, hi) to out if it is not empty.
func appendHole(out []Segment, cur, hi uint64) []Segment {
	if cur < hi {
		out = append(out, Segment{FileBlock: cur, Len: hi - cur, Hole: true})
	}
	return out
}

// smallAfter returns the index in m.small of the first extent that ends
// after block fb (len(m.small) if none does).
//
// Preconditions: m.smallSet.
func (m *Map) smallAfter(fb uint64) int {
	lo, hi := 0, len(m.small)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if m.small[h].End() <= fb {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// next returns the extent that contains fb, or else the first one after it.
func (m *Map) next(fb uint64) (Extent, bool) {
	var found Extent
	ok := false
	switch {
	case fb == math.MaxUint64: // no extent contains block 2^64-1
	case m.smallSet:
		if i := m.smallAfter(fb); i < len(m.small) {
			found, ok = m.small[i], true
		}
	default:
		m.extents.AscendGreaterOrEqual(endKey(fb+1), func(e Extent) bool {
			found, ok = e, true
			return false
		})
	}
	return found, ok
}

// At returns the extent that contains file block fb, if one does.
func (m *Map) At(fb uint64) (Extent, bool) {
	e, ok := m.next(fb)
	if !ok || e.FileBlock > fb {
		return Extent{}, false
	}
	return e, true
}

// NextData returns the first mapped block at or after fb, for SEEK_DATA,
// and false if there is none. Unwritten extents count as data. POSIX allows
// it (a hole may always be reported as data) and it keeps the answer a
// property of the map alone; ext4 and XFS instead report unwritten extents
// as holes unless cached pages cover them (iomap_seek_data), which the
// engine can do by refining with Lookup and its page cache. The caller
// applies EOF.
func (m *Map) NextData(fb uint64) (uint64, bool) {
	e, ok := m.next(fb)
	if !ok {
		return 0, false
	}
	return max(fb, e.FileBlock), true
}

// NextHole returns the first unmapped block at or after fb, for SEEK_HOLE
// (unwritten extents count as data, as in NextData). There always is one:
// block 2^64-1 is never mapped. The caller applies EOF. It walks the run of
// touching extents that starts at fb.
func (m *Map) NextHole(fb uint64) uint64 {
	h := fb
	if fb == math.MaxUint64 {
		return h
	}
	m.extents.AscendGreaterOrEqual(endKey(fb+1), func(e Extent) bool {
		if e.FileBlock > h {
			return false
		}
		h = e.End()
		return true
	})
	return h
}

// LastBlock returns the end of the last mapped block (the block after it),
// and false if nothing is mapped.
func (m *Map) LastBlock() (end uint64, ok bool) {
	e, ok := m.extents.Max()
	if !ok {
		return 0, false
	}
	return e.End(), true
}

// LastWritten returns the end of the last Written block (in core: pending
// extents count), and false if no block is written. It walks back over
// trailing unwritten extents (preallocation past the data).
func (m *Map) LastWritten() (end uint64, ok bool) {
	m.extents.Descend(func(e Extent) bool {
		if e.State == meta.Written {
			end, ok = e.End(), true
			return false
		}
		return true
	})
	return end, ok
}

// Extents returns every extent, in order of FileBlock.
func (m *Map) Extents() []Extent {
	out := make([]Extent, 0, m.extents.Len())
	m.extents.Ascend(func(e Extent) bool {
		out = append(out, e)
		return true
	})
	return out
}

// Len returns the number of extents (and of persisted records).
func (m *Map) Len() int { return m.extents.Len() }

// Blocks returns the number of mapped blocks, written or unwritten.
func (m *Map) Blocks() uint64 { return m.blocks }

// Pending reports whether some extent has Epoch > 0, that is, whether some
// persisted record lags the map: it says Unwritten for blocks that are
// Written in core, or names the old blocks of a remap.
func (m *Map) Pending() bool { return m.pending.Len() > 0 }

// PendingLen returns the number of extents with Epoch > 0.
func (m *Map) PendingLen() int { return m.pending.Len() }
