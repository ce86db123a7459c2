package cli

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
)

func TestAgentUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		args []string
		want string
	}{
		{"no server", nil, []string{"agent", "--token", "kat_x"}, "the orchestrator URL is missing (--server or KILN_AGENT_SERVER)"},
		{"bad scheme", nil, []string{"agent", "--server", "ftp://ci", "--token", "kat_x"}, "must start with ws://, wss://, http:// or https://"},
		{"bad env URL", map[string]string{"KILN_AGENT_SERVER": "ci.example.com:8080", "KILN_AGENT_TOKEN": "kat_x"}, []string{"agent"}, `"ci.example.com:8080" must start with`},
		{"no token", map[string]string{"KILN_AGENT_SERVER": "http://127.0.0.1:1"}, []string{"agent"}, "the agent token is missing (--token-file, KILN_AGENT_TOKEN or --token)"},
		{"bad max jobs env", map[string]string{"KILN_AGENT_MAX_JOBS": "many"}, []string{"agent", "--server", "http://h:1", "--token", "t"}, `KILN_AGENT_MAX_JOBS="many" is not a number`},
		{"zero max jobs", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--max-jobs", "0"}, "max jobs must be at least 1, not 0"},
		{"huge max jobs", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--max-jobs", "2000"}, "max jobs must be between 1 and 1024"},
		{"bad id", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a b"}, "may only contain"},
		{"bad label", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--labels", "ok, has space"}, "labels:"},
		{"no home", nil, []string{"agent", "--server", "http://h:1", "--token", "t"}, "neither XDG_STATE_HOME nor HOME is set"},
		{"argument", nil, []string{"agent", "extra"}, "unknown command"},
		{"bad log format", map[string]string{"KILN_AGENT_LOG_FORMAT": "xml"}, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a"}, `log format "xml" is neither text nor json`},
		{"bad isolation", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--isolation", "maybe"}, `isolation "maybe" is not off, auto or required`},
		{"bad isolation env", map[string]string{"KILN_AGENT_ISOLATION": "strict"}, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a"}, `isolation "strict" is not`},
		{"relative hide", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--hide", "data"}, `--hide "data": give an absolute path`},
		{"unknown step user", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--step-user", "no-such-user-kiln"}, `the step user "no-such-user-kiln"`},
		{"root step user", nil, []string{"agent", "--server", "http://h:1", "--token", "t", "--id", "a", "--step-user", "0"}, "the step user must not be root"},
		{"missing token file", nil, []string{"agent", "--server", "http://h:1", "--token-file", "/nonexistent/token", "--id", "a"}, "the token file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.vars, tc.args...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("code %d, stderr:\n%s\nwant %q", code, stderr, tc.want)
			}
		})
	}
}

func TestAgentHelpNamesTheEnvironment(t *testing.T) {
	code, out, _ := runCLI(t, nil, "agent", "--help")
	for _, want := range []string{"--server", "KILN_AGENT_SERVER", "KILN_AGENT_STATE_DIR", "--max-jobs", "second signal", "KILN_AGENT_LOG_FORMAT"} {
		if code != ExitOK || !strings.Contains(out, want) {
			t.Errorf("help lacks %q (code %d)", want, code)
		}
	}
}

// agentRun runs `kiln agent` in-process against a scripted orchestrator.
func agentRun(t *testing.T, vars map[string]string, args ...string) <-chan [2]any {
	t.Helper()
	res := make(chan [2]any, 1)
	go func() {
		code, _, stderr := runCLI(t, vars, append([]string{"agent"}, args...)...)
		res <- [2]any{code, stderr}
	}()
	return res
}

func waitAgent(t *testing.T, res <-chan [2]any) (int, string) {
	t.Helper()
	select {
	case r := <-res:
		return r[0].(int), r[1].(string)
	case <-time.After(agenttest.Timeout):
		t.Fatal("kiln agent did not exit")
		return 0, ""
	}
}

func TestAgentTakesFlagsOverEnvironment(t *testing.T) {
	orch := agenttest.New(t)
	stateDir := t.TempDir()
	vars := map[string]string{
		"KILN_AGENT_SERVER": orch.URL(), "KILN_AGENT_TOKEN": "kat_env", "KILN_AGENT_LABELS": "env-label",
		"KILN_AGENT_MAX_JOBS": "3", "KILN_AGENT_STATE_DIR": stateDir,
	}
	res := agentRun(t, vars, "--token", "kat_flag", "--labels", "GPU, fast")
	c := orch.Accept(t)
	auth, reg := c.Handshake(t, proto.RegisterAck{})
	want := kiln.NewLabels("gpu", "fast", runtime.GOOS, runtime.GOARCH)
	if auth.Token != "kat_flag" || !slices.Equal(reg.Labels, want) || reg.MaxJobs != 3 || reg.Version != buildVersion() {
		t.Errorf("auth %+v, register %+v", auth, reg)
	}
	id, err := os.ReadFile(filepath.Join(stateDir, "agent-id"))
	if err != nil || strings.TrimSpace(string(id)) != reg.AgentID {
		t.Errorf("state file %q (%v), registered as %q", id, err, reg.AgentID)
	}
	c.Send(t, &proto.Drain{})
	if code, stderr := waitAgent(t, res); code != ExitOK || !strings.Contains(stderr, "draining") {
		t.Fatalf("code %d, stderr:\n%s", code, stderr)
	}
}

// The token comes from --token-file over KILN_AGENT_TOKEN; a --token on
// the command line works but is warned about (every user can read it).
func TestAgentTokenFileAndCommandLineWarning(t *testing.T) {
	orch := agenttest.New(t)
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("kat_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := agentRun(t, map[string]string{"HOME": t.TempDir(), "KILN_AGENT_TOKEN": "kat_env"}, "--server", orch.URL(), "--token-file", path, "--isolation", "off")
	c := orch.Accept(t)
	if auth, _ := c.Handshake(t, proto.RegisterAck{}); auth.Token != "kat_file" {
		t.Errorf("authenticated with %q, want the file's token", auth.Token)
	}
	c.Send(t, &proto.Drain{})
	code, stderr := waitAgent(t, res)
	if code != ExitOK || strings.Contains(stderr, "on the command line") || !strings.Contains(stderr, "steps are NOT isolated (isolation off)") {
		t.Fatalf("code %d, stderr:\n%s", code, stderr)
	}

	res = agentRun(t, map[string]string{"HOME": t.TempDir()}, "--server", orch.URL(), "--token", "kat_flag")
	c = orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	c.Send(t, &proto.Drain{})
	if code, stderr := waitAgent(t, res); code != ExitOK || !strings.Contains(stderr, "the agent token is on the command line") {
		t.Fatalf("code %d, stderr:\n%s", code, stderr)
	}
}

// Proves B55 (docs/behaviours.md).
func TestAgentDrainsOnSIGTERM(t *testing.T) {
	orch := agenttest.New(t)
	res := agentRun(t, map[string]string{"HOME": t.TempDir()}, "--server", orch.URL(), "--token", "kat_x")
	c := orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	// The command has caught SIGTERM since before it connected.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := c.WaitClosed(t); code != 1000 {
		t.Fatalf("closed with %d", code)
	}
	if code, stderr := waitAgent(t, res); code != ExitOK || !strings.Contains(stderr, "draining") {
		t.Fatalf("code %d, stderr:\n%s", code, stderr)
	}
}

func TestAgentRefusedTokenExitsOne(t *testing.T) {
	orch := agenttest.New(t)
	res := agentRun(t, map[string]string{"HOME": t.TempDir()}, "--server", orch.URL(), "--token", "kat_bad")
	c := orch.Accept(t)
	c.Expect(t, proto.TypeAuth)
	c.Close(&proto.Error{Code: proto.ErrUnauthorized, Message: "unknown token"}, proto.CloseAuthFailed, "auth failed")
	code, stderr := waitAgent(t, res)
	if code != ExitFailure || !strings.Contains(stderr, "kiln: agent: the orchestrator refused the agent token") {
		t.Fatalf("code %d, stderr:\n%s", code, stderr)
	}
}

// B244: the agent's JSON log, which the server relays into its own, writes
// durations as text (retry_in=735ms), never as nanoseconds.
func TestAgentJSONLogWritesDurationsAsText(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: durationText}))
	log.Warn("no connection to the orchestrator", "retry_in", 735*time.Millisecond, "attempts", 3)
	if !strings.Contains(buf.String(), `"retry_in":"735ms"`) || !strings.Contains(buf.String(), `"attempts":3`) {
		t.Fatalf("log line: %s", buf.String())
	}
}
