package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// serverProc is a `kiln server` child process with its own data directory
// (and scratch database on PostgreSQL).
type serverProc struct {
	cmd     *exec.Cmd
	url     string
	client  *api.Client
	token   string // the admin token: the API's, and /metrics's on the main listener
	dir     string
	logPath string
	ready   time.Duration // exec → /ready answering 200
	started time.Time
	drop    func(context.Context) error
	exited  chan struct{}
	dbURL   string // the PostgreSQL database it uses ("" on SQLite)
}

// serverOptions vary a server between scenarios.
type serverOptions struct {
	// database, when set, is the PostgreSQL URL to share (another bench
	// server's) instead of a scratch database of its own.
	database    string
	localAgents int
	sets        []string // extra --set KEY=VALUE
	config      string   // a configuration file's content ("": none)
}

// benchSets are the settings every bench server runs with: jobs no bench
// agent can take (the unmatchable backlog) must stay queued, and the
// server logs only what goes wrong.
var benchSets = []string{"queue.unroutable_grace=1h", "queue.expiry=0s", "log.level=warn"}

// startServer starts a server and waits until /ready answers.
func (b *bench) startServer(ctx context.Context, o serverOptions) (s *serverProc, err error) {
	dir, err := os.MkdirTemp("", "kiln-bench-")
	if err != nil {
		return nil, err
	}
	s = &serverProc{dir: dir, logPath: filepath.Join(dir, "server.log")}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	args := []string{"server", "--data-dir", filepath.Join(dir, "data"), "--local-agents", strconv.Itoa(o.localAgents)}
	switch {
	case o.database != "":
		s.dbURL = o.database
		args = append(args, "--database", o.database)
	case b.cfg.Database != "":
		u, drop, err := store.ScratchPostgres(ctx, b.cfg.Database, "kiln_bench")
		if err != nil {
			return s, err
		}
		s.drop, s.dbURL = drop, u
		args = append(args, "--database", u)
	}
	addr, err := freeAddr()
	if err != nil {
		return s, err
	}
	args = append(args, "--listen", addr)
	if o.config != "" {
		path := filepath.Join(dir, "kiln.yml")
		if err := os.WriteFile(path, []byte(o.config), 0o600); err != nil {
			return s, err
		}
		args = append(args, "--config", path)
	}
	for _, kv := range append(append([]string(nil), benchSets...), o.sets...) {
		args = append(args, "--set", kv)
	}
	b.servers++
	if b.cfg.CPUProfile != "" {
		args = append(args, "--cpuprofile", fmt.Sprintf("%s.%s.%d", b.cfg.CPUProfile, b.scenario, b.servers))
	}
	if b.cfg.MemProfile != "" {
		args = append(args, "--memprofile", fmt.Sprintf("%s.%s.%d", b.cfg.MemProfile, b.scenario, b.servers))
	}
	admin := "kadm_bench" + randomHex(16)
	cmd := exec.Command(b.cfg.Binary, args...)
	cmd.Env = append(append(os.Environ(), "KILN_ADMIN_TOKEN="+admin), b.cfg.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.url, s.token = "http://"+addr, admin
	if s.client, err = api.NewClient(s.url, admin); err != nil {
		return s, err
	}
	return s, s.launch(ctx, cmd)
}

// waitReady polls /ready every millisecond: the start-up time is measured
// to that resolution.
func (s *serverProc) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(s.url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited during start-up:\n%s", s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer /ready within 30s:\n%s", s.logTail())
		}
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 15 s) and removes
// what it kept.
func (s *serverProc) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.terminate()
	}
	if s.drop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.drop(ctx)
		cancel()
	}
	_ = os.RemoveAll(s.dir)
}

// restart stops the server (SIGTERM) and starts it again with the same
// arguments, on the same data directory and database, timing exec →
// /ready again.
func (s *serverProc) restart(ctx context.Context) error {
	s.terminate()
	cmd := exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	cmd.Env, cmd.SysProcAttr = s.cmd.Env, s.cmd.SysProcAttr
	return s.launch(ctx, cmd)
}

// launch starts cmd with its output added to the server's log and waits
// until /ready answers, timing exec → /ready.
func (s *serverProc) launch(ctx context.Context, cmd *exec.Cmd) error {
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	s.started = time.Now()
	if err := cmd.Start(); err != nil {
		close(exited) // nothing to wait for: stop must not block on it
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := s.waitReady(ctx); err != nil {
		return err
	}
	s.ready = time.Since(s.started)
	return nil
}

// terminate ends the process: SIGTERM, then SIGKILL after 15 s.
func (s *serverProc) terminate() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// logTail is the end of the server's output, for error messages.
func (s *serverProc) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// wsURL is where agents connect.
func (s *serverProc) wsURL() string { return "ws" + strings.TrimPrefix(s.url, "http") + "/ws" }

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
