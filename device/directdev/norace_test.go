//go:build !race

package directdev

const raceEnabled = false
