//go:build unix

package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDataDir takes an exclusive flock on data_dir/lock for as long as the
// server runs and writes its pid there (B128). Two servers on one data
// directory would each recover the other's running jobs at start and run
// them again; the second is refused, naming the holder. The kernel drops
// the lock when the process ends, however it ends, so a crash never leaves
// a stale lock behind. unlock closes the file, releasing it.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data_dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another kiln server%s is using the data directory %s (it holds %s); stop it, or give this one another data_dir",
				holder, dir, path)
		}
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	// The pid is for the refusal message only: the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// readHolder is " (pid N)" from the lock file, or "" when it holds none.
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}
