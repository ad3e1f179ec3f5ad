//go:build race

package ring

// raceEnabled says the race detector is on: it allocates, so allocation
// counts are not checked.
const raceEnabled = true
