package iolock

import (
	"sync"
	"testing"
)

// The uncontended paths are taken on every read and write of a file.

func BenchmarkLockSharedUncontended(b *testing.B) {
	var l Lock
	for b.Loop() {
		l.Lock(Shared)
		l.Unlock(Shared)
	}
}

func BenchmarkLockExclusiveUncontended(b *testing.B) {
	var l Lock
	for b.Loop() {
		l.Lock(Exclusive)
		l.Unlock(Exclusive)
	}
}

func BenchmarkTryLockShared(b *testing.B) {
	var l Lock
	for b.Loop() {
		if l.TryLock(Shared) {
			l.Unlock(Shared)
		}
	}
}

func BenchmarkLockExclusiveDemote(b *testing.B) {
	var l Lock
	for b.Loop() {
		l.Lock(Exclusive)
		l.Demote()
		l.Unlock(Shared)
	}
}

// BenchmarkLockSharedParallel: every goroutine takes the same lock shared.
// Compare with BenchmarkRWMutexRLockParallel.
func BenchmarkLockSharedParallel(b *testing.B) {
	var l Lock
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Lock(Shared)
			l.Unlock(Shared)
		}
	})
}

// BenchmarkLockMixedParallel: one acquisition in 16 is exclusive, so readers
// queue behind writers and the slow path runs.
func BenchmarkLockMixedParallel(b *testing.B) {
	var l Lock
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m := Shared
			if i%16 == 0 {
				m = Exclusive
			}
			i++
			l.Lock(m)
			l.Unlock(m)
		}
	})
}

// Baselines: sync.RWMutex cannot demote or be tried fairly, but shows what
// the runtime's own reader/writer lock costs here.

func BenchmarkRWMutexRLockUncontended(b *testing.B) {
	var l sync.RWMutex
	for b.Loop() {
		l.RLock()
		//lint:ignore SA2001 the empty critical section is what is measured
		l.RUnlock()
	}
}

func BenchmarkRWMutexRLockParallel(b *testing.B) {
	var l sync.RWMutex
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.RLock()
			//lint:ignore SA2001 the empty critical section is what is measured
			l.RUnlock()
		}
	})
}

func BenchmarkDIOBeginEnd(b *testing.B) {
	var d DIO
	for b.Loop() {
		d.Begin()
		d.End()
	}
}

func BenchmarkDIOBeginEndParallel(b *testing.B) {
	var d DIO
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d.Begin()
			d.End()
		}
	})
}
