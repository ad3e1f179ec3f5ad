package iolock

import (
	"os"
	"testing"

	"github.com/sluicefs/sluice/internal/lockrank"
)

// TestMain turns the engine's lock-order checker off: these tests use a Lock
// as a data structure (one goroutine holding it shared several times, locks
// released by other goroutines without a hand-off), which the engine never
// does and the checker rightly refuses.
func TestMain(m *testing.M) {
	lockrank.Disable()
	os.Exit(m.Run())
}
