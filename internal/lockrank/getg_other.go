//go:build (invariants || race) && !(amd64 || arm64)

package lockrank

import "runtime"

// gkey returns the key of the calling goroutine's held locks: its id, read
// from its stack header (slow; amd64 and arm64 read the goroutine pointer).
func gkey() uintptr { return uintptr(goid()) }

// goid returns the calling goroutine's id, read from its stack header
// ("goroutine 123 [running]:").
func goid() uint64 {
	var buf [32]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	for _, c := range buf[len("goroutine "):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
