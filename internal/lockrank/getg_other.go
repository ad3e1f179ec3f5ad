//go:build (invariants || race) && !(amd64 || arm64)

package lockrank

// gkey returns the key of the calling goroutine's held locks: its id, read
// from its stack header (slow; amd64 and arm64 read the goroutine pointer).
func gkey() uintptr { return uintptr(goid()) }
