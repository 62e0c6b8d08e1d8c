package dynamotest

import "syscall"

// sysProcAttr makes the kernel kill the server when the test binary dies,
// so that a binary that exits without Main (or crashes) leaves no server
// behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
