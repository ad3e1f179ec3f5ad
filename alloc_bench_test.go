package sluice

import "testing"

// BenchmarkDirectRead4KMem measures the engine's per-read overhead on a
// memory device: CPU and allocations per 4 KiB O_DIRECT read.
func BenchmarkDirectRead4KMem(b *testing.B) {
	e := newEnv(b, envConfig{})
	f, _ := e.prewrite("/f", 1<<20, 1)
	buf := pattern(4096, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := f.ReadAt(buf, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirectWrite4KMem measures a 4 KiB O_DIRECT overwrite.
func BenchmarkDirectWrite4KMem(b *testing.B) {
	e := newEnv(b, envConfig{})
	f, _ := e.prewrite("/f", 1<<20, 1)
	buf := pattern(4096, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := f.WriteAt(buf, int64(i%256)*4096); err != nil {
			b.Fatal(err)
		}
	}
}
