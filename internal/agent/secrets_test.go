package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/waittest"
)

// An orchestrator address that answers with a redirect does not get the
// agent to follow it: the token goes in the first frame to whoever
// answers, so the host redirected to never hears from the agent, and the
// agent says why it cannot connect.
func TestAgentRefusesRedirects(t *testing.T) {
	var reached atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer elsewhere.Close()
	var tried atomic.Int32
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tried.Add(1)
		http.Redirect(w, r, elsewhere.URL+"/ws", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()

	var logs syncBuffer
	cfg := Config{
		Server: redirector.URL, Token: "kat_redirected", ID: "r-1", Runner: newFakeRunner(),
		MinReconnectDelay: time.Millisecond, MaxReconnectDelay: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	waittest.Until(t, agenttest.Timeout, "three refused attempts", func() bool { return tried.Load() >= 3 })
	stop()
	<-done
	if n := reached.Load(); n != 0 {
		t.Fatalf("the agent followed the redirect %d times", n)
	}
	if !strings.Contains(logs.String(), "does not follow redirects") {
		t.Fatalf("the agent did not say why it cannot connect:\n%s", logs.String())
	}
}

// The token can come from a file, which must be private to the agent's
// user: one that others may read is refused with the fix.
func TestTokenFileMustBePrivate(t *testing.T) {
	orch := agenttest.New(t)
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("kat_from_file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(context.Background(), Config{Server: orch.URL(), TokenFile: path, ID: "f-1", Runner: newFakeRunner()})
	if kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(kiln.ErrorMessage(err), "chmod 600") {
		t.Fatalf("a world-readable token file: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	startAgent(t, orch, func(c *Config) { c.Token, c.TokenFile = "", path })
	if auth, _ := orch.Accept(t).Handshake(t, proto.RegisterAck{}); auth.Token != "kat_from_file" {
		t.Fatalf("authenticated with %q", auth.Token)
	}
}

// With isolation on, a real job's steps cannot read the agent's state
// directory or its token file, yet run in a work root inside that state
// directory (the default), and the step files still carry values on.
func TestIsolatedStepsCannotReadTheAgentState(t *testing.T) {
	orch := agenttest.New(t)
	dir := t.TempDir()
	stateDir, tokenFile := filepath.Join(dir, "state"), filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("kat_secret_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cfg := Config{
		Server: orch.URL(), TokenFile: tokenFile, StateDir: stateDir,
		MinReconnectDelay: time.Millisecond, MaxReconnectDelay: 8 * time.Millisecond,
		Executor: executor.Config{
			BaseEnv:   []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Isolation: executor.Isolation{Mode: executor.IsolationAuto},
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() {
		stop()
		<-done
	}()
	c := orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	if strings.Contains(logs.String(), "steps are NOT isolated") {
		t.Skipf("SKIPPED: this host cannot isolate steps:\n%s", logs.String())
	}
	c.SetAutoAck(true)
	c.Send(t, &proto.Dispatch{JobID: "job-iso", RunID: "run-1", LeaseEpoch: 1, Attempt: 1, Spec: proto.JobSpec{
		Name: "iso", Steps: []proto.Step{{Name: "look", Run: `
set +e
ls -A ` + stateDir + `
cat ` + stateDir + `/agent-id ` + tokenFile + ` 2>&1
echo "ran in $PWD"
echo "ok=1" >> "$KILN_OUTPUT"`}},
	}})
	c.Until(t, func(f agenttest.Frame) bool { return f.Type() == proto.TypeJobAck })
	frames := durable(t, c, "job-iso")
	var text []string
	for _, f := range frames {
		if m, ok := f.Msg.(*proto.Log); ok {
			for _, l := range m.Lines {
				text = append(text, l.Text)
			}
		}
	}
	final := frames[len(frames)-1].Msg.(*proto.JobStatus)
	log := strings.Join(text, "\n")
	id, err := os.ReadFile(filepath.Join(stateDir, idFile))
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != kiln.JobSuccess || final.Outputs["ok"] != "1" {
		t.Fatalf("job %s %v (%s); log:\n%s", final.Status, final.Outputs, final.Error, log)
	}
	if strings.Contains(log, "kat_secret_file") || strings.Contains(log, strings.TrimSpace(string(id))) || slices.Contains(text, idFile) {
		t.Fatalf("the step read the agent's state:\n%s", log)
	}
	if !strings.Contains(log, "ran in "+filepath.Join(stateDir, "work")) {
		t.Fatalf("the job did not run in the state directory's work root:\n%s", log)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
