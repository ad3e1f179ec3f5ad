package extmap

import (
	"fmt"
	"slices"
)

// Check verifies the map's invariants and returns an error wrapping
// ErrCorrupt describing the first one broken:
//
//   - every extent is valid (non-empty, no overflow, known state,
//     Unwritten only with Epoch 0, Remapped only when Written with Epoch
//     > 0, OldDevBlock 0 and OldUnwritten false unless Remapped);
//   - extents are sorted by FileBlock and disjoint in the file;
//   - two extents share a device block only if both are durable written
//     (Written, Epoch 0): the blocks of an unwritten extent, a pending
//     conversion or a remap (DevBlock; its old blocks are checked as
//     records, next) overlap no other extent's (see the package doc,
//     Extents);
//   - the records (the extents' persisted forms) share a device block only
//     if both say Written, as Load requires: the old blocks of a remap of
//     a pending conversion (OldUnwritten), which belong to it alone,
//     overlap no plain extent's blocks and no other remap's old blocks,
//     and the old blocks of any remap overlap no unwritten extent's or
//     pending conversion's;
//   - no two neighbours are mergeable, unless Load was given mergeable
//     records (the map keeps their boundaries; see the package doc);
//   - Blocks() is the sum of the lengths, and the pending index holds
//     exactly the extents with Epoch > 0;
//   - the flat index of a small map holds exactly the extents.
//
// It walks every extent: O(n log n), for tests and fsck. It only reads.
func (m *Map) Check() error {
	bad := func(e Extent, format string, args ...any) error {
		return &Error{Op: "check", Extent: e, Err: detail(ErrCorrupt, format, args...)}
	}
	var (
		err     error
		prev    Extent
		have    bool
		sum     uint64
		pending int
		all     = make([]Extent, 0, m.extents.Len())
	)
	m.extents.Ascend(func(e Extent) bool {
		switch {
		case !e.valid():
			err = bad(e, "empty, overflowing, of unknown state, unwritten with an epoch, or wrongly remapped")
		case have && prev.End() > e.FileBlock:
			err = bad(e, "overlaps or is out of order with %v", prev)
		case have && !m.unmerged && mergeable(prev, e):
			err = bad(e, "mergeable with %v", prev)
		case e.Epoch > 0 && !m.pendingHas(e):
			err = bad(e, "pending extent missing from the pending index")
		}
		if e.Epoch > 0 {
			pending++
		}
		sum += e.Len
		prev, have = e, true
		all = append(all, e)
		return err == nil
	})
	if err != nil {
		return err
	}
	if sum != m.blocks {
		return bad(Extent{}, "extents hold %d blocks, counter says %d", sum, m.blocks)
	}
	if pending != m.pending.Len() {
		return bad(Extent{}, "%d pending extents, pending index holds %d", pending, m.pending.Len())
	}
	if m.smallSet != (len(all) <= m.smallLimit) || m.smallSet && !slices.Equal(m.small, all) {
		return bad(Extent{}, "flat index (kept %t) out of step with the %d extents", m.smallSet, len(all))
	}
	if err := checkDevOverlap("check", all); err != nil {
		return err
	}
	for i, e := range all {
		p := e.Persisted()
		all[i] = Extent{FileBlock: p.FileBlock, DevBlock: p.DevBlock, Len: p.Len, State: p.State}
	}
	if err := checkDevOverlap("check", all); err != nil {
		e := err.(*Error)
		e.Err = fmt.Errorf("records: %w", e.Err)
		return e
	}
	return nil
}

// pendingHas reports whether the pending index holds e, End included.
func (m *Map) pendingHas(e Extent) bool {
	k, ok := m.pending.Get(pendingKey{Epoch: e.Epoch, FileBlock: e.FileBlock})
	return ok && k.End == e.End()
}
