package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/waittest"
)

// cliResult is what one kiln command printed and how it exited.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// kilnCmd runs the kiln binary with env (on top of baseEnv) in dir.
func kilnCmd(t testing.TB, dir string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kilnBin, args...)
	cmd.Dir = dir
	cmd.Env = append(baseEnv(t), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("kiln %s: %v", strings.Join(args, " "), err)
	}
	if strings.Contains(res.stderr, "WARNING: DATA RACE") {
		t.Errorf("kiln %s reported a data race:\n%s", strings.Join(args, " "), res.stderr)
	}
	return res
}

// operator runs kiln commands against a server the way an operator does:
// KILN_SERVER and KILN_TOKEN in the environment.
type operator struct {
	t   testing.TB
	env []string
	dir string
}

func newOperator(t testing.TB, url, token string) *operator {
	return &operator{t: t, env: []string{"KILN_SERVER=" + url, "KILN_TOKEN=" + token}, dir: t.TempDir()}
}

// run runs a command and fails the test unless it exits with code.
func (o *operator) run(code int, args ...string) cliResult {
	o.t.Helper()
	res := kilnCmd(o.t, o.dir, o.env, args...)
	if res.code != code {
		o.t.Fatalf("kiln %s: want exit %d, got %s", strings.Join(args, " "), code, res)
	}
	return res
}

// The server process prints an admin token on its first start only; the
// token keeps working after a restart, which prints none.
// Proves B69 (docs/behaviours.md).
func TestServerPrintsTheAdminTokenOnceOnItsFirstStart(t *testing.T) {
	t.Parallel()
	srv := startServerProc(t, t.TempDir(), 0)
	token := srv.adminToken(t)
	if n := strings.Count(strings.Join(srv.stdout.lines(), "\n"), token); n != 1 {
		t.Fatalf("the token was printed %d times", n)
	}
	o := newOperator(t, srv.URL, token)
	o.run(0, "runs", "list")
	srv.signal(t, syscall.SIGTERM)
	if code := srv.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("kiln server exited %d on SIGTERM", code)
	}
	srv.restart(t)
	if tok := printedToken(srv.stdout.lines()); tok != "" {
		t.Fatalf("the restart printed an admin token again: %s", tok)
	}
	o.run(0, "runs", "list")
	res := newOperator(t, srv.URL, "kadm_wrong").run(1, "runs", "list")
	if !strings.Contains(res.stderr, "kiln: ") {
		t.Fatalf("a wrong token: %s", res)
	}
	res = kilnCmd(t, t.TempDir(), []string{"KILN_SERVER=" + srv.URL}, "runs", "list")
	if res.code != 2 || !strings.Contains(res.stderr, "no admin token") {
		t.Fatalf("no token: %s", res)
	}
}

