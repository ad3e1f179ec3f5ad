package sluice

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// BenchmarkAtomicWrite measures untorn writes on a real volume
// (SLUICE_BENCH=1): 16 KiB O_DIRECT writes at random 16 KiB slots of a
// 64 MiB file written and synced first, from 32 goroutines (QD32), every
// slot once per iteration, reporting writes/s, side by side:
//
//   - plain: pwrite, tearable by a crash;
//
//   - atomic: RWFAtomic, out of place (the first iteration over durable
//     blocks, the later ones over the remaps the earlier left pending);
//
//   - doublewrite: what a database does instead (InnoDB's doublewrite
//     buffer, PostgreSQL's full_page_writes): the page to a scratch file
//     of the writer's own, fdatasync, then in place.
//
//     SLUICE_BENCH=1 go test -run '^$' -bench AtomicWrite -benchtime 3x .
func BenchmarkAtomicWrite(b *testing.B) {
	fs, done := benchVolumeNamed(b, Concurrent(), "atomic")
	defer done()
	const size, n, g = 64 << 20, 16 << 10, 32
	f, err := fs.OpenFile("/aw", O_RDWR|O_CREAT|O_TRUNC|O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := pattern(1<<20, 3)
	for off := int64(0); off < size; off += 1 << 20 {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Fsync(); err != nil {
		b.Fatal(err)
	}
	scratch := make([]*File, g)
	for w := range scratch {
		if scratch[w], err = fs.OpenFile("/dw"+string(rune('a'+w)), O_RDWR|O_CREAT|O_TRUNC|O_DIRECT, 0o644); err != nil {
			b.Fatal(err)
		}
		defer scratch[w].Close()
		if _, err := scratch[w].WriteAt(pattern(n, 4), 0); err != nil {
			b.Fatal(err)
		}
		if err := scratch[w].Fsync(); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"plain", "atomic", "doublewrite"} {
		b.Run(mode, func(b *testing.B) {
			var total time.Duration
			for i := range b.N {
				perm := rand.New(rand.NewPCG(uint64(i), 2)).Perm(size / n)
				var wg sync.WaitGroup
				t0 := time.Now()
				for w := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := pattern(n, byte(w))
						for j := w; j < len(perm); j += g {
							off := int64(perm[j]) * n
							var err error
							switch mode {
							case "plain":
								_, err = f.Pwrite(p, off, 0)
							case "atomic":
								_, err = f.Pwrite(p, off, RWFAtomic)
							case "doublewrite":
								if _, err = scratch[w].Pwrite(p, 0, 0); err == nil {
									if err = scratch[w].Fdatasync(); err == nil {
										_, err = f.Pwrite(p, off, 0)
									}
								}
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				total += time.Since(t0)
			}
			b.ReportMetric(float64(b.N)*size/n/total.Seconds(), "writes/s")
			if err := fs.SyncAll(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
