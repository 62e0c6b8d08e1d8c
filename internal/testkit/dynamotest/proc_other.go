//go:build !linux

package dynamotest

import "syscall"

// sysProcAttr has nothing to add outside Linux: the server is stopped by
// Stop and Main only.
func sysProcAttr() *syscall.SysProcAttr { return nil }
