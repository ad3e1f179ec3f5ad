package alloc

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAllocFree measures one Alloc plus one Free on a large, fragmented
// device in steady state, with the engine's per-transaction Changes and an
// Unbusy every 32 transactions.
func BenchmarkAllocFree(b *testing.B) {
	const blocks = 1 << 26 // 256 GiB of 4 KiB blocks
	a := New(1, blocks)
	rng := rand.New(rand.NewPCG(1, 2))
	put, del := func(Extent) {}, func(BlockNum) {}
	// Fragment: fill about half the device with small extents.
	var live []Extent
	for a.Stats().FreeBlocks > blocks/2 {
		e, err := a.Alloc(BlockNum(rng.Uint64N(blocks)), 1+rng.Uint64N(64))
		if err != nil {
			b.Fatal(err)
		}
		live = append(live, e)
	}
	a.Changes(put, del)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		e, err := a.Alloc(BlockNum(rng.Uint64N(blocks)), 1+rng.Uint64N(64))
		if err != nil {
			b.Fatal(err)
		}
		j := rng.IntN(len(live))
		if err := a.Free(live[j], uint64(i)); err != nil {
			b.Fatal(err)
		}
		live[j] = e
		a.Changes(put, del)
		if i%32 == 31 {
			a.Unbusy(uint64(i))
		}
	}
	b.StopTimer()
	st := a.Stats()
	b.ReportMetric(float64(st.FreeExtents), "free-extents")
}

// BenchmarkAllocSequential measures a file growing one block at a time with
// the hint "block after the previous extent", and freeing its blocks, with
// the engine's per-transaction Changes and an Unbusy every 64 transactions.
func BenchmarkAllocSequential(b *testing.B) {
	a := New(1, 1<<30)
	next := BlockNum(1)
	put, del := func(Extent) {}, func(BlockNum) {}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e, err := a.Alloc(next, 1)
		if err != nil {
			b.Fatal(err)
		}
		next = e.End()
		if err := a.Free(e, uint64(i)); err != nil {
			b.Fatal(err)
		}
		a.Changes(put, del)
		if i%64 == 63 {
			a.Unbusy(uint64(i))
		}
	}
}
