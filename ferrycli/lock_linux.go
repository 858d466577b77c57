package ferrycli

import "syscall"

// childAttr makes `lock run`'s command get SIGTERM if enqueue dies (kill
// -9): it must not go on without the lock enqueue renewed for it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
