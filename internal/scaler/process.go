package scaler

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is the process backend: each agent is `kiln agent` — the server's
// own binary unless the scaler names another — in its own process group,
// with the ephemeral token in its environment (never on the command line),
// a state directory of its own, and its output captured for the failure
// tail. Destroy sends SIGTERM to the group, then SIGKILL after KillAfter.
type Process struct {
	// Binary is the kiln executable (default: this process's).
	Binary string
	// StateRoot holds each agent's state directory (removed with it).
	StateRoot string
	// Hide are paths the agents' steps must not see (the server's data
	// directory).
	Hide []string
	// Env is the environment the agents inherit (default: this process's
	// without KILN_ variables).
	Env []string
	// KillAfter is how long Destroy waits after SIGTERM (default 5s).
	KillAfter time.Duration
}

// Spawn starts the agent process (B179).
func (p *Process) Spawn(ctx context.Context, req SpawnRequest) (Instance, error) {
	bin := req.Binary
	if bin == "" {
		bin = p.Binary
	}
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the kiln executable: %w", err)
		}
		bin = exe
	}
	root := p.StateRoot
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp(root, req.AgentID+"-")
	if err != nil {
		return nil, err
	}
	args := []string{"agent", "--server", req.ServerURL, "--id", req.AgentID, "--labels", strings.Join(req.Labels, ","),
		"--max-jobs", "1", "--state-dir", state, "--log-format", "json"}
	for _, h := range p.Hide {
		args = append(args, "--hide", h)
	}
	cmd := exec.Command(bin, args...)
	env := p.Env
	if env == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "KILN_") {
				env = append(env, kv)
			}
		}
	}
	env = append(append([]string(nil), env...), "KILN_AGENT_TOKEN="+req.Token)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.Dir = state
	capture := &Capture{}
	cmd.Stdout, cmd.Stderr = capture, capture
	// Its own process group, so Destroy reaches whatever it started; it
	// dies with the server (a process cannot outlive the server that
	// would remove it: the next server finds its spawn row and forgets it).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	req.Event(EventProvisioning, "starting the agent process "+filepath.Base(bin)+" agent --id "+req.AgentID)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(state)
		return nil, errors.New(WithTail("agent process error: "+err.Error(), capture.Tail()))
	}
	// Read before anything can reap it: the process exists, if only as a
	// zombie, until the Wait below.
	started := startTime(cmd.Process.Pid)
	pr := &procInstance{cmd: cmd, capture: capture, state: state, exited: make(chan struct{}), killAfter: p.KillAfter,
		started: started}
	if pr.killAfter <= 0 {
		pr.killAfter = 5 * time.Second
	}
	go func() {
		pr.err = cmd.Wait()
		close(pr.exited)
	}()
	req.Event(EventReady, fmt.Sprintf("agent process started (PID %d)", cmd.Process.Pid))
	return pr, nil
}

type procInstance struct {
	cmd       *exec.Cmd
	capture   *Capture
	state     string
	exited    chan struct{}
	err       error
	killAfter time.Duration
	once      sync.Once
	started   uint64 // the process's start time (startTime), for groupStillOurs
}

func (p *procInstance) Exited() <-chan struct{} { return p.exited }
func (p *procInstance) ExitErr() error          { return p.err }
func (p *procInstance) Tail() string            { return p.capture.Tail() }

// Destroy sends SIGTERM to the process group, SIGKILL after killAfter,
// waits for the process and removes its state directory (B179).
func (p *procInstance) Destroy(ctx context.Context, _ string) error {
	var err error
	p.once.Do(func() {
		pgid := -p.cmd.Process.Pid
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(pgid, syscall.SIGTERM)
			t := time.NewTimer(p.killAfter)
			defer t.Stop()
			select {
			case <-p.exited:
			case <-t.C:
			case <-ctx.Done():
			}
		}
		// Whatever the agent left in its group goes too — unless the
		// agent ended long enough ago that its number went to a stranger.
		if groupStillOurs(-pgid, p.started) {
			if e := syscall.Kill(pgid, syscall.SIGKILL); e != nil && !errors.Is(e, syscall.ESRCH) {
				err = e
			}
		}
		<-p.exited
		_ = os.RemoveAll(p.state)
	})
	return err
}
