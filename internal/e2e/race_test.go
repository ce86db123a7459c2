//go:build race

package e2e

// raceEnabled builds the kiln binary with the race detector too.
const raceEnabled = true
