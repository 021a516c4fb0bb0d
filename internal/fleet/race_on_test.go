//go:build race

package fleet_test

// raceEnabled: the race detector slows everything several times, so
// wall-clock bounds are checked only without it.
const raceEnabled = true
