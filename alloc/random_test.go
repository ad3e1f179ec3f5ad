package alloc

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var (
	seedFlag  = flag.Uint64("alloc.seed", 0, "run TestRandom with only this seed (0: the built-in seeds)")
	stepsFlag = flag.Int("alloc.steps", 3000, "operations per seed in TestRandom")
)

// TestRandom runs seeded random operation sequences against the bitmap
// model. A failure prints the seed; rerun it alone with
//
//	go test ./alloc/ -run TestRandom -alloc.seed=SEED
func TestRandom(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 42, 20251130}
	if *seedFlag != 0 {
		seeds = []uint64{*seedFlag}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runRandom(t, seed, *stepsFlag)
		})
	}
}

func runRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	first := BlockNum(rng.IntN(3))
	total := 1 + rng.Uint64N(256)
	label := fmt.Sprintf("seed %d (rerun: go test ./alloc/ -run TestRandom -alloc.seed=%d)", seed, seed)
	h := newHarness(t, label, first, first+BlockNum(total))
	// Each seed leans towards different operations, so some runs fill
	// the device, some keep much of it busy, some reserve heavily.
	weights := make([]int, 12)
	for i := range weights {
		weights[i] = 1 + rng.IntN(6)
	}
	sum := 0
	for _, w := range weights {
		sum += w
	}
	for range steps {
		r := rng.IntN(sum)
		op := 0
		for ; r >= weights[op]; op++ {
			r -= weights[op]
		}
		h.step(byte(op), rng.Uint64(), rng.Uint64(), rng.Uint64())
	}
	h.drain()
}

// TestEmptyDevice covers an Allocator with no blocks at all.
func TestEmptyDevice(t *testing.T) {
	h := newHarness(t, "empty", 5, 5)
	for op := range byte(12) {
		h.step(op, 1, 2, 3)
	}
	h.drain()
}

// FuzzAllocator decodes bytes into a device size and an operation
// sequence, and checks it against the bitmap model like TestRandom.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 16, 0, 3, 4, 0, 4, 0, 1, 0, 8, 0, 0, 0, 11, 0, 0, 0})
	f.Add([]byte{1, 40, 2, 1, 200, 0, 2, 7, 1, 0, 9, 30, 0, 0, 3, 0, 5, 1, 5, 0, 0, 7, 11, 0, 0, 0, 8, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		first := BlockNum(data[0] % 4)
		total := uint64(data[1]) % 200
		h := newHarness(t, fmt.Sprintf("fuzz input %x", data), first, first+BlockNum(total))
		for ops := data[2:]; len(ops) >= 4; ops = ops[4:] {
			h.step(ops[0], uint64(ops[1]), uint64(ops[2]), uint64(ops[3]))
		}
		h.drain()
	})
}
