package alloc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// TestCheckDetects breaks each invariant by hand and expects Check to
// notice.
func TestCheckDetects(t *testing.T) {
	// setup returns an Allocator of [0,100) with free [10,20) (allocatable)
	// and [30,40) (busy [30,35), allocatable [35,40)).
	setup := func() *Allocator {
		a, err := Load(0, 100, []Extent{{Start: 10, Len: 10}, {Start: 30, Len: 10}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Alloc(30, 5); err != nil {
			t.Fatal(err)
		}
		if err := a.Free(Extent{Start: 30, Len: 5}, 1); err != nil {
			t.Fatal(err)
		}
		if err := a.Check(); err != nil {
			t.Fatalf("setup: %v", err)
		}
		return a
	}
	for _, tc := range []struct {
		name    string
		corrupt func(a *Allocator)
	}{
		{"free extent out of bounds", func(a *Allocator) {
			a.mu.free.ReplaceOrInsert(Extent{Start: 95, Len: 10})
			a.mu.freeBlocks += 10
		}},
		{"empty free extent", func(a *Allocator) { a.mu.free.ReplaceOrInsert(Extent{Start: 50}) }},
		{"touching free extents", func(a *Allocator) {
			a.mu.free.ReplaceOrInsert(Extent{Start: 20, Len: 5})
			a.mu.freeBlocks += 5
		}},
		{"free counter", func(a *Allocator) { a.mu.freeBlocks++ }},
		{"allocatable outside free", func(a *Allocator) { a.mu.avail.ReplaceOrInsert(Extent{Start: 50, Len: 1}) }},
		{"allocatable not maximal", func(a *Allocator) {
			a.mu.avail.ReplaceOrInsert(Extent{Start: 10, Len: 5})
			a.mu.avail.ReplaceOrInsert(Extent{Start: 15, Len: 5})
		}},
		{"block neither allocatable nor busy", func(a *Allocator) {
			a.mu.avail.ReplaceOrInsert(Extent{Start: 10, Len: 9})
		}},
		{"busy and allocatable", func(a *Allocator) {
			a.mu.busy.insert(busyExtent{Extent: Extent{Start: 12, Len: 1}, seq: 1})
			a.mu.busyBlocks++
		}},
		{"busy outside free", func(a *Allocator) {
			a.mu.busy.insert(busyExtent{Extent: Extent{Start: 50, Len: 1}, seq: 1})
			a.mu.busyBlocks++
		}},
		{"busy index mismatch", func(a *Allocator) {
			a.mu.busy.bySeq.Delete(busyExtent{Extent: Extent{Start: 30, Len: 5}, seq: 1})
		}},
		{"busy counter", func(a *Allocator) { a.mu.busyBlocks++ }},
		{"over-reserved", func(a *Allocator) { a.mu.reserved = 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := setup()
			tc.corrupt(a)
			if err := a.Check(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Check = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestChangesLargeBatch exercises a journal of thousands of records in one
// Changes call, and the calls after it.
func TestChangesLargeBatch(t *testing.T) {
	a := New(0, 10000)
	m := map[BlockNum]Extent{}
	apply := func() {
		a.Changes(func(e Extent) { m[e.Start] = e }, func(s BlockNum) { delete(m, s) })
		got := slices.Collect(func(yield func(Extent) bool) {
			for _, e := range m {
				if !yield(e) {
					return
				}
			}
		})
		slices.SortFunc(got, func(x, y Extent) int { return cmp.Compare(x.Start, y.Start) })
		if want := a.FreeExtents(); !slices.Equal(got, want) {
			t.Fatalf("replay %d records, FreeExtents %d", len(got), len(want))
		}
	}
	var used []Extent
	for b := BlockNum(0); b < 10000; b += 3 {
		e, err := a.Alloc(b, 1)
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, e)
	}
	apply()
	for i, e := range used {
		if err := a.Free(e, uint64(i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			apply()
		}
	}
	apply()
	if len(m) != 1 {
		t.Fatalf("%d records after freeing everything", len(m))
	}
}

// TestConcurrent hammers one Allocator from several goroutines; run with
// -race. Each goroutine frees only what it allocated.
func TestConcurrent(t *testing.T) {
	a := New(1, 4097)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []Extent
			for i := range 2000 {
				switch {
				case i%7 == 3 && len(mine) > 0:
					if err := a.Free(mine[0], uint64(i)); err != nil {
						t.Error(err)
						return
					}
					mine = mine[1:]
				case i%11 == 0:
					a.Unbusy(uint64(i))
				case i%13 == 0:
					a.Changes(func(Extent) {}, func(BlockNum) {})
				case i%17 == 0:
					if a.Reserve(2) == nil {
						if e, err := a.AllocReserved(BlockNum(g*1000), 2); err == nil {
							mine = append(mine, e)
							if err := a.Unreserve(2 - e.Len); err != nil {
								t.Error(err)
								return
							}
						} else if err := a.Unreserve(2); err != nil {
							t.Error(err)
							return
						}
					}
				default:
					if e, err := a.Alloc(BlockNum(g*1000+i), 1+uint64(i%5)); err == nil {
						mine = append(mine, e)
					}
				}
			}
			for _, e := range mine {
				if err := a.Free(e, 1<<40); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	a.Unbusy(1 << 40)
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	if got := a.FreeExtents(); !slices.Equal(got, []Extent{{Start: 1, Len: 4096}}) {
		t.Fatalf("after freeing everything: %v", got)
	}
}

// Example shows the engine's use of an Allocator across two metadata
// batches: allocate while writing a file, free while truncating it, and
// persist the free-extent records in the same batches.
func Example() {
	a := New(1, 1025) // block 0 holds the volume header
	batch := func(seq uint64) {
		a.Changes(
			func(e Extent) { fmt.Printf("batch %d: put free record %v\n", seq, e) },
			func(s BlockNum) { fmt.Printf("batch %d: delete free record at %d\n", seq, s) })
	}
	batch(0) // mkfs

	// Batch 1: a file grows by two extents; the second is hinted to follow
	// the first.
	e1, _ := a.Alloc(100, 8)
	e2, _ := a.Alloc(e1.End(), 8)
	fmt.Println("file extents:", e1, e2)
	batch(1)

	// Batch 2: the file is truncated to nothing. Its blocks are free on
	// disk with this batch, but busy until the batch is durable.
	_ = a.Free(e1, 2)
	_ = a.Free(e2, 2)
	batch(2)
	fmt.Println(a.Stats().BusyBlocks, "blocks busy")

	// The metadata sync that covers batch 2 completes.
	a.Unbusy(2)
	fmt.Println(a.Stats().BusyBlocks, "blocks busy")
	// Output:
	// batch 0: put free record [1,1025)
	// file extents: [100,108) [108,116)
	// batch 1: put free record [1,100)
	// batch 1: put free record [116,1025)
	// batch 2: put free record [1,1025)
	// batch 2: delete free record at 116
	// 16 blocks busy
	// 0 blocks busy
}
