package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// localAgents starts and supervises the agent processes the server runs on
// its own host (local_agents). Each is a real `kiln agent` speaking the
// protocol over loopback, with labels `local` plus its OS and architecture,
// so a newcomer's server runs jobs with nothing else installed.
type localAgents struct {
	db     *store.DB
	cfg    Config
	url    string
	binary string
	log    *slog.Logger
}

// Timings of the supervisor.
const (
	agentRestartMin = time.Second
	agentRestartMax = 30 * time.Second
	agentDrainWait  = 5 * time.Second  // after SIGTERM, before the second (hard stop)
	agentKillWait   = 10 * time.Second // after the second SIGTERM, before SIGKILL
)

// Run starts the agents and restarts any that exit until ctx ends, then
// stops them: a drain request, a hard stop, and SIGKILL as a last resort.
// Jobs they had running are recovered or requeued by the next server.
func (l *localAgents) Run(ctx context.Context) error {
	bin := l.binary
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("local agents: find the kiln executable: %w", err)
		}
		bin = exe
	}
	if _, err := l.token(ctx); err != nil {
		return fmt.Errorf("local agents: %w", err)
	}
	states := l.stateRoot()
	var wg sync.WaitGroup
	for i := 1; i <= l.cfg.LocalAgents; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.supervise(ctx, bin, states, i)
		}()
	}
	wg.Wait()
	return nil
}

// tokenPath is the local agents' token file. They read it themselves
// (--token-file), so the token is in no process's environment.
func (l *localAgents) tokenPath() string { return filepath.Join(l.cfg.DataDir, "local-agent.token") }

// stateRoot is where the local agents keep their state (ids, job
// directories): beside the data directory, not in it, so steps of an
// agent's job reach their directory without a way into the data
// directory, which is private and hidden from them. Where the data
// directory's parent is not writable, inside it as before.
func (l *localAgents) stateRoot() string {
	dir := l.cfg.DataDir + "-agents"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		inside := filepath.Join(l.cfg.DataDir, "agents")
		l.log.Warn("cannot keep the local agents' state beside the data directory; keeping it inside", "want", dir, "err", err, "using", inside)
		return inside
	}
	return dir
}

// token makes sure the local agents' token, kept (as a secret, mode 0600)
// in the data directory so restarts reuse it, is valid; a missing or
// revoked one is replaced.
func (l *localAgents) token(ctx context.Context) (string, error) {
	path := l.tokenPath()
	if b, err := os.ReadFile(path); err == nil {
		secret := strings.TrimSpace(string(b))
		if _, err := l.db.Auth().AuthenticateAgent(ctx, secret); err == nil {
			return secret, nil
		} else if kiln.ErrorCode(err) != kiln.CodeUnauthorized {
			return "", err
		}
	}
	_, secret, err := l.db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "local agents", CreatedBy: "server"})
	if err != nil {
		return "", err
	}
	if err := writeSecret(path, secret); err != nil {
		return "", err
	}
	return secret, nil
}

func writeSecret(path, secret string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (l *localAgents) supervise(ctx context.Context, bin, states string, i int) {
	name := localAgentID(i)
	log := l.log.With("agent", name)
	delay := agentRestartMin
	for ctx.Err() == nil {
		began := time.Now()
		err := l.runOnce(ctx, bin, filepath.Join(states, name), name, log)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// A clean exit is a finished drain (kiln agents drain): the
			// operator asked it to stop, so it stays stopped until the
			// server restarts.
			log.Info("local agent drained and stopped; it starts again with the server")
			return
		}
		if time.Since(began) > time.Minute {
			delay = agentRestartMin
		}
		log.Warn("local agent exited; restarting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, agentRestartMax)
	}
}

// localAgentID is the id of the server's i-th local agent (from 1).
func localAgentID(i int) string { return fmt.Sprintf("local-%d", i) }

func (l *localAgents) runOnce(ctx context.Context, bin, stateDir, name string, log *slog.Logger) error {
	args := []string{"agent", "--server", l.url, "--id", name, "--labels", "local", "--log-format", "json",
		"--state-dir", stateDir, "--token-file", l.tokenPath()}
	for _, p := range l.hidden() {
		args = append(args, "--hide", p)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = agentEnv(os.Environ())
	out, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	w.Close() // the child holds its own copy; EOF comes when it (and its children) exit
	if err != nil {
		out.Close()
		return err
	}
	go relayLines(out, log)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// Drain, then hard stop, then kill: the server is going away.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(agentDrainWait):
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		return err
	case <-time.After(agentKillWait):
	}
	_ = cmd.Process.Kill()
	return errors.Join(<-done, errors.New("killed"))
}

// hidden are the paths the local agents' steps must not see: the data
// directory (database, logs, the agents' token) and a SQLite database kept
// elsewhere.
func (l *localAgents) hidden() []string {
	paths := []string{l.cfg.DataDir}
	if db := sqlitePath(l.cfg); db != "" && !strings.HasPrefix(db, filepath.Clean(l.cfg.DataDir)+"/") {
		paths = append(paths, db, db+"-wal", db+"-shm")
	}
	return paths
}

// agentEnv is the server's environment without kiln's own settings: the
// agent gets neither the admin token nor the database URL (it reads its
// own token from its file).
func agentEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "KILN_") {
			out = append(out, kv)
		}
	}
	return out
}

// relayLines logs a process's output lines until EOF.
func relayLines(r io.ReadCloser, log *slog.Logger) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		relayLine(log, sc.Bytes())
	}
}

// relayLine logs one line of a local agent's JSON log as a record of the
// server's own log, at its level and with its attributes, so the operator
// reads one log rather than a log quoted inside another. Anything else the
// process prints (a panic, say) is logged as it is.
func relayLine(log *slog.Logger, line []byte) {
	var rec map[string]any
	if json.Unmarshal(line, &rec) != nil {
		log.Info(string(line))
		return
	}
	msg, _ := rec["msg"].(string)
	var level slog.Level
	if s, ok := rec["level"].(string); ok && level.UnmarshalText([]byte(s)) != nil {
		level = slog.LevelInfo
	}
	keys := make([]string, 0, len(rec))
	for k := range rec {
		if k != slog.TimeKey && k != slog.LevelKey && k != slog.MessageKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		attrs = append(attrs, k, rec[k])
	}
	log.Log(context.Background(), level, msg, attrs...)
}
