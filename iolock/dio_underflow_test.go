//go:build !invariants

package iolock

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestDIOEndUnderflowIsCountedNotFatal(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)

	var d DIO
	for range 5 {
		d.End()
	}
	if d.InFlight() != 0 || d.Underflows() != 5 {
		t.Fatalf("InFlight %d Underflows %d", d.InFlight(), d.Underflows())
	}
	// Logged at the 1st, 2nd and 4th underflow, with a stack.
	if n := strings.Count(buf.String(), "DIO.End without a matching Begin"); n != 3 {
		t.Fatalf("logged %d times:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "TestDIOEndUnderflowIsCountedNotFatal") {
		t.Fatalf("no stack in log:\n%s", buf.String())
	}
	d.Begin()
	if d.InFlight() != 1 {
		t.Fatal("count corrupted by underflow")
	}
	d.End()
}
