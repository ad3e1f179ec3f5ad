//go:build !race

package reliability

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
