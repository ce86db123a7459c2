//go:build linux

package executor

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Signals the executor sends the shim (see shim_linux.go).
const (
	sigTerminate = syscall.SIGTERM // forward SIGTERM to the step's process group
	sigKillAll   = syscall.SIGUSR1 // SIGKILL every process of the step now
)

// process is one supervised command: the shim and, under it, the command.
type process struct {
	cmd      *exec.Cmd
	done     chan struct{}
	exitCode int // the command's exit status as the shim reports it; -1 if the shim was killed
}

// startProcess starts argv under the shim with env in dir, its stdout and
// stderr going to the given files, in the sandbox sb (nil: none) for the
// job whose directory is jobDir.
// lease, when not nil, is the open lease file the shim watches (Config.LeaseFile).
func startProcess(shimPath string, sb *sandbox, jobDir string, lease *os.File, argv, env []string, dir string, stdout, stderr *os.File) (*process, error) {
	p := &process{done: make(chan struct{}), exitCode: -1}
	started := make(chan error, 1)
	go func() {
		// The kernel sends the parent-death signal when the *thread* that
		// forked the child exits, not the process; keep this goroutine on
		// its thread until the shim is gone so that only the agent's death
		// fires it.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		args := []string{shimPath, shimArg}
		var extra []*os.File
		if lease != nil {
			// The first extra file is descriptor 3 in the shim.
			extra = []*os.File{lease}
			args = append(args, "--lease-fd", "3")
		}
		args = append(args, sb.shimArgs(jobDir)...)
		cmd := &exec.Cmd{
			ExtraFiles:  extra,
			Path:        shimPath,
			Args:        append(args, argv...),
			Env:         env,
			Dir:         dir,
			Stdout:      stdout,
			Stderr:      stderr,
			SysProcAttr: sb.attr(),
		}
		release := sb.holdDumpable()
		err := cmd.Start()
		release()
		if err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		started <- nil
		err = cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			p.exitCode = 0
		case errors.As(err, &exit):
			p.exitCode = exit.ExitCode()
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// terminate asks for a graceful stop: SIGTERM to the step's process group.
func (p *process) terminate() { _ = p.cmd.Process.Signal(sigTerminate) }

// kill asks the shim to SIGKILL every process of the step.
func (p *process) kill() { _ = p.cmd.Process.Signal(sigKillAll) }

// killShim is the last resort when the shim does not answer.
func (p *process) killShim() { _ = p.cmd.Process.Kill() }

// sweepByCookie is the backstop for a shim that died without cleaning up
// (a step that ran `kill -9 $PPID`, or `pkill kiln`): the step's processes
// then belong to init, so it finds them by the cookie variable every step
// process inherits and SIGKILLs them, round after round until a round
// finds none. A process that also scrubbed its environment escapes it.
func sweepByCookie(cookie string) (killed int) {
	needle := []byte("\x00" + cookieVar + "=" + cookie + "\x00")
	self := os.Getpid()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		found := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
			if err != nil {
				continue
			}
			if bytes.Contains(append([]byte{0}, env...), needle) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				found++
			}
		}
		if found == 0 {
			return killed
		}
		killed += found
		time.Sleep(10 * time.Millisecond)
	}
	return killed
}

// supported is nil where steps can run.
func supported() error { return nil }

// fileOwner is the uid owning a file.
func fileOwner(fi os.FileInfo) (int, bool) {
	uid, _, ok := fileOwnerGroup(fi)
	return uid, ok
}

// fileOwnerGroup is the uid and gid owning a file.
func fileOwnerGroup(fi os.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// The agent makes itself undumpable (its /proc files then belong to root),
// but a non-root agent must write the user-ID maps of the supervisor it
// starts in a new user namespace, under /proc/<child>, and the child is
// undumpable too until it runs the kiln binary. So while such a supervisor
// starts, the agent is dumpable again. Its steps do not notice: they run in
// PID namespaces of their own, where the agent does not exist.
var dumpable struct {
	sync.Mutex
	holds   int
	restore bool // the process was undumpable before the first hold
}

const prGetDumpable = 3 // PR_GET_DUMPABLE from <linux/prctl.h>

// holdDumpable makes the process dumpable while a rootless supervisor
// starts; call the returned function once it has.
func (sb *sandbox) holdDumpable() (release func()) {
	if sb == nil || !sb.isolate || !sb.rootless {
		return func() {}
	}
	dumpable.Lock()
	if dumpable.holds == 0 {
		v, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
		dumpable.restore = v == 0
		if dumpable.restore {
			syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 1, 0)
		}
	}
	dumpable.holds++
	dumpable.Unlock()
	return func() {
		dumpable.Lock()
		defer dumpable.Unlock()
		dumpable.holds--
		if dumpable.holds == 0 && dumpable.restore {
			syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
		}
	}
}
