package pagecache

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkColdRead is a cold random buffered read's page-cache work, as
// W4 does it: a lookup that misses, GetOrCreate of the page, marking it
// uptodate, unlocking and releasing it, and the reader's lookup of the
// now cached page, on a 256 MiB cache (65536 pages) of one file 4 times
// larger, so that most lookups miss and, once full, each new page evicts
// the oldest.
func BenchmarkColdRead(b *testing.B) {
	const pages = 65536
	c := New(Options{CapacityBytes: pages * 4096, PageSize: 4096})
	m := c.NewMapping("file")
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		idx := r.Uint64N(4 * pages)
		p := m.Get(idx)
		if p == nil {
			var created bool
			var err error
			if p, created, err = m.GetOrCreate(idx, false); err != nil {
				b.Fatal(err)
			}
			if created {
				p.SetUptodate()
				p.Unlock()
			}
			m.Release(p)
			p = m.Get(idx)
		}
		m.Release(p)
	}
}
