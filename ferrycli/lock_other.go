//go:build !linux

package ferrycli

import "syscall"

// childAttr: only Linux can signal a child when its parent dies.
func childAttr() *syscall.SysProcAttr { return nil }
