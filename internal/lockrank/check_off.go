//go:build !(invariants || race)

package lockrank

import "unsafe"

// enabled says whether the order is checked: with the race detector or the
// invariants build tag.
const enabled = false

// Acquire records that the calling goroutine is about to wait for lock l of
// rank r (key orders several locks of a multi rank), after checking the
// order against the locks it holds.
func Acquire(r Rank, key uint64, l unsafe.Pointer) {}

// Wait checks that the calling goroutine may wait for an event whose
// producer takes a lock of rank r, as Acquire would, recording nothing.
func Wait(r Rank, key uint64, l unsafe.Pointer) {}

// TryAcquired records that the calling goroutine took lock l without
// waiting; the order is not checked (a try cannot deadlock).
func TryAcquired(r Rank, key uint64, l unsafe.Pointer) {}

// Release records that lock l is released.
func Release(l unsafe.Pointer) {}

// Handoff hands lock l, held by the calling goroutine, to an asynchronous
// request that releases it on completion.
func Handoff(l unsafe.Pointer) {}

// Held returns the ranks the calling goroutine holds (nil when unchecked).
func Held() []Rank { return nil }

// onViolation is unused without checks; tests reference it.
var onViolation = func(msg string) { panic(msg) }

// Disable turns the checks off for the rest of the process (a no-op here).
func Disable() {}
