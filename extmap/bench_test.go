package extmap

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicefs/sluice/meta"
)

// sparseRecords returns n records of 1..8 blocks separated by gaps of
// 1..8 blocks (a sparse file after random writes), half of them unwritten.
func sparseRecords(n int) []meta.Extent {
	r := rand.New(rand.NewPCG(1, 2))
	recs := make([]meta.Extent, n)
	fb, dev := uint64(0), uint64(1000)
	for i := range recs {
		l := uint64(1 + r.IntN(8))
		fb += uint64(1 + r.IntN(8))
		state := meta.Written
		if i%2 == 1 {
			state = meta.Unwritten
		}
		recs[i] = meta.Extent{FileBlock: fb, DevBlock: dev, Len: l, State: state}
		fb += l
		dev += l + 1
	}
	return recs
}

// BenchmarkLookup looks up random ranges of n blocks in a map of 100k
// extents, and in one of 2 (which Lookup searches in its flat index),
// reusing the output slice (the read/write path's use).
func BenchmarkLookup(b *testing.B) {
	for _, size := range []int{2, 100_000} {
		m, err := Load(sparseRecords(size))
		if err != nil {
			b.Fatal(err)
		}
		end, _ := m.LastBlock()
		for _, n := range []uint64{1, 16, 256} {
			b.Run(fmt.Sprintf("extents=%d/blocks=%d", size, n), func(b *testing.B) {
				r := rand.New(rand.NewPCG(3, 4))
				out := make([]Segment, 0, 256)
				b.ReportAllocs()
				for b.Loop() {
					out = m.Lookup(r.Uint64N(end), n, out[:0])
				}
			})
		}
	}
}

// BenchmarkInsertRandom maps single blocks at random places of a sparse
// file (every other block, so nothing merges) until 100k are mapped, then
// starts over.
func BenchmarkInsertRandom(b *testing.B) {
	const slots = 100_000
	r := rand.New(rand.NewPCG(5, 6))
	perm := r.Perm(slots)
	m := New()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == slots {
			b.StopTimer()
			m, i = New(), 0
			b.StartTimer()
		}
		s := uint64(perm[i])
		if err := m.Insert(Extent{FileBlock: 2 * s, DevBlock: 3 * s, Len: 1, State: meta.Unwritten}, nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkConvertDurable converts a random unwritten extent of a 100k
// extent map at a new epoch, marks the epoch durable, and zeroes it back
// (Unconvert): the direct-write-then-fsync cycle.
func BenchmarkConvertDurable(b *testing.B) {
	recs := sparseRecords(100_000)
	m, err := Load(recs)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	var epoch uint64
	b.ReportAllocs()
	for b.Loop() {
		e := recs[2*r.IntN(len(recs)/2)+1]
		epoch++
		m.Convert(e.FileBlock, e.Len, epoch, nil)
		m.MarkDurable(epoch, nil)
		m.Unconvert(e.FileBlock, e.Len, nil)
	}
}

// BenchmarkRemapDurable remaps a random written extent of a 100k extent map
// to new device blocks at a new epoch and marks the epoch durable: the
// copy-on-write-then-fsync cycle of a reflinked file.
func BenchmarkRemapDurable(b *testing.B) {
	recs := sparseRecords(100_000)
	m, err := Load(recs)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	last := recs[len(recs)-1]
	dev := last.DevBlock + last.Len // past every device block
	var epoch uint64
	b.ReportAllocs()
	for b.Loop() {
		e := recs[2*r.IntN(len(recs)/2)]
		epoch++
		if _, err := m.Remap(e.FileBlock, e.Len, dev, epoch, nil); err != nil {
			b.Fatal(err)
		}
		m.MarkDurable(epoch, nil)
		dev += e.Len
	}
}
