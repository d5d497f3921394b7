//go:build !unix

package browsertest

import "os/exec"

// ownGroup does nothing where there are no process groups.
func ownGroup(*exec.Cmd) {}

// killGroup kills cmd's process alone.
func killGroup(cmd *exec.Cmd) {
	cmd.Process.Kill()
}
