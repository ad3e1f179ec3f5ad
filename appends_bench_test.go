package sluice

import (
	"fmt"
	"sync"
	"testing"
)

// BenchmarkAppend: goroutines appending 4 KiB records to one file, each
// through its own File, direct and buffered, under the seeds' policy
// (appends exclusive) and the concurrent one (parallel appends), on a
// memory device: the engine's own cost per append, without device latency
// (`sluice bench` A1 measures the real device). Reports CPU-independent
// allocations per append with -benchmem.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []string{"direct", "buffered"} {
		for _, pol := range []Policy{Seeds(), Concurrent()} {
			for _, n := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/appenders=%d", mode, pol, n), func(b *testing.B) {
					e := newEnv(b, envConfig{size: 1 << 30, opts: Options{Policy: &pol, CacheSizeBytes: 512 << 20}})
					flags := O_WRONLY | O_APPEND | O_CREAT
					if mode == "direct" {
						flags |= O_DIRECT
					}
					files := make([]*File, n)
					for i := range files {
						f, err := e.fs.OpenFile("/log", flags, 0o644)
						if err != nil {
							b.Fatal(err)
						}
						files[i] = f
					}
					rec := pattern(4096, 1)
					b.SetBytes(4096)
					b.ResetTimer()
					var wg sync.WaitGroup
					per := b.N / n
					for i := range n {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range per {
								if _, err := files[i].Write(rec); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
				})
			}
		}
	}
}
