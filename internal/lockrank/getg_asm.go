//go:build (invariants || race) && (amd64 || arm64)

package lockrank

// getg returns the address of the calling goroutine's runtime structure.
// The runtime reuses the structures of goroutines that exited, so the
// address names a live goroutine only while it runs; the checker keys its
// per-goroutine state by it (bounded by the most goroutines alive at once).
func getg() uintptr

// gkey returns the key of the calling goroutine's held locks.
func gkey() uintptr { return getg() }
