package extmap

import "testing"

// FuzzExtMap decodes the input into an operation sequence (each choice one
// or two bytes; see byteSource) and checks it against the per-block model,
// exactly as TestRandomOps does. The committed corpus is in
// testdata/fuzz/FuzzExtMap; run more with
// go test -fuzz FuzzExtMap ./extmap/.
func FuzzExtMap(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		h := newHarness(t, src, "fuzz input")
		for steps := 0; !src.exhausted() && steps < 400; steps++ {
			h.step()
		}
	})
}
