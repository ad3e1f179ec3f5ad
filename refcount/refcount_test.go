package refcount

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// mirror replays a Recorder's calls into record maps.
type mirror struct {
	shared map[uint64]Run
	staged map[uint64]Range
}

func (m *mirror) PutShared(r Run)           { m.shared[r.Start] = r }
func (m *mirror) DeleteShared(start uint64) { delete(m.shared, start) }
func (m *mirror) PutStaged(r Range)         { m.staged[r.Start] = r }
func (m *mirror) DeleteStaged(start uint64) { delete(m.staged, start) }

// TestModel runs random operations against a Table and a per-block model,
// and after each checks the table's answers, its records (the mirror) and
// that a Table loaded from the records equals it.
func TestModel(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 7))
		const blocks = 64
		refs := make([]uint32, blocks) // 0: no extent maps it (free or staged)
		staged := make([]bool, blocks)
		released := make([]uint64, blocks) // transaction that released it; 0 none
		tab := New()
		mir := &mirror{map[uint64]Run{}, map[uint64]Range{}}
		var seq uint64
		for step := range 300 {
			seq++
			lo := uint64(r.IntN(blocks))
			n := uint64(1 + r.IntN(blocks-int(lo)))
			rg := Range{lo, n}
			switch op := r.IntN(6); op {
			case 0: // share blocks that extents map and that are not staged
				ok := true
				for b := lo; b < lo+n; b++ {
					ok = ok && refs[b] > 0 && !staged[b]
				}
				if !ok {
					continue
				}
				tab.Share(rg, mir)
				for b := lo; b < lo+n; b++ {
					refs[b]++
					released[b] = 0
				}
			case 1: // drop
				ok := true
				for b := lo; b < lo+n; b++ {
					ok = ok && refs[b] > 0 && !staged[b]
				}
				if !ok {
					continue
				}
				freed := tab.Drop(rg, seq, mir)
				var want []Range
				for b := lo; b < lo+n; b++ {
					refs[b]--
					switch refs[b] {
					case 0:
						want = appendRange(want, Range{b, 1})
						released[b] = 0
					case 1:
						released[b] = seq
					}
				}
				if !slices.Equal(freed, want) {
					t.Fatalf("seed %d step %d: Drop(%v) freed %v, want %v", seed, step, rg, freed, want)
				}
			case 2: // map fresh blocks (an extent takes free blocks)
				ok := true
				for b := lo; b < lo+n; b++ {
					ok = ok && refs[b] == 0 && !staged[b]
				}
				if !ok {
					continue
				}
				for b := lo; b < lo+n; b++ {
					refs[b] = 1
				}
			case 3: // stage free blocks
				ok := true
				for b := lo; b < lo+n; b++ {
					ok = ok && refs[b] == 0 && !staged[b]
				}
				if !ok {
					continue
				}
				tab.Stage(rg, mir)
				for b := lo; b < lo+n; b++ {
					staged[b] = true
				}
			case 4: // unstage (the file's record now maps them, or freed)
				tab.Unstage(rg, mir)
				for b := lo; b < lo+n; b++ {
					if staged[b] {
						staged[b] = false
						refs[b] = uint32(r.IntN(2))
					}
				}
			case 5:
				upTo := seq - uint64(r.IntN(5))
				tab.Unrelease(upTo)
				for b := range released {
					if released[b] != 0 && released[b] <= upTo {
						released[b] = 0
					}
				}
			}
			// Answers.
			var wantRuns []Run
			var wantStaged []Range
			var st Stats
			anyShared := false
			for b := uint64(0); b < blocks; b++ {
				if refs[b] >= 2 {
					st.SharedBlocks++
					st.SavedBlocks += uint64(refs[b] - 1)
					if k := len(wantRuns); k > 0 && wantRuns[k-1].End() == b && wantRuns[k-1].Refs == refs[b] {
						wantRuns[k-1].Len++
					} else {
						wantRuns = append(wantRuns, Run{b, 1, refs[b]})
					}
				}
				if staged[b] {
					st.StagedBlocks++
					wantStaged = appendRange(wantStaged, Range{b, 1})
				}
				if released[b] != 0 {
					st.ReleasedBlocks++
				}
				sh := refs[b] >= 2 || released[b] != 0
				anyShared = anyShared || sh
				if got := tab.Shared(Range{b, 1}); got != sh {
					t.Fatalf("seed %d step %d: Shared(%d) = %v, want %v (refs %d, released %d)", seed, step, b, got, sh, refs[b], released[b])
				}
			}
			if got := tab.Runs(); !slices.Equal(got, wantRuns) {
				t.Fatalf("seed %d step %d: Runs %v, want %v", seed, step, got, wantRuns)
			}
			if got := tab.StagedRanges(); !slices.Equal(got, wantStaged) {
				t.Fatalf("seed %d step %d: staged %v, want %v", seed, step, got, wantStaged)
			}
			if got := tab.Stats(); got != st {
				t.Fatalf("seed %d step %d: Stats %+v, want %+v", seed, step, got, st)
			}
			if tab.Any() != anyShared {
				t.Fatalf("seed %d step %d: Any %v, want %v", seed, step, tab.Any(), anyShared)
			}
			// Records.
			recRuns := slices.SortedFunc(maps.Values(mir.shared), func(a, b Run) int { return int(a.Start) - int(b.Start) })
			if !slices.Equal(recRuns, wantRuns) {
				t.Fatalf("seed %d step %d: shared records %v, want %v", seed, step, recRuns, wantRuns)
			}
			recStaged := slices.SortedFunc(maps.Values(mir.staged), func(a, b Range) int { return int(a.Start) - int(b.Start) })
			if !slices.Equal(recStaged, wantStaged) {
				t.Fatalf("seed %d step %d: staged records %v, want %v", seed, step, recStaged, wantStaged)
			}
			// SharedRanges and SplitStaged over a random range.
			q := Range{lo, n}
			var wantSh, wantSt, wantRest []Range
			for b := lo; b < lo+n; b++ {
				if refs[b] >= 2 || released[b] != 0 {
					wantSh = appendRange(wantSh, Range{b, 1})
				}
				if staged[b] {
					wantSt = appendRange(wantSt, Range{b, 1})
				} else {
					wantRest = appendRange(wantRest, Range{b, 1})
				}
			}
			if got := tab.SharedRanges(q, nil); !slices.Equal(got, wantSh) {
				t.Fatalf("seed %d step %d: SharedRanges(%v) %v, want %v", seed, step, q, got, wantSh)
			}
			gs, gr := tab.SplitStaged(q, nil, nil)
			if !slices.Equal(gs, wantSt) || !slices.Equal(gr, wantRest) {
				t.Fatalf("seed %d step %d: SplitStaged(%v) %v %v, want %v %v", seed, step, q, gs, gr, wantSt, wantRest)
			}
		}
		// A reload from the records has the same runs.
		re, err := Load(slices.Collect(maps.Values(mir.shared)), slices.Collect(maps.Values(mir.staged)))
		if err != nil {
			t.Fatalf("seed %d: Load: %v", seed, err)
		}
		if !slices.Equal(re.Runs(), tab.Runs()) || !slices.Equal(re.StagedRanges(), tab.StagedRanges()) {
			t.Fatalf("seed %d: reloaded table differs", seed)
		}
	}
}

