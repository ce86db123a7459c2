//go:build linux

package cli

import (
	"log/slog"
	"syscall"
)

// undumpable closes this process to other processes of its user: its
// environment, memory and file descriptors under /proc/<pid> and ptrace.
// The agent and the server hold tokens there (os.Unsetenv would not change
// /proc/<pid>/environ). Root still can (CAP_SYS_PTRACE), which is why
// isolated steps also get a PID namespace of their own.
func undumpable(log *slog.Logger) {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		log.Warn("cannot make the process undumpable: processes of the same user may read its environment and memory", "err", errno.Error())
	}
}
