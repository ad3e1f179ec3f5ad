//go:build invariants

package iolock

import "testing"

func TestDIOEndUnderflowPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	var d DIO
	d.End()
}
