// Package filelock runs a function under an exclusive flock(2) on a lock file, so that
// processes on one machine (parallel test packages, several driver node instances) take
// turns at something they share.
package filelock

import (
	"fmt"
	"os"
	"syscall"
)

// With creates path if needed (with mode perm), holds an exclusive lock on it while f runs,
// and returns f's error. The lock is released when f returns, and by the kernel if the
// process dies.
func With(path string, perm os.FileMode, f func() error) error {
	lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, perm)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	return f()
}