// Every operator command, run as the real kiln binary against a real
// server process and a real agent: sources, tokens (the secret alone on
// stdout, and it starts an agent), agents, trigger, logs --follow while
// the job runs, runs list/show/rerun/cancel, dispatch, events, queue,
// drain and revoke.
// Proves B60 (docs/behaviours.md).
func TestOperatorCommandsAgainstARealServer(t *testing.T) {
	t.Parallel()
	srv := startServerProc(t, t.TempDir(), 0)
	o := newOperator(t, srv.URL, srv.adminToken(t))
	gate := filepath.Join(t.TempDir(), "gate")
	repo := newRepo(t, map[string]string{
		workflow("ci"): fmt.Sprintf(`on:
  push:
    branches: [main]
jobs:
  build:
    runs_on: [box]
    steps:
      - name: compile
        run: |
          echo compiling
          while [ ! -f %s ]; do sleep 0.02; done
          echo compiled
`, gate),
		workflow("deploy"): `on:
  dispatch:
    inputs:
      target: {type: choice, options: [staging, production], default: staging}
jobs:
  deploy:
    runs_on: [box]
    steps:
      - run: echo deploying to ${{ inputs.target }}
`,
	})

	res := o.run(0, "sources", "add", "app", "--kind", "local", "--path", repo.dir)
	if !strings.Contains(res.stdout, "added local source app") {
		t.Fatalf("sources add: %s", res)
	}
	if res := o.run(0, "sources", "list"); !strings.Contains(res.stdout, repo.dir) {
		t.Fatalf("sources list: %s", res)
	}
	o.run(0, "sources", "show", "app")

	// tokens create prints the secret alone on stdout.
	res = o.run(0, "tokens", "create", "--name", "box", "--label", "box")
	secret := strings.TrimSpace(res.stdout)
	if strings.Count(res.stdout, "\n") != 1 || !strings.HasPrefix(secret, "kat_") || !strings.Contains(res.stderr, "shown only once") {
		t.Fatalf("tokens create: %s", res)
	}
	if res := o.run(0, "tokens", "list"); strings.Contains(res.stdout, secret) || !strings.Contains(res.stdout, "box") {
		t.Fatalf("tokens list shows the secret or misses the token: %s", res)
	}
	var tokens []api.AgentToken
	decode(t, o.run(0, "tokens", "list", "--json").stdout, &tokens)
	if len(tokens) != 1 {
		t.Fatalf("tokens: %+v", tokens)
	}
	agent := startAgent(t, srv.URL, secret, agentOpts{id: "box-1", labels: "box"})
	c := procClient(t, srv) // to wait on; every check below is the CLI's
	waitConnected(t, c, "box-1")
	if res := o.run(0, "agents", "list"); !strings.Contains(res.stdout, "box-1") || !strings.Contains(res.stdout, "connected") {
		t.Fatalf("agents list: %s", res)
	}

	// A push, its log followed live.
	res = o.run(0, "trigger", "app", "--ref", "main")
	if strings.TrimSpace(res.stdout) != "#1" {
		t.Fatalf("trigger: %s", res)
	}
	follow := startProc(t, "kiln-logs-follow", append(baseEnv(t), o.env...), "logs", "1", "build", "--follow")
	waittest.UntilState(t, 30*time.Second, "logs --follow to print the first line", func() (bool, string) {
		return strings.Contains(follow.log.String(), "compiling"), follow.log.String()
	})
	if strings.Contains(follow.log.String(), "compiled") || follow.exited() {
		t.Fatalf("logs --follow went ahead of the job: %s", follow.log.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := follow.wait(t, time.Minute); code != 0 {
		t.Fatalf("logs --follow exited %d: %s", code, follow.log.String())
	}
	if out := follow.log.String(); !strings.Contains(out, "build/compile | compiled") || !strings.Contains(out, "run #1 job build success") {
		t.Fatalf("logs --follow printed:\n%s", out)
	}

	if res := o.run(0, "runs", "list"); !strings.Contains(res.stdout, "#1") || !strings.Contains(res.stdout, "success") {
		t.Fatalf("runs list: %s", res)
	}
	if res := o.run(0, "runs", "show", "1"); !strings.Contains(res.stdout, "compile") || !strings.Contains(res.stdout, "box-1") {
		t.Fatalf("runs show: %s", res)
	}
	var shown api.Run
	decode(t, o.run(0, "runs", "show", "1", "--json").stdout, &shown)
	if shown.Number != 1 || shown.Status != kiln.RunSuccess || len(shown.Jobs) != 1 || shown.Trigger != kiln.EventPush {
		t.Fatalf("runs show --json: %+v", shown)
	}
	if res := o.run(0, "logs", "1"); !strings.Contains(res.stdout, "build/compile | compiling") {
		t.Fatalf("logs: %s", res)
	}
	res = o.run(0, "runs", "rerun", "1", "--wait")
	if strings.TrimSpace(res.stdout) != "#2" || !strings.Contains(res.stderr, "run #2 success") {
		t.Fatalf("runs rerun --wait: %s", res)
	}
	if res := o.run(1, "runs", "cancel", "1"); !strings.Contains(res.stderr, "already finished") {
		t.Fatalf("cancel of a finished run: %s", res)
	}

	// Dispatch: a bad input starts nothing (exit 1, the reason), a good one runs.
	if res := o.run(1, "dispatch", "deploy.yml", "--source", "app", "--input", "target=moon"); !strings.Contains(res.stderr, "moon") {
		t.Fatalf("dispatch with a bad input: %s", res)
	}
	res = o.run(0, "dispatch", "deploy.yml", "--source", "app", "--input", "target=production", "--wait")
	if strings.TrimSpace(res.stdout) != "#3" {
		t.Fatalf("dispatch --wait: %s", res)
	}
	if res := o.run(0, "logs", "3", "deploy", "--step", "0"); strings.TrimSpace(res.stdout) != "deploying to production" {
		t.Fatalf("logs of the dispatch: %s", res)
	}

	if res := o.run(0, "events"); !strings.Contains(res.stdout, "trigger") || !strings.Contains(res.stdout, "dispatch") || !strings.Contains(res.stdout, "failed") {
		t.Fatalf("events: %s", res)
	}
	if res := o.run(0, "events", "1"); !strings.Contains(res.stdout, "processed") || !strings.Contains(res.stdout, "runs #1") {
		t.Fatalf("events 1: %s", res)
	}
	if res := o.run(0, "queue"); !strings.Contains(res.stdout, "nothing unfinished") {
		t.Fatalf("queue: %s", res)
	}

	// Drain: the agent finishes what it runs, takes nothing new and stops
	// once idle; a job triggered meanwhile waits in the queue, saying why.
	if res := o.run(0, "agents", "drain", "box-1"); !strings.Contains(res.stdout, "draining") {
		t.Fatalf("agents drain: %s", res)
	}
	if code := agent.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the drained agent exited %d", code)
	}
	o.run(0, "trigger", "app", "--ref", "main")
	waitJob(t, c, "4", "build", 30*time.Second, "waiting with a reason", func(j api.Job) bool { return j.PendingReason != "" })
	if res := o.run(0, "queue"); !strings.Contains(res.stdout, "build") || !strings.Contains(res.stdout, "#4") || !strings.Contains(res.stdout, "box") {
		t.Fatalf("queue: %s", res)
	}
	if res := o.run(0, "agents", "list"); !strings.Contains(res.stdout, "disconnected") {
		t.Fatalf("agents list after the drain: %s", res)
	}
	// Another agent with the same token takes it; revoking the token
	// disconnects that agent, which stops for good.
	agent = startAgent(t, srv.URL, secret, agentOpts{id: "box-2", labels: "box"})
	waitRun(t, c, "4", time.Minute)
	if res := o.run(0, "runs", "show", "4"); !strings.Contains(res.stdout, "run #4  success") || !strings.Contains(res.stdout, "box-2") {
		t.Fatalf("the waiting run after a new agent came: %s", res)
	}
	if res := o.run(0, "tokens", "revoke", tokens[0].ID); !strings.Contains(res.stdout, "revoked") {
		t.Fatalf("tokens revoke: %s", res)
	}
	if code := agent.wait(t, 30*time.Second); code != 1 {
		t.Fatalf("the agent of a revoked token exited %d", code)
	}
	// With no agent, a triggered run waits; cancelling it ends it at once.
	o.run(0, "trigger", "app", "--ref", "main")
	res = o.run(0, "runs", "cancel", "5")
	if !strings.Contains(res.stdout, "run #5 cancelled") {
		t.Fatalf("cancel of a queued run: %s", res)
	}
	o.run(0, "sources", "remove", "app")
	if res := o.run(1, "sources", "show", "app"); !strings.Contains(res.stderr, "app") {
		t.Fatalf("show of a removed source: %s", res)
	}
}

func decode(t testing.TB, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
}

// A local source with kiln's post-receive hook installed: every push runs
// `kiln trigger` with the pushed ref and commits, so a push to the
// repository starts a run at the pushed commit, and deleting a branch
// starts nothing. The hook reads the admin token from KILN_TOKEN_FILE.
// Proves B5 (docs/behaviours.md).
func TestPostReceiveHookTriggersRunsOnPush(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	bare := filepath.Join(t.TempDir(), "app.git")
	apitest.Git(t, "", "init", "-q", "--bare", "-b", "main", bare)
	work := newRepo(t, map[string]string{workflow("ci"): `on:
  push:
    branches: [main]
jobs:
  test:
    steps:
      - run: echo "testing $(git rev-parse HEAD)"
`})
	apitest.Git(t, work.dir, "remote", "add", "origin", bare)
	apitest.Git(t, work.dir, "push", "-q", "origin", "main")

	tokenFile := filepath.Join(t.TempDir(), "push-token")
	if err := os.WriteFile(tokenFile, []byte(s.AdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"KILN_SERVER=" + s.URL, "KILN_TOKEN_FILE=" + tokenFile}
	if res := kilnCmd(t, t.TempDir(), env, "sources", "add", "app", "--kind", "local", "--path", bare); res.code != 0 {
		t.Fatalf("sources add: %s", res)
	}
	if res := kilnCmd(t, t.TempDir(), env, "sources", "hook", "app"); res.code != 0 || !strings.Contains(res.stdout, "trigger") || strings.Contains(res.stdout, s.AdminToken) {
		t.Fatalf("sources hook: %s", res)
	}
	res := kilnCmd(t, t.TempDir(), env, "sources", "hook", "app", "--install")
	if res.code != 0 || !strings.Contains(res.stdout, "installed "+filepath.Join(bare, "hooks", "post-receive")) {
		t.Fatalf("sources hook --install: %s", res)
	}
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "tester"})

	// kiln trigger by hand, waiting for the run.
	if res := kilnCmd(t, t.TempDir(), env, "trigger", "app", "--wait"); res.code != 0 || strings.TrimSpace(res.stdout) != "#1" {
		t.Fatalf("kiln trigger --wait: %s", res)
	}
	// A push runs the hook, which triggers a run at the pushed commit.
	sha := work.commit(t, "change", map[string]string{"main.go": "package main\n"})
	apitest.Git(t, work.dir, "push", "-q", "origin", "main")
	var run api.Run
	waittest.UntilState(t, 30*time.Second, "the push to start a run", func() (bool, string) {
		l, err := s.Client.ListRuns(bg, api.RunFilter{})
		if err != nil || len(l.Runs) < 2 {
			return false, fmt.Sprint(l.Runs, err)
		}
		run = l.Runs[0]
		return true, ""
	})
	run = waitRun(t, s.Client, run.ID, time.Minute)
	if run.SHA != sha || run.Ref != "refs/heads/main" || run.Status != kiln.RunSuccess {
		t.Fatalf("the pushed run: %s at %s %s, want %s", describeRun(run), run.Ref, run.SHA, sha)
	}
	if said := texts(logLines(t, s.Client, run.ID, "test", intp(0))); len(said) != 1 || said[0] != "testing "+sha {
		t.Fatalf("the step checked out %q", said)
	}
	// A new branch (no workflow runs on it) and its deletion start nothing.
	apitest.Git(t, work.dir, "push", "-q", "origin", "main:topic")
	apitest.Git(t, work.dir, "push", "-q", "origin", ":topic")
	events, err := s.Client.Events(bg, api.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := runCount(t, s.Client); n != 2 || len(events.Events) != 3 {
		t.Fatalf("after a branch push and delete: %d runs, %d events", n, len(events.Events))
	}
}

// kiln run runs a working tree's workflows through the real orchestrator
// and an agent, uncommitted changes included: exit 0 when they pass, 1
// when one fails, 2 when nothing matches or on a usage error.
// Proves B70 (docs/behaviours.md).
func TestKilnRunExitCodes(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, map[string]string{workflow("ci"): `on:
  push:
jobs:
  check:
    steps:
      - run: echo "checking"; test ! -f broken
`})
	res := kilnCmd(t, repo.dir, nil, "run")
	if res.code != 0 || !strings.Contains(res.stdout+res.stderr, "checking") {
		t.Fatalf("kiln run of a passing pipeline: %s", res)
	}
	if err := os.WriteFile(filepath.Join(repo.dir, "broken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := kilnCmd(t, repo.dir, nil, "run"); res.code != 1 {
		t.Fatalf("kiln run of a failing pipeline (an uncommitted file breaks it): %s", res)
	}
	if res := kilnCmd(t, repo.dir, nil, "run", "--event", "tag", "--tag", "v1"); res.code != 2 {
		t.Fatalf("kiln run with no matching workflow: %s", res)
	}
	if res := kilnCmd(t, repo.dir, nil, "run", "--input", "x=1"); res.code != 2 {
		t.Fatalf("kiln run with a usage error: %s", res)
	}
	if res := kilnCmd(t, t.TempDir(), nil, "run"); res.code != 2 {
		t.Fatalf("kiln run outside a repository: %s", res)
	}
}

// kiln lint checks a repository's workflows with the server's own code:
// exit 0 when they are valid, 1 with file:line:col for each problem, 2
// when there is nothing to check; --explain says which workflows GitHub's
// push payload would start.
// Proves B71 (docs/behaviours.md).
func TestKilnLint(t *testing.T) {
	t.Parallel()
	repo := newRepo(t, ghWorkflows("/nonexistent/gate"))
	if res := kilnCmd(t, repo.dir, nil, "lint"); res.code != 0 || !strings.Contains(res.stdout, "ci.yml: ok") {
		t.Fatalf("kiln lint of valid workflows: %s", res)
	}
	payload, err := filepath.Abs(filepath.Join("..", "trigger", "testdata", "github", "push.with-new-branch.payload.json"))
	if err != nil {
		t.Fatal(err)
	}
	res := kilnCmd(t, repo.dir, nil, "lint", "--explain", payload, "--event", "push")
	if res.code != 0 || !strings.Contains(res.stdout, "ci") || !strings.Contains(res.stdout, "master") {
		t.Fatalf("kiln lint --explain: %s", res)
	}
	repo.commit(t, "break", map[string]string{workflow("bad"): "on: push\njobs:\n  a:\n    needs: [b]\n    steps:\n      - run: x\n"})
	res = kilnCmd(t, repo.dir, nil, "lint")
	if res.code != 1 || !strings.Contains(res.stdout+res.stderr, ".kiln/workflows/bad.yml:4:") {
		t.Fatalf("kiln lint of a broken workflow: %s", res)
	}
	if res := kilnCmd(t, t.TempDir(), nil, "lint"); res.code != 2 {
		t.Fatalf("kiln lint with no workflows: %s", res)
	}
}
