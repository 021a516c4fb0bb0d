//go:build !linux

package sandbox

// confine is a no-op off Linux, which has neither seccomp nor Landlock:
// there a sandbox process is held by goja and its limits only.
// Production runs on Linux.
func confine(confineLayers) (confinement, error) {
	return confinement{note: "no kernel confinement off Linux"}, nil
}
