package extmap

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var (
	flagSeed  = flag.Uint64("extmap.seed", 0, "run TestRandomOps with this seed only (replay a failure)")
	flagSeeds = flag.Int("extmap.seeds", 16, "number of seeds TestRandomOps runs")
	flagOps   = flag.Int("extmap.ops", 1000, "operations per seed in TestRandomOps (halved under -race, fifth under -short)")
)

// TestRandomOps runs seeded random operation sequences against the
// per-block model (model_test.go), remaps and shared device blocks
// included, checking Lookup, the record mirror, Check, the blocks that
// Remap, Remove and CollapseRange return, the Remappings of MarkDurable and
// Unconvert, and the rules for sharing device blocks after every step.
// Replay a failure with -extmap.seed=N.
func TestRandomOps(t *testing.T) {
	seeds := make([]uint64, 0, *flagSeeds)
	if *flagSeed != 0 {
		seeds = append(seeds, *flagSeed)
	} else {
		for i := range *flagSeeds {
			seeds = append(seeds, uint64(i+1)*0x9e3779b97f4a7c15)
		}
	}
	ops := *flagOps
	if testing.Short() {
		ops /= 5
	}
	if raceEnabled {
		ops /= 2 // the model checks dominate, and the race detector slows them ~10x
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("seed %d (replay with -run TestRandomOps -extmap.seed=%d)", seed, seed)
			h := newHarness(t, randSource{rand.New(rand.NewPCG(seed, seed^0x5eed))}, name)
			for range ops {
				h.step()
			}
		})
	}
}
