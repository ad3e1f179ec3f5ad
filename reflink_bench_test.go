package sluice

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// BenchmarkReflink measures, on a real volume (SLUICE_BENCH=1, as the
// other volume benchmarks): a clone of a 1 GiB file (clone-1GiB, per
// clone), and the first 4 KiB O_DIRECT overwrite of every block of a
// 64 MiB file from 32 goroutines (QD32), when the file's blocks are shared
// with a clone (overwrite/reflinked: every write goes out of place) and
// when they are not (overwrite/unshared), side by side, reporting writes/s.
// The reflink bookkeeping's cost with nothing shared is W1/W2's
// (BenchmarkDirectIO) on a volume that never cloned.
//
//	SLUICE_BENCH=1 go test -run '^$' -bench Reflink -benchtime 5x .
func BenchmarkReflink(b *testing.B) {
	fs, done := benchVolumeNamed(b, Concurrent(), "reflink")
	defer done()
	src, err := fs.OpenFile("/data", O_RDONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	b.Run("clone-1GiB", func(b *testing.B) {
		for i := range b.N {
			name := fmt.Sprintf("/clone%d", i)
			f, err := fs.OpenFile(name, O_RDWR|O_CREAT|O_TRUNC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if err := f.Clone(src); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds()), "us/clone")
			f.Close()
			if err := fs.Unlink(name); err != nil {
				b.Fatal(err)
			}
		}
	})
	const size = 64 << 20
	for _, shared := range []bool{true, false} {
		name := "unshared"
		if shared {
			name = "reflinked"
		}
		b.Run("overwrite/"+name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				f, err := fs.OpenFile("/ow", O_RDWR|O_CREAT|O_TRUNC|O_DIRECT, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				buf := pattern(1<<20, 3)
				for off := int64(0); off < size; off += 1 << 20 {
					if _, err := f.WriteAt(buf, off); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Fsync(); err != nil {
					b.Fatal(err)
				}
				var c *File
				if shared {
					if c, err = fs.OpenFile("/ow-clone", O_RDWR|O_CREAT|O_TRUNC, 0o644); err != nil {
						b.Fatal(err)
					}
					if err := c.Clone(f); err != nil {
						b.Fatal(err)
					}
				}
				perm := rand.New(rand.NewPCG(1, 2)).Perm(size / 4096)
				const g = 32
				var wg sync.WaitGroup
				t0 := time.Now()
				for w := range g {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p := pattern(4096, byte(w))
						for i := w; i < len(perm); i += g {
							if _, err := f.WriteAt(p, int64(perm[i])*4096); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				total += time.Since(t0)
				if c != nil {
					c.Close()
					if err := fs.Unlink("/ow-clone"); err != nil {
						b.Fatal(err)
					}
				}
				f.Close()
				if err := fs.SyncAll(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*size/4096/total.Seconds(), "writes/s")
		})
	}
}
