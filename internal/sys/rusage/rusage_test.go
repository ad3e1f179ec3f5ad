package rusage

import "testing"

// TestSelfGrows: CPU time spent between two readings shows in their
// difference.
func TestSelfGrows(t *testing.T) {
	a := Self()
	x := 0
	for i := range 50_000_000 {
		x += i ^ x
	}
	d := Self().Sub(a)
	if d.CPU <= 0 || d.Switches < 0 {
		t.Fatalf("usage over a busy loop: %+v (x=%d)", d, x)
	}
}
