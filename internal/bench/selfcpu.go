package bench

import (
	"syscall"
	"time"
)

// selfCPU is the bench process's own CPU time so far (its scripted agents
// and viewers, mostly), or -1 if it cannot be read. The bench, like the
// scalers it drives, builds for Linux only.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
