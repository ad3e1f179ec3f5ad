//go:build !race

package extmap

const raceEnabled = false
