package alloc

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
)

// TestLoadRoundTrip fragments an Allocator, persists it (FreeExtents, and
// separately the Changes journal replayed into a map), and Loads both forms
// back, in shuffled order.
func TestLoadRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		a := New(1, 1+BlockNum(1+rng.IntN(5000)))
		persisted := map[BlockNum]Extent{}
		a.Changes(func(e Extent) { persisted[e.Start] = e }, func(s BlockNum) { delete(persisted, s) })
		var used []Extent
		for i := range 2000 {
			if rng.IntN(3) != 0 || len(used) == 0 {
				if e, err := a.Alloc(BlockNum(rng.IntN(6000)), 1+rng.Uint64N(20)); err == nil {
					used = append(used, e)
				}
			} else {
				j := rng.IntN(len(used))
				if err := a.Free(used[j], uint64(i)); err != nil {
					t.Fatalf("seed %d: free: %v", seed, err)
				}
				used = slices.Delete(used, j, j+1)
			}
		}
		a.Changes(func(e Extent) { persisted[e.Start] = e }, func(s BlockNum) { delete(persisted, s) })

		first, end := a.Bounds()
		want := a.FreeExtents()
		recs := slices.Clone(want)
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		var fromJournal []Extent
		for _, e := range persisted {
			fromJournal = append(fromJournal, e)
		}
		for _, in := range [][]Extent{recs, fromJournal} {
			b, err := Load(first, end, in)
			if err != nil {
				t.Fatalf("seed %d: load: %v", seed, err)
			}
			if err := b.Check(); err != nil {
				t.Fatalf("seed %d: check after load: %v", seed, err)
			}
			if got := b.FreeExtents(); !slices.Equal(got, want) {
				t.Fatalf("seed %d: loaded %v, want %v", seed, got, want)
			}
			st, wst := b.Stats(), a.Stats()
			if st.FreeBlocks != wst.FreeBlocks || st.AllocatableBlocks != wst.FreeBlocks || st.BusyBlocks != 0 {
				t.Fatalf("seed %d: loaded stats %v, original %v", seed, st, wst)
			}
			// Records already coalesced: nothing to rewrite.
			b.Changes(func(e Extent) { t.Fatalf("seed %d: put %v after load", seed, e) },
				func(s BlockNum) { t.Fatalf("seed %d: del %d after load", seed, s) })
		}
	}
}

// TestLoadRejects checks that every kind of bad record is an error, never a
// panic, and names ErrCorrupt or ErrInvalid.
func TestLoadRejects(t *testing.T) {
	const max = BlockNum(math.MaxUint64)
	for _, tc := range []struct {
		name       string
		first, end BlockNum
		recs       []Extent
		want       error
	}{
		{"empty record", 1, 100, []Extent{{Start: 5}}, ErrCorrupt},
		{"before first", 1, 100, []Extent{{Start: 0, Len: 2}}, ErrCorrupt},
		{"past end", 1, 100, []Extent{{Start: 99, Len: 2}}, ErrCorrupt},
		{"start past end", 1, 100, []Extent{{Start: 200, Len: 1}}, ErrCorrupt},
		{"wraps", 1, max, []Extent{{Start: max - 1, Len: 5}}, ErrCorrupt},
		{"overlap", 1, 100, []Extent{{Start: 10, Len: 10}, {Start: 15, Len: 10}}, ErrCorrupt},
		{"overlap unsorted", 1, 100, []Extent{{Start: 50, Len: 1}, {Start: 15, Len: 10}, {Start: 10, Len: 6}}, ErrCorrupt},
		{"duplicate", 1, 100, []Extent{{Start: 10, Len: 1}, {Start: 10, Len: 1}}, ErrCorrupt},
		{"contained", 1, 100, []Extent{{Start: 10, Len: 10}, {Start: 12, Len: 1}}, ErrCorrupt},
		{"empty device", 5, 5, []Extent{{Start: 5, Len: 1}}, ErrCorrupt},
		{"first after end", 6, 5, nil, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Load(tc.first, tc.end, tc.recs)
			if !errors.Is(err, tc.want) || a != nil {
				t.Fatalf("Load = %v, %v; want nil, %v", a, err, tc.want)
			}
			var ae *Error
			if !errors.As(err, &ae) || ae.Op != "load" {
				t.Fatalf("error %#v is not a load *Error", err)
			}
			if errors.Is(tc.want, ErrCorrupt) && !errors.Is(err, syscall.EUCLEAN) {
				t.Fatalf("error %v does not wrap EUCLEAN", err)
			}
		})
	}
}

// TestLoadDoesNotRetain checks that Load copies its argument.
func TestLoadDoesNotRetain(t *testing.T) {
	recs := []Extent{{Start: 20, Len: 5}, {Start: 10, Len: 5}}
	a, err := Load(0, 100, recs)
	if err != nil {
		t.Fatal(err)
	}
	recs[0].Len = 50
	if got, want := a.FreeExtents(), []Extent{{Start: 10, Len: 5}, {Start: 20, Len: 5}}; !slices.Equal(got, want) {
		t.Fatalf("FreeExtents %v, want %v", got, want)
	}
}

func TestNewPanicsOnBadBounds(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(2, 1) did not panic")
		}
	}()
	New(2, 1)
}

func TestExtent(t *testing.T) {
	e := Extent{Start: 10, Len: 5}
	if e.End() != 15 || e.String() != "[10,15)" {
		t.Fatalf("End %d String %q", e.End(), e)
	}
	for b, want := range map[BlockNum]bool{9: false, 10: true, 14: true, 15: false} {
		if e.Contains(b) != want {
			t.Errorf("%v.Contains(%d) = %v", e, b, !want)
		}
	}
	for _, tc := range []struct {
		o               Extent
		overlaps, cover bool
	}{
		{Extent{Start: 5, Len: 5}, false, false},
		{Extent{Start: 5, Len: 6}, true, false},
		{Extent{Start: 10, Len: 5}, true, true},
		{Extent{Start: 11, Len: 2}, true, true},
		{Extent{Start: 14, Len: 2}, true, false},
		{Extent{Start: 15, Len: 1}, false, false},
		{Extent{Start: 12, Len: 0}, false, true},
	} {
		if got := e.Overlaps(tc.o); got != tc.overlaps {
			t.Errorf("%v.Overlaps(%v) = %v", e, tc.o, got)
		}
		if got := tc.o.Overlaps(e); got != tc.overlaps {
			t.Errorf("%v.Overlaps(%v) = %v", tc.o, e, got)
		}
		if got := e.Covers(tc.o); got != tc.cover {
			t.Errorf("%v.Covers(%v) = %v", e, tc.o, got)
		}
	}
}
