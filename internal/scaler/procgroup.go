package scaler

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A process group's id is its leader's pid. Once the leader is reaped and
// the group has no member left, the kernel may give that number to a new
// process, which may lead a group of its own: a signal to the old group id
// would then reach a stranger's processes (with the kernel's default
// pid_max of 32,768 on a busy CI host, numbers come round within minutes).
// So before signalling a group whose leader may be gone, the leader's
// start time, read when it was started, is compared with that of whatever
// now holds the number.

// startTime is a process's start time (clock ticks after boot, field 22 of
// /proc/<pid>/stat), 0 when it cannot be read.
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, err := strconv.ParseUint(f[19], 10, 64) // field 22
	if err != nil {
		return 0
	}
	return n
}

// groupStillOurs reports whether the process group pgid, whose leader
// started at leaderStart, may be signalled: its leader is that process
// (alive, or dead but not yet reaped), or no process holds the number — the
// group's remaining members, if any, are the leader's (a number still in
// use as a group id is not given to a new process). A process with that
// pid and another start time means the number was reused: not ours.
func groupStillOurs(pgid int, leaderStart uint64) bool {
	if leaderStart == 0 {
		return false // unknown: signal nothing rather than a stranger
	}
	now := startTime(pgid)
	return now == 0 || now == leaderStart
}
