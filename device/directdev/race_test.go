//go:build race

package directdev

const raceEnabled = true
