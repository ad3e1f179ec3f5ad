package lockrank

import (
	"sync"
	"testing"
)

// BenchmarkMutex compares a ranked mutex's Lock/Unlock with sync.Mutex's:
// equal without checks; with -race or -tags invariants, the price of the
// check (about 1.4 us against 0.2 us under -race on a 2-vCPU VM).
func BenchmarkMutex(b *testing.B) {
	b.Run("ranked", func(b *testing.B) {
		var m Mutex[InodeMu]
		for b.Loop() {
			m.Lock()
			//lint:ignore SA2001 the benchmark measures the lock itself
			m.Unlock()
		}
	})
	b.Run("sync", func(b *testing.B) {
		var m sync.Mutex
		for b.Loop() {
			m.Lock()
			//lint:ignore SA2001 the benchmark measures the lock itself
			m.Unlock()
		}
	})
}
