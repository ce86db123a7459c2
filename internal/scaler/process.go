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
	pr := &procInstance{group: watch(cmd, capture, p.KillAfter), state: state}
	req.Event(EventReady, fmt.Sprintf("agent process started (PID %d)", cmd.Process.Pid))
	return pr, nil
}

type procInstance struct {
	*group
	state string
	once  sync.Once
}

// Destroy sends SIGTERM to the process group, SIGKILL after killAfter,
// waits for the process and removes its state directory (B179).
func (p *procInstance) Destroy(ctx context.Context, _ string) error {
	var err error
	p.once.Do(func() {
		err = p.stop(ctx, p.terminate)
		_ = os.RemoveAll(p.state)
	})
	return err
}