func TestLoadRefusesCorrupt(t *testing.T) {
	for _, c := range []struct {
		shared []Run
		staged []Range
	}{
		{shared: []Run{{Start: 1, Len: 0, Refs: 2}}},
		{shared: []Run{{Start: 1, Len: 2, Refs: 1}}},
		{shared: []Run{{Start: 1, Len: 4, Refs: 2}, {Start: 3, Len: 4, Refs: 3}}},
		{shared: []Run{{Start: ^uint64(0), Len: 4, Refs: 2}}},
		{staged: []Range{{1, 4}, {2, 1}}},
		{shared: []Run{{Start: 1, Len: 4, Refs: 2}}, staged: []Range{{4, 4}}},
	} {
		if _, err := Load(c.shared, c.staged); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Load(%v, %v) = %v, want ErrCorrupt", c.shared, c.staged, err)
		}
	}
}

// TestEmptyTableIsFree: with nothing shared, Shared is one atomic load and
// allocates nothing (the write paths ask it on every write to a file
// that may share).
func TestEmptyTableIsFree(t *testing.T) {
	tab := New()
	if n := testing.AllocsPerRun(100, func() { _ = tab.Shared(Range{1, 8}) }); n != 0 {
		t.Fatalf("Shared allocates %v times", n)
	}
}
