//go:build race

package credtracker

// raceEnabled: the race detector slows the sweeps about tenfold.
const raceEnabled = true
