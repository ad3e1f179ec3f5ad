package alloc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// This file holds the model the random test and the fuzz target check the
// Allocator against: a bitmap with one state per block, a reservation
// counter, and the list of extents handed out.

type blockState uint8

const (
	stUsed blockState = iota
	stAvail
	stBusy
)

// model is the trivial reference allocator.
type model struct {
	first, end BlockNum
	state      []blockState // indexed by block - first
	seq        []uint64     // seq of each busy block
	reserved   uint64
}

func (m *model) total() uint64 { return uint64(m.end - m.first) }

func (m *model) at(b BlockNum) blockState { return m.state[b-m.first] }

func (m *model) count(s blockState) (n uint64) {
	for _, x := range m.state {
		if x == s {
			n++
		}
	}
	return n
}

func (m *model) freeBlocks() uint64 { return m.count(stAvail) + m.count(stBusy) }

// runs returns the maximal runs of blocks for which in is true.
func (m *model) runs(in func(blockState) bool) []Extent {
	var out []Extent
	for i, s := range m.state {
		if !in(s) {
			continue
		}
		b := m.first + BlockNum(i)
		if n := len(out); n > 0 && out[n-1].End() == b {
			out[n-1].Len++
		} else {
			out = append(out, Extent{Start: b, Len: 1})
		}
	}
	return out
}

// runFrom returns how many blocks from b on are allocatable.
func (m *model) runFrom(b BlockNum) uint64 {
	var n uint64
	for ; b < m.end && m.at(b) == stAvail; b++ {
		n++
	}
	return n
}

// harness drives an Allocator and the model with the same operations and
// checks them against each other after every step.
type harness struct {
	t     testing.TB
	label string // printed with every failure: how to replay
	a     *Allocator
	m     model
	// used lists the extents handed out and not freed.
	used []Extent
	// persisted is the journal replayed into a map, as the engine would.
	persisted map[BlockNum]Extent
	seq       uint64 // the current metadata batch
	steps     int
	log       []string // recent operations, for failure reports
}

func newHarness(t testing.TB, label string, first, end BlockNum) *harness {
	h := &harness{
		t:         t,
		label:     label,
		a:         New(first, end),
		m:         model{first: first, end: end, state: make([]blockState, end-first), seq: make([]uint64, end-first)},
		persisted: make(map[BlockNum]Extent),
		seq:       1,
	}
	for i := range h.m.state {
		h.m.state[i] = stAvail
	}
	h.changes()
	h.verify()
	return h
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s, step %d: %s\nrecent operations:\n  %s", h.label, h.steps, fmt.Sprintf(format, args...),
		strings.Join(h.log, "\n  "))
}

