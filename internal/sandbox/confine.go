package sandbox

import (
	"fmt"
	"strings"
)

// confineLayers selects the kernel protections confine installs. A
// sandbox process always gets all of them; only a test binary (see
// childTestGlobals) may ask for one alone, to show that each holds by
// itself.
type confineLayers uint8

const (
	layerSeccomp confineLayers = 1 << iota
	layerLandlock
	layerAll = layerSeccomp | layerLandlock
)

// confinement is what a sandbox process is confined by, as it reports
// it in its hello.
type confinement struct {
	seccomp  bool
	landlock int    // the Landlock ABI version applied; 0: none
	note     string // why Landlock is not applied
}

func (c confinement) String() string {
	var parts []string
	if c.seccomp {
		parts = append(parts, "seccomp filter")
	} else {
		parts = append(parts, "no seccomp filter")
	}
	if c.landlock > 0 {
		parts = append(parts, fmt.Sprintf("Landlock ABI %d", c.landlock))
	} else {
		parts = append(parts, "no Landlock")
	}
	s := strings.Join(parts, ", ")
	if c.note != "" {
		s += " (" + c.note + ")"
	}
	return s
}
