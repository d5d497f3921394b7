//go:build unix

package browsertest

import (
	"os/exec"
	"syscall"
)

// ownGroup puts chromedriver, and the browsers it starts, in a process
// group of their own, so that killGroup stops them all.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills cmd's process group.
func killGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
