package sluice

import (
	"bytes"
	"testing"
)

func TestSmokeDirectAndBuffered(t *testing.T) {
	for _, direct := range []bool{false, true} {
		e := newEnv(t, envConfig{})
		flags := 0
		if direct {
			flags = O_DIRECT
		}
		f := e.mustCreate("/a", flags)
		data := pattern(3*4096+512, 1)
		if n, err := f.WriteAt(data, 512); err != nil || n != len(data) {
			t.Fatalf("direct=%v write: %d %v", direct, n, err)
		}
		got := mustReadAll(t, f)
		want := append(make([]byte, 512), data...)
		if !bytes.Equal(got, want) {
			t.Fatalf("direct=%v: read back differs (len %d vs %d)", direct, len(got), len(want))
		}
		if err := f.Fsync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		checkClean(t, e.fs)
		// Crash after fsync: the data must be there.
		e2 := e.crash(42)
		f2, err := e2.fs.OpenFile("/a", O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustReadAll(t, f2); !bytes.Equal(got, want) {
			t.Fatalf("direct=%v: after crash, content differs", direct)
		}
		f2.Close()
		checkClean(t, e2.fs)
	}
}
