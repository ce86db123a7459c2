package scaler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// group is a started process that leads its own process group (an agent,
// a VMM): the three process-based backends share how they watch it and
// how they stop it.
type group struct {
	cmd       *exec.Cmd
	capture   *Capture
	started   uint64 // the leader's start time, for groupStillOurs
	exited    chan struct{}
	err       error // once exited is closed
	killAfter time.Duration
}

// watch follows cmd, just started: its start time is read before anything
// can reap it (it exists, if only as a zombie, until the Wait here).
// killAfter ≤ 0 means 5 s.
func watch(cmd *exec.Cmd, capture *Capture, killAfter time.Duration) *group {
	if killAfter <= 0 {
		killAfter = 5 * time.Second
	}
	g := &group{cmd: cmd, capture: capture, started: startTime(cmd.Process.Pid), exited: make(chan struct{}),
		killAfter: killAfter}
	go func() {
		g.err = cmd.Wait()
		close(g.exited)
	}()
	return g
}

func (g *group) Exited() <-chan struct{} { return g.exited }
func (g *group) ExitErr() error          { return g.err }
func (g *group) Tail() string            { return g.capture.Tail() }

// stop asks the leader to end with polite (unless it already has), gives
// it killAfter (or until ctx ends), then kills whatever is left in its
// group — unless the group's number went to a stranger — and waits for the
// leader.
func (g *group) stop(ctx context.Context, polite func()) error {
	select {
	case <-g.exited:
	default:
		polite()
		t := time.NewTimer(g.killAfter)
		defer t.Stop()
		select {
		case <-g.exited:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	var err error
	pgid := g.cmd.Process.Pid
	if groupStillOurs(pgid, g.started) {
		if e := syscall.Kill(-pgid, syscall.SIGKILL); e != nil && !errors.Is(e, syscall.ESRCH) {
			err = e
		}
	}
	<-g.exited
	return err
}

// terminate is the polite request of a plain process: SIGTERM to its group.
func (g *group) terminate() { _ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM) }
