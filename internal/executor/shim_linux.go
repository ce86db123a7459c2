//go:build linux

package executor

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER from <linux/prctl.h>

// MaybeRunShim turns this process into a step's supervisor when it was
// started as one (os.Args[1] is the hidden shim argument) and then exits;
// otherwise it returns at once. The kiln binary's main and the executor's
// TestMain call it before anything else.
//
// The shim makes itself a child subreaper, starts the step's command in a
// new process group and waits. Every process the step starts stays its
// descendant: orphans — background jobs, nohup, double forks, setsid — are
// re-parented to it rather than to init. On SIGTERM it forwards SIGTERM to
// the step's process group (a graceful stop); on SIGUSR1 (a forced stop,
// also its parent-death signal, so the step dies with the agent) it
// SIGKILLs the group. Once the command has exited, it SIGKILLs every
// descendant still alive, reaps them all and exits with the command's
// status (128+n if signal n killed it).
//
// With --isolate the executor has started it as the first process of new
// PID and mount namespaces, and it sets up what the step may see before
// starting it (shimOptions.enterSandbox); being pid 1 there, its exit also
// makes the kernel kill whatever of the step is left.
func MaybeRunShim() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case shimArg:
		os.Exit(runShim(os.Args[2:]))
	case probeArg:
		os.Exit(0) // the command of the isolation probe: it could be started
	}
}

type shim struct {
	sigs   chan os.Signal
	leader int  // the command's pid and process group
	exited bool // the command has been reaped
	status int
}

func runShim(args []string) int {
	opts, argv, err := parseShimArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kiln: the step supervisor: %v\n", err)
		return 125
	}
	if opts.leaseFD > 0 {
		syscall.CloseOnExec(opts.leaseFD) // the step must not hold the agent's lease file
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "kiln: cannot become a child subreaper: %v\n", errno)
		return 125
	}
	if opts.isolate {
		if err := opts.enterSandbox(); err != nil {
			fmt.Fprintf(os.Stderr, "kiln: cannot isolate the step: %v\n", err)
			return 125
		}
	}
	s := &shim{sigs: make(chan os.Signal, 64)}
	// SIGPIPE is caught (not ignored, which the step would inherit) so a
	// write to a log pipe whose reader died cannot kill the shim before it
	// has cleaned up.
	signal.Notify(s.sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE, sigKillAll)

	// PATH is the step's own, so a shell installed by an earlier step
	// through $KILN_PATH is found.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kiln: cannot run %s: %v\n", argv[0], err)
		return 127
	}
	s.leader, err = syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   opts.stepAttr(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kiln: cannot run %s: %v\n", argv[0], err)
		return 126
	}
	var leaseTick <-chan time.Time
	if opts.leaseFD > 0 {
		t := time.NewTicker(leaseCheckInterval)
		defer t.Stop()
		leaseTick = t.C
	}
	lapsed := false
	for !s.exited {
		var sig os.Signal
		select {
		case sig = <-s.sigs:
		case <-leaseTick:
			if lapsed || !leaseLapsed(opts.leaseFD) {
				continue
			}
			// B126: the agent has not heard from its coordinators for its
			// lease, or is frozen; the job may soon run elsewhere.
			lapsed = true
			fmt.Fprintf(os.Stderr, "kiln: the agent's lease ran out (no word from the orchestrator in time); the step was killed\n")
			sig = sigKillAll
		}
		switch sig {
		case syscall.SIGCHLD:
			s.reap()
		case syscall.SIGPIPE:
		case sigKillAll:
			// The command is not reaped yet, so its group id still names
			// this step's group and nobody else's.
			_ = syscall.Kill(-s.leader, syscall.SIGKILL)
			s.reap()
		default:
			_ = syscall.Kill(-s.leader, syscall.SIGTERM)
		}
	}
	s.sweep()
	return s.status
}

// reap collects every child that has exited, without blocking.
func (s *shim) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		s.note(pid, ws)
	}
}

func (s *shim) note(pid int, ws syscall.WaitStatus) {
	if pid != s.leader {
		return
	}
	s.exited = true
	switch {
	case ws.Exited():
		s.status = ws.ExitStatus()
	case ws.Signaled():
		s.status = 128 + int(ws.Signal())
	default:
		s.status = 125
	}
}

// sweep kills and reaps every remaining descendant. Each round SIGKILLs
// the shim's children (and the process groups they lead); their own
// children are then re-parented to the shim and killed in the next round,
// until wait reports there is no child left. Only this goroutine reaps,
// so a pid read from /proc cannot be recycled before it is signalled.
func (s *shim) sweep() {
	pause := time.Millisecond
	for {
		for _, pid := range children() {
			if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.ECHILD:
			return
		case err == syscall.EINTR:
			continue
		case err != nil:
			fmt.Fprintf(os.Stderr, "kiln: waiting for the step's processes: %v\n", err)
			return
		case pid > 0:
			s.note(pid, ws)
			pause = time.Millisecond
			continue
		}
		// Children exist but none has died yet: wait for a SIGCHLD or a
		// short while, then look again (new orphans may have arrived).
		select {
		case <-s.sigs:
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// children lists the shim's direct children.
func children() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	if len(tasks) == 0 {
		return childrenByScan()
	}
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// childrenByScan is for kernels without /proc/<pid>/task/<tid>/children:
// every process whose parent is the shim.
func childrenByScan() []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// leaseCheckInterval is how often a supervisor reads the lease file: how
// late after its deadline a step may still run when the agent is frozen.
const leaseCheckInterval = 100 * time.Millisecond

// leaseLapsed reports whether the lease file's modification time, the
// deadline the agent last set, has passed. A file that cannot be read says
// nothing: the agent also stops the job itself.
func leaseLapsed(fd int) bool {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return false
	}
	return time.Now().After(time.Unix(st.Mtim.Unix()))
}
