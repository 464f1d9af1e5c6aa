//go:build !race

package protocolhost

// raceEnabled: the race detector multiplies memory use, so RSS bounds are not checked.
const raceEnabled = false
