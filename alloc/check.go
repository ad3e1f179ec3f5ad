package alloc

// Check verifies the Allocator's invariants (package doc, Invariants) and
// returns an error wrapping ErrCorrupt describing the first one broken. It
// walks every extent: O(n log n), for tests and fsck.
func (a *Allocator) Check() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	bad := func(e Extent, format string, args ...any) error {
		return &Error{Op: "check", Extent: e, Err: detail(ErrCorrupt, format, args...)}
	}

	// checkRuns verifies that t holds valid, disjoint, non-adjacent
	// extents, each covered by a free extent, and returns their total.
	checkRuns := func(name string, t *extentTree) (sum uint64, err error) {
		var prev Extent
		have := false
		t.Ascend(func(e Extent) bool {
			switch {
			case !e.valid(a.first, a.end):
				err = bad(e, "%s extent empty or outside [%d,%d)", name, a.first, a.end)
			case have && prev.End() >= e.Start:
				err = bad(e, "%s extent overlaps or touches %v", name, prev)
			case t != a.mu.free && !coveredBy(a.mu.free, e):
				err = bad(e, "%s extent not inside a free extent", name)
			}
			prev, have = e, true
			sum += e.Len
			return err == nil
		})
		return sum, err
	}
	freeSum, err := checkRuns("free", a.mu.free)
	if err != nil {
		return err
	}
	if freeSum != a.mu.freeBlocks {
		return bad(Extent{}, "free extents hold %d blocks, counter says %d", freeSum, a.mu.freeBlocks)
	}
	availSum, err := checkRuns("allocatable", a.mu.avail)
	if err != nil {
		return err
	}

	var busySum uint64
	var prev busyExtent
	have := false
	a.mu.busy.byStart.Ascend(func(b busyExtent) bool {
		switch {
		case !b.valid(a.first, a.end):
			err = bad(b.Extent, "busy extent empty or outside [%d,%d)", a.first, a.end)
		case have && prev.End() > b.Start:
			err = bad(b.Extent, "busy extent overlaps %v", prev)
		case !coveredBy(a.mu.free, b.Extent):
			err = bad(b.Extent, "busy extent not inside a free extent")
		case overlapsAny(a.mu.avail, b.Extent):
			err = bad(b.Extent, "busy extent overlaps an allocatable one")
		}
		if s, ok := a.mu.busy.bySeq.Get(b); err == nil && (!ok || s != b) {
			err = bad(b.Extent, "busy extent missing from the by-seq index")
		}
		prev, have = b, true
		busySum += b.Len
		return err == nil
	})
	if err != nil {
		return err
	}
	if n, m := a.mu.busy.byStart.Len(), a.mu.busy.bySeq.Len(); n != m {
		return bad(Extent{}, "busy indexes hold %d and %d extents", n, m)
	}
	if busySum != a.mu.busyBlocks {
		return bad(Extent{}, "busy extents hold %d blocks, counter says %d", busySum, a.mu.busyBlocks)
	}
	if availSum+busySum != freeSum {
		return bad(Extent{}, "allocatable %d + busy %d blocks != free %d", availSum, busySum, freeSum)
	}
	if a.mu.reserved > a.mu.freeBlocks {
		return bad(Extent{}, "%d blocks reserved but only %d free", a.mu.reserved, a.mu.freeBlocks)
	}
	return nil
}

// coveredBy reports whether one extent of t covers e.
func coveredBy(t *extentTree, e Extent) bool {
	f, ok := floor(t, e)
	return ok && f.Covers(e)
}

// overlapsAny reports whether any extent of t, whose extents are disjoint,
// overlaps e.
func overlapsAny(t *extentTree, e Extent) bool {
	f, ok := floor(t, Extent{Start: e.End() - 1})
	return ok && f.Overlaps(e)
}