func (h *harness) logf(format string, args ...any) {
	if len(h.log) == 20 {
		h.log = h.log[1:]
	}
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

// expectErr checks that err is nil if want is nil, and otherwise wraps want.
func (h *harness) expectErr(op string, err, want error) {
	h.t.Helper()
	switch {
	case want == nil && err != nil:
		h.fatalf("%s: unexpected error %v", op, err)
	case want != nil && !errors.Is(err, want):
		h.fatalf("%s: got error %v, want %v", op, err, want)
	}
	if err != nil {
		var ae *Error
		if !errors.As(err, &ae) {
			h.fatalf("%s: error %v is not an *Error", op, err)
		}
		if (errors.Is(want, ErrNoSpace) || errors.Is(want, ErrBusy)) && !errors.Is(err, syscall.ENOSPC) {
			h.fatalf("%s: error %v does not wrap ENOSPC", op, err)
		}
	}
}

// step performs one operation chosen by op, with arguments derived from x,
// y and z (any values: they are reduced to sensible ranges here).
func (h *harness) step(op byte, x, y, z uint64) {
	h.t.Helper()
	h.steps++
	m := &h.m
	total := m.total()
	switch op % 12 {
	case 0, 1, 2: // alloc, hint anywhere including outside the device
		hint := BlockNum(x % (uint64(m.end) + 3))
		want := y % (total + 3)
		if op%12 == 2 {
			want = 1 + y%4 // small requests fragment the device
		}
		h.alloc(hint, want, false)
	case 3: // alloc-reserved
		hint := BlockNum(x % (uint64(m.end) + 3))
		want := y % 3 // 0 is invalid
		if m.reserved > 0 && z%4 != 0 {
			want = 1 + y%m.reserved
		} else if z%4 == 0 {
			want = m.reserved + y%3 // too much, unless 0 reserved and y%3 == 0
		}
		h.alloc(hint, want, true)
	case 4, 5, 6: // free or cancel part of a used extent
		if len(h.used) == 0 {
			return
		}
		i := int(x % uint64(len(h.used)))
		u := h.used[i]
		off := y % u.Len
		e := Extent{Start: u.Start + BlockNum(off), Len: 1 + z%(u.Len-off)}
		seq := h.seq + (z>>8)%2
		h.free(e, seq, op%12 == 6)
	case 7: // bad free: only when it must fail
		e := Extent{Start: BlockNum(x % (uint64(m.end) + 2)), Len: y % 4}
		var want error
		switch {
		case !e.valid(m.first, m.end):
			want = ErrInvalid
		default:
			for b := e.Start; b < e.End(); b++ {
				if m.at(b) != stUsed {
					want = ErrDoubleFree
				}
			}
		}
		if want == nil {
			return
		}
		before := h.a.FreeExtents()
		err := h.a.Free(e, h.seq)
		h.logf("free %v seq %d -> %v", e, h.seq, err)
		h.expectErr("bad free", err, want)
		if after := h.a.FreeExtents(); !slices.Equal(before, after) {
			h.fatalf("failed free changed the free extents: %v -> %v", before, after)
		}
	case 8: // a metadata sync completes: unbusy, perhaps lagging one batch
		s := h.seq - x%2
		h.a.Unbusy(s)
		h.logf("unbusy %d", s)
		for i := range m.state {
			if m.state[i] == stBusy && m.seq[i] <= s {
				m.state[i] = stAvail
			}
		}
		h.seq++
	case 9:
		n := x % (total + 2)
		err := h.a.Reserve(n)
		h.logf("reserve %d -> %v", n, err)
		var want error
		if n > m.freeBlocks()-m.reserved {
			want = ErrNoSpace
		} else {
			m.reserved += n
		}
		h.expectErr("reserve", err, want)
	case 10:
		n := x % (m.reserved + 2)
		err := h.a.Unreserve(n)
		h.logf("unreserve %d -> %v", n, err)
		var want error
		if n > m.reserved {
			want = ErrInvalid
		} else {
			m.reserved -= n
		}
		h.expectErr("unreserve", err, want)
	case 11:
		h.changes()
	}
	h.verify()
}

func (h *harness) alloc(hint BlockNum, want uint64, reserved bool) {
	h.t.Helper()
	m := &h.m
	var (
		e   Extent
		err error
	)
	if reserved {
		e, err = h.a.AllocReserved(hint, want)
	} else {
		e, err = h.a.Alloc(hint, want)
	}
	h.logf("alloc hint %d want %d reserved %v -> %v %v", hint, want, reserved, e, err)

	// What the model says must happen.
	var wantErr error
	n := want // the most that may be returned
	if reserved {
		switch {
		case want == 0 || want > m.reserved:
			wantErr = ErrInvalid
		case m.count(stAvail) == 0:
			wantErr = ErrBusy
		}
	} else {
		n = min(want, m.freeBlocks()-m.reserved)
		switch {
		case want == 0:
			wantErr = ErrInvalid
		case n == 0:
			wantErr = ErrNoSpace
		case m.count(stAvail) == 0:
			wantErr = ErrBusy
		}
	}
	h.expectErr("alloc", err, wantErr)
	if err != nil {
		return
	}

	if e.Len == 0 || e.Len > n {
		h.fatalf("alloc returned %v, want 1..%d blocks", e, n)
	}
	if !e.valid(m.first, m.end) {
		h.fatalf("alloc returned %v outside the device", e)
	}
	for b := e.Start; b < e.End(); b++ {
		switch m.at(b) {
		case stUsed:
			h.fatalf("alloc returned %v: block %d is already used", e, b)
		case stBusy:
			h.fatalf("alloc returned %v: block %d is busy (seq %d)", e, b, m.seq[b-m.first])
		}
	}
	// Placement: exactly at the hint if it is allocatable, else at the
	// start of an allocatable run; always as long as the run allows.
	h0 := hint
	if h0 < m.first || h0 >= m.end {
		h0 = m.first
	}
	if m.at(h0) == stAvail && e.Start != h0 {
		h.fatalf("alloc returned %v, but hint %d is allocatable", e, h0)
	}
	if e.Start != h0 && e.Start > m.first && m.at(e.Start-1) == stAvail {
		h.fatalf("alloc returned %v, which starts inside an allocatable run", e)
	}
	if run := m.runFrom(e.Start); e.Len != min(n, run) {
		h.fatalf("alloc returned %v: %d allocatable blocks there, %d allowed", e, run, n)
	}

	for b := e.Start; b < e.End(); b++ {
		m.state[b-m.first] = stUsed
	}
	if reserved {
		m.reserved -= e.Len
	}
	h.used = append(h.used, e)
}

// free frees e, part of a used extent, with Free or Cancel.
func (h *harness) free(e Extent, seq uint64, cancel bool) {
	h.t.Helper()
	m := &h.m
	var err error
	if cancel {
		err = h.a.Cancel(e)
		h.logf("cancel %v -> %v", e, err)
	} else {
		err = h.a.Free(e, seq)
		h.logf("free %v seq %d -> %v", e, seq, err)
	}
	h.expectErr("free", err, nil)
	for b := e.Start; b < e.End(); b++ {
		if cancel {
			m.state[b-m.first] = stAvail
		} else {
			m.state[b-m.first] = stBusy
			m.seq[b-m.first] = seq
		}
	}
	// Replace the used extent by what is left of it.
	for i, u := range h.used {
		if u.Covers(e) {
			before, after := split(u, e)
			h.used = slices.Delete(h.used, i, i+1)
			for _, r := range []Extent{before, after} {
				if r.Len > 0 {
					h.used = append(h.used, r)
				}
			}
			return
		}
	}
	h.fatalf("freed %v is not part of a used extent", e)
}

// changes applies the journal to h.persisted and checks it reproduces
// FreeExtents, and that it reports only real changes.
func (h *harness) changes() {
	h.t.Helper()
	var puts, dels int
	h.a.Changes(func(e Extent) {
		puts++
		if old, ok := h.persisted[e.Start]; ok && old == e {
			h.fatalf("changes: redundant put %v", e)
		}
		h.persisted[e.Start] = e
	}, func(start BlockNum) {
		dels++
		if _, ok := h.persisted[start]; !ok {
			h.fatalf("changes: del %d of a record that does not exist", start)
		}
		delete(h.persisted, start)
	})
	h.logf("changes: %d puts %d dels", puts, dels)
	got := make([]Extent, 0, len(h.persisted))
	for _, e := range h.persisted {
		got = append(got, e)
	}
	slices.SortFunc(got, func(x, y Extent) int { return cmp.Compare(x.Start, y.Start) })
	if want := h.a.FreeExtents(); !slices.Equal(got, want) {
		h.fatalf("journal replay gives %v, FreeExtents %v", got, want)
	}
	// A second call reports nothing.
	h.a.Changes(func(e Extent) { h.fatalf("changes: put %v twice", e) },
		func(s BlockNum) { h.fatalf("changes: del %d twice", s) })
}

// verify compares the Allocator with the model.
func (h *harness) verify() {
	h.t.Helper()
	m := &h.m
	if err := h.a.Check(); err != nil {
		h.fatalf("check: %v", err)
	}
	free := m.runs(func(s blockState) bool { return s != stUsed })
	if got := h.a.FreeExtents(); !slices.Equal(got, free) {
		h.fatalf("free extents %v, model %v", got, free)
	}
	var avail []Extent
	h.a.mu.avail.Ascend(func(e Extent) bool { avail = append(avail, e); return true })
	if want := m.runs(func(s blockState) bool { return s == stAvail }); !slices.Equal(avail, want) {
		h.fatalf("allocatable extents %v, model %v", avail, want)
	}
	h.a.mu.busy.byStart.Ascend(func(b busyExtent) bool {
		for x := b.Start; x < b.End(); x++ {
			if m.at(x) != stBusy || m.seq[x-m.first] != b.seq {
				h.fatalf("busy extent %v: model block %d state %d seq %d", b, x, m.at(x), m.seq[x-m.first])
			}
		}
		return true
	})
	var used uint64
	for _, u := range h.used {
		used += u.Len
	}
	st := h.a.Stats()
	want := Stats{
		TotalBlocks:        m.total(),
		FreeBlocks:         m.freeBlocks(),
		BusyBlocks:         m.count(stBusy),
		AllocatableBlocks:  m.count(stAvail),
		ReservedBlocks:     m.reserved,
		AvailableBlocks:    m.freeBlocks() - m.reserved,
		FreeExtents:        len(free),
		AllocatableExtents: len(avail),
		BusyExtents:        h.a.mu.busy.byStart.Len(),
	}
	if st != want {
		h.fatalf("stats\n  %v\nmodel\n  %v", st, want)
	}
	if used+st.FreeBlocks != st.TotalBlocks {
		h.fatalf("used %d + free %d != total %d", used, st.FreeBlocks, st.TotalBlocks)
	}
}

// drain frees every used extent, releases all busy extents and
// reservations, and checks the device is one free extent again.
func (h *harness) drain() {
	h.t.Helper()
	for len(h.used) > 0 {
		h.free(h.used[len(h.used)-1], h.seq, false)
	}
	h.a.Unbusy(h.seq + 1) // step frees with seq h.seq or h.seq+1
	for i := range h.m.state {
		h.m.state[i] = stAvail
	}
	if err := h.a.Unreserve(h.m.reserved); err != nil {
		h.fatalf("unreserve: %v", err)
	}
	h.m.reserved = 0
	h.changes()
	h.verify()
	want := []Extent{{Start: h.m.first, Len: h.m.total()}}
	if h.m.total() == 0 {
		want = []Extent{}
	}
	if got := h.a.FreeExtents(); !slices.Equal(got, want) {
		h.fatalf("after freeing everything: %v, want %v", got, want)
	}
	if got := h.a.Stats().AllocatableExtents; got != len(want) {
		h.fatalf("after freeing everything: %d allocatable extents", got)
	}
}
