//go:build race

package sluice

// raceEnabled says the race detector is on: it multiplies memory use, so
// RSS bounds are not checked.
const raceEnabled = true
