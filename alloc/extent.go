package alloc

import (
	"fmt"

	"github.com/google/btree"
)

// BlockNum is the number of a block on the data device: block b occupies
// bytes [b*blockSize, (b+1)*blockSize).
type BlockNum uint64

// Extent is a run of Len contiguous device blocks starting at Start: the
// blocks [Start, Start+Len). A valid extent has Len > 0 and does not wrap
// around the end of the BlockNum space.
type Extent struct {
	Start BlockNum
	Len   uint64
}

// End returns the first block after e: Start+Len.
func (e Extent) End() BlockNum { return e.Start + BlockNum(e.Len) }

// Contains reports whether block b lies in e.
func (e Extent) Contains(b BlockNum) bool { return b >= e.Start && b-e.Start < BlockNum(e.Len) }

// Covers reports whether every block of o lies in e. An empty o is covered
// by any e.
func (e Extent) Covers(o Extent) bool {
	return o.Len == 0 || (o.Start >= e.Start && o.End() <= e.End())
}

// Overlaps reports whether e and o share at least one block.
func (e Extent) Overlaps(o Extent) bool {
	return e.Len > 0 && o.Len > 0 && e.Start < o.End() && o.Start < e.End()
}

// String formats e as the half-open range "[Start,End)", or "[Start,+Len)"
// if End would wrap around.
func (e Extent) String() string {
	if e.End() < e.Start {
		return fmt.Sprintf("[%d,+%d)", e.Start, e.Len)
	}
	return fmt.Sprintf("[%d,%d)", e.Start, e.End())
}

// valid reports whether e is non-empty, does not wrap, and lies within
// [first, end).
func (e Extent) valid(first, end BlockNum) bool {
	return e.Len > 0 && e.Start >= first && e.Start < end && e.Len <= uint64(end-e.Start)
}

// btreeDegree is the degree of every B-tree in the package. 32 keeps nodes
// around a few cache lines of 16-byte extents and the trees shallow.
const btreeDegree = 32

// extentTree is a set of disjoint extents ordered by Start.
type extentTree = btree.BTreeG[Extent]

func newExtentTree() *extentTree {
	return btree.NewG(btreeDegree, func(a, b Extent) bool { return a.Start < b.Start })
}

// floor returns the item of t with the greatest key <= key.
func floor[T any](t *btree.BTreeG[T], key T) (item T, ok bool) {
	t.DescendLessOrEqual(key, func(x T) bool {
		item, ok = x, true
		return false
	})
	return item, ok
}

// ceil returns the item of t with the least key >= key.
func ceil[T any](t *btree.BTreeG[T], key T) (item T, ok bool) {
	t.AscendGreaterOrEqual(key, func(x T) bool {
		item, ok = x, true
		return false
	})
	return item, ok
}

// split returns the parts of outer before and after inner, which outer
// covers. Either may be empty (Len 0).
func split(outer, inner Extent) (before, after Extent) {
	before = Extent{Start: outer.Start, Len: uint64(inner.Start - outer.Start)}
	after = Extent{Start: inner.End(), Len: uint64(outer.End() - inner.End())}
	return before, after
}

// busyExtent is a freed extent that may not be allocated until the metadata
// change that freed it, numbered seq, is durable.
type busyExtent struct {
	Extent
	seq uint64
}

func (b busyExtent) String() string { return fmt.Sprintf("%v@%d", b.Extent, b.seq) }

// busyTrees holds the busy extents twice: by start, to find neighbours when
// merging, and by (seq, start), so that Unbusy visits only the extents it
// releases.
type busyTrees struct {
	byStart *btree.BTreeG[busyExtent]
	bySeq   *btree.BTreeG[busyExtent]
}

func newBusyTrees() busyTrees {
	return busyTrees{
		byStart: btree.NewG(btreeDegree, func(a, b busyExtent) bool { return a.Start < b.Start }),
		bySeq: btree.NewG(btreeDegree, func(a, b busyExtent) bool {
			if a.seq != b.seq {
				return a.seq < b.seq
			}
			return a.Start < b.Start
		}),
	}
}

func (t busyTrees) insert(b busyExtent) {
	t.byStart.ReplaceOrInsert(b)
	t.bySeq.ReplaceOrInsert(b)
}

func (t busyTrees) delete(b busyExtent) {
	t.byStart.Delete(b)
	t.bySeq.Delete(b)
}
