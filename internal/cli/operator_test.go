package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/executor"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) {
	// `kiln agent` run in-process starts step supervisors (one at start,
	// to learn whether steps can be isolated): this test binary.
	executor.MaybeRunShim()
	goleak.VerifyTestMain(storetest.M(m))
}

// opHarness is an API server for the operator commands.
type opHarness struct {
	*apitest.Harness
	vars map[string]string
}

func newOp(t *testing.T) *opHarness {
	t.Helper()
	h := apitest.New(t, storetest.New(t, storetest.ReleaseWith(engine.Release)))
	return &opHarness{Harness: h, vars: map[string]string{EnvServer: h.URL, EnvToken: h.Token}}
}

// kiln runs a command against the harness's server.
func (o *opHarness) kiln(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, o.vars, args...)
}

// ok runs a command that must succeed and returns its stdout.
func (o *opHarness) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := o.kiln(t, args...)
	if code != ExitOK {
		t.Fatalf("kiln %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// ok2 runs a command that must succeed and returns its stdout and stderr.
func (o *opHarness) ok2(t *testing.T, args ...string) (string, string) {
	t.Helper()
	code, out, errOut := o.kiln(t, args...)
	if code != ExitOK {
		t.Fatalf("kiln %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out, errOut
}

// fails runs a command that must exit with code and say want on stderr.
func (o *opHarness) fails(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	got, out, errOut := o.kiln(t, args...)
	if got != code || !strings.Contains(errOut, want) || !strings.Contains(errOut, "kiln: ") {
		t.Fatalf("kiln %s: exit %d (want %d)\nstdout:\n%s\nstderr:\n%s\nwant stderr to mention %q",
			strings.Join(args, " "), got, code, out, errOut, want)
	}
}

func contains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestOperatorCommandsFindServerAndToken(t *testing.T) {
	o := newOp(t)
	code, _, errOut := runCLI(t, map[string]string{EnvServer: o.URL}, "runs", "list")
	if code != ExitUsage || !strings.Contains(errOut, "no admin token") {
		t.Fatalf("no token: %d %s", code, errOut)
	}
	code, _, errOut = runCLI(t, map[string]string{EnvServer: o.URL, EnvToken: "kadm_wrong"}, "runs", "list")
	if code != ExitFailure || errOut != "kiln: invalid or expired token\n" {
		t.Fatalf("bad token: %d %q", code, errOut)
	}
	// Flags win over the environment.
	out := o.ok(t, "runs", "list", "--server", o.URL, "--token", o.Token)
	contains(t, out, "RUN", "STATUS")
	// A token file named by KILN_TOKEN_FILE.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(o.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, map[string]string{EnvServer: o.URL, EnvTokenFile: file}, "queue")
	if code != ExitOK {
		t.Fatalf("token file: %d %s", code, errOut)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := "http://" + l.Addr().String()
	l.Close()
	code, _, errOut = runCLI(t, map[string]string{EnvServer: gone, EnvToken: "x"}, "queue")
	if code != ExitFailure || !strings.Contains(errOut, "cannot reach the kiln server") {
		t.Fatalf("no server: %d %s", code, errOut)
	}
	code, _, errOut = runCLI(t, map[string]string{EnvServer: "ftp://x", EnvToken: "x"}, "queue")
	if code != ExitUsage {
		t.Fatalf("bad server URL: %d %s", code, errOut)
	}
}

// Proves B60 (docs/behaviours.md).
func TestRunsListShowCancel(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	out := o.ok(t, "runs", "list")
	contains(t, out, "RUN", "#1", "pending", "ci", "dispatch")
	var list api.RunList
	if err := json.Unmarshal([]byte(o.ok(t, "runs", "list", "--json")), &list); err != nil || len(list.Runs) != 1 {
		t.Fatalf("--json: %v %+v", err, list)
	}
	o.fails(t, ExitFailure, `status "done" is not a run status`, "runs", "list", "--status", "done")

	out = o.ok(t, "runs", "show", "1")
	contains(t, out, "run #1  pending  ci (.kiln/workflows/ci.yml)", "build", "queued", "waiting", "0 compile", "1 vet",
		"test", "waiting for needs: build")
	var run api.Run
	if err := json.Unmarshal([]byte(o.ok(t, "runs", "show", "#1", "--json")), &run); err != nil || len(run.Jobs) != 2 {
		t.Fatalf("show --json: %v", err)
	}
	o.fails(t, ExitFailure, "kiln: there is no run #9", "runs", "show", "9")
	o.fails(t, ExitUsage, "accepts 1 arg", "runs", "show")

	o.Claim(t, "agent-1")
	contains(t, o.ok(t, "runs", "cancel", "1", "--reason", "wrong branch"), "run #1 cancelling (graceful")
	contains(t, o.ok(t, "runs", "cancel", "1"), "run #1 cancelled (forced")
	o.fails(t, ExitFailure, "already finished", "runs", "cancel", "1")
	if r, _ := o.Client.GetRun(t.Context(), "1"); r.CancelReason != "wrong branch" {
		t.Fatalf("cancel reason %q", r.CancelReason)
	}
}

func TestRunsRerunWaits(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	o.Finish(t, o.Claim(t, "agent-1"), kiln.JobSuccess)
	o.Finish(t, o.Claim(t, "agent-1"), kiln.JobFailed)
	o.AutoAgent(t, func(string) kiln.JobStatus { return kiln.JobSuccess })
	code, out, errOut := o.kiln(t, "runs", "rerun", "1", "--failed", "--wait")
	if code != ExitOK || out != "#2\n" {
		t.Fatalf("rerun --wait: %d %q %s", code, out, errOut)
	}
	contains(t, errOut, "run #2 reruns 1 (failed jobs only)", "run #2 success")
	o.fails(t, ExitFailure, "no failed or cancelled jobs", "runs", "rerun", "2", "--failed")
}

func TestLogsPrintAndFollow(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	l := o.Claim(t, "agent-1")
	o.Log(t, l, 0, 1, "compiling", "done")
	o.Log(t, l, 1, 1, "vetting")
	out := o.ok(t, "logs", "1")
	if out != "build/compile | compiling\nbuild/compile | done\nbuild/vet | vetting\n" {
		t.Fatalf("logs:\n%s", out)
	}
	if out := o.ok(t, "logs", "1", "build", "--step", "1"); out != "vetting\n" {
		t.Fatalf("one step: %q", out)
	}
	var line api.LogLine
	if err := json.Unmarshal([]byte(strings.SplitN(o.ok(t, "logs", "1", "--json"), "\n", 2)[0]), &line); err != nil || line.Text != "compiling" {
		t.Fatalf("--json: %v %+v", err, line)
	}
	o.fails(t, ExitUsage, "--after needs JOB and --step", "logs", "1", "--after", "3")
	o.fails(t, ExitFailure, `no job "deploy"`, "logs", "1", "deploy")

	o.Finish(t, l, kiln.JobSuccess)
	code, out, errOut := o.kiln(t, "logs", "1", "build", "--follow")
	if code != ExitOK || !strings.Contains(out, "build/vet | vetting") || !strings.Contains(errOut, "job build success") {
		t.Fatalf("follow a finished job: %d\n%s\n%s", code, out, errOut)
	}
	o.Finish(t, o.Claim(t, "agent-1"), kiln.JobFailed)
	code, _, errOut = o.kiln(t, "logs", "1", "test", "-f")
	if code != ExitFailure || !strings.Contains(errOut, "job test failed") {
		t.Fatalf("follow a failed job: %d %s", code, errOut)
	}
}

// writeCounter counts the writes made to it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return w.Buffer.Write(p) }

// `kiln logs -f` prints what arrived together in one write: a job's 5,000
// lines, all there when it connects, take a handful of writes, not one each.
func TestLogsFollowWritesPerBurst(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	l := o.Claim(t, "agent-1")
	texts := make([]string, 5000)
	for i := range texts {
		texts[i] = fmt.Sprintf("line %d", i+1)
	}
	o.Log(t, l, 0, 1, texts...)
	o.Finish(t, l, kiln.JobSuccess)
	var out writeCounter
	var errb bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return o.vars[k] }}
	if code := run(context.Background(), []string{"logs", "1", "build", "-f"}, e); code != ExitOK {
		t.Fatalf("logs -f: %d %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 5000 || !strings.HasSuffix(out.String(), "line 5000\n") {
		t.Fatalf("%d lines printed", n)
	}
	t.Logf("5,000 lines in %d writes", out.writes)
	if out.writes > 100 {
		t.Fatalf("5,000 lines in %d writes", out.writes)
	}
}

// A step's log longer than one read is printed whole, page after page,
// when one step is asked for; a read of several steps that fills its limit
// says on stderr where the log goes on, instead of stopping silently.
// Proves B130.
func TestLogsPageThroughOrSaySo(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	l := o.Claim(t, "agent-1")
	const n = 10050
	for start := 1; start <= n; start += 1000 {
		texts := make([]string, 0, 1000)
		for i := start; i < start+1000 && i <= n; i++ {
			texts = append(texts, fmt.Sprint("line ", i))
		}
		o.Log(t, l, 0, uint64(start), texts...)
	}
	out, errOut := o.ok2(t, "logs", "1", "build", "--step", "0")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n || lines[0] != "line 1" || lines[n-1] != fmt.Sprint("line ", n) || errOut != "" {
		t.Fatalf("one step: %d lines (%q … %q), stderr %q", len(lines), lines[0], lines[len(lines)-1], errOut)
	}
	out, errOut = o.ok2(t, "logs", "1")
	if got := strings.Count(out, "\n"); got != 10000 {
		t.Fatalf("several steps: %d lines", got)
	}
	contains(t, errOut, "stopped after 10000 lines", "build step 0 line 10000", "--step")
	if _, errOut := o.ok2(t, "logs", "1", "--limit", "20000"); errOut != "" {
		t.Fatalf("a read within its limit said %q", errOut)
	}
}

func TestAgentsListAndDrain(t *testing.T) {
	o := newOp(t)
	o.Fleet.Connect(api.AgentView{ID: "box-1", Labels: []string{"linux", "amd64"}, MaxJobs: 4, ActiveJobs: 1, Healthy: true, Hostname: "box"})
	out := o.ok(t, "agents", "list")
	contains(t, out, "AGENT", "box-1", "connected", "amd64,linux", "1/4", "box")
	contains(t, o.ok(t, "agents", "drain", "box-1"), "agent box-1 is draining")
	contains(t, o.ok(t, "agents", "list", "--json"), `"draining": true`)
	o.fails(t, ExitFailure, "not connected", "agents", "drain", "ghost")
}

func TestTokensCreatePrintsOnlyTheSecret(t *testing.T) {
	o := newOp(t)
	code, out, errOut := o.kiln(t, "tokens", "create", "--name", "gpu", "--label", "linux,gpu", "--mandatory", "gpu", "--ttl", "2h", "--single-use")
	if code != ExitOK {
		t.Fatalf("create: %d %s", code, errOut)
	}
	secret := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(secret, store.AgentTokenPrefix) || strings.ContainsAny(secret, " \n\t") {
		t.Fatalf("stdout is not just the secret: %q", out)
	}
	contains(t, errOut, "created agent token", "labels gpu,linux", "mandatory gpu", "expires", "single use", "shown only once")
	if strings.Contains(errOut, secret) {
		t.Fatal("the secret went to stderr too")
	}
	if _, err := o.DB.Auth().AuthenticateAgent(t.Context(), secret); err != nil {
		t.Fatalf("the printed secret does not work: %v", err)
	}
	list := o.ok(t, "tokens", "list")
	contains(t, list, "gpu,linux single-use", "consumed")
	if strings.Contains(list, secret) {
		t.Fatal("list shows the secret")
	}
	var tks []api.AgentToken
	if err := json.Unmarshal([]byte(o.ok(t, "tokens", "list", "--json")), &tks); err != nil || len(tks) != 1 {
		t.Fatalf("list --json: %v", err)
	}
	contains(t, o.ok(t, "tokens", "revoke", tks[0].ID), "revoked agent token", tks[0].ID, `"gpu"`)
	o.fails(t, ExitFailure, "no agent token", "tokens", "revoke", "nope")
	o.fails(t, ExitFailure, `mandatory label "gpu" is not among`, "tokens", "create", "--label", "linux", "--mandatory", "gpu")
	o.fails(t, ExitUsage, "invalid argument", "tokens", "create", "--ttl", "soon")
	// kiln agent spells it --labels; so may this.
	if _, errOut := o.ok2(t, "tokens", "create", "--labels", "linux,docker"); !strings.Contains(errOut, "labels docker,linux") {
		t.Fatalf("--labels did not scope the token:\n%s", errOut)
	}
}

func TestSourcesAddListShowRemoveHook(t *testing.T) {
	o := newOp(t)
	secretFile := filepath.Join(t.TempDir(), "hook-secret")
	if err := os.WriteFile(secretFile, []byte("s3cret-hook\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.vars["GH_TOKEN"] = "ghp_s3cret"
	out := o.ok(t, "sources", "add", "gh", "--kind", "github", "--token-env", "GH_TOKEN", "--secret-file", secretFile)
	contains(t, out, "added github source gh", "webhook URL: "+o.URL+"/webhook/github/gh")
	o.fails(t, ExitUsage, "that environment variable is empty", "sources", "add", "x", "--kind", "github", "--token-env", "NOPE", "--secret-file", secretFile)
	o.fails(t, ExitUsage, "--path is not a setting of github sources", "sources", "add", "x", "--kind", "github", "--path", "/x")
	o.fails(t, ExitUsage, "--kind must be", "sources", "add", "x")
	o.fails(t, ExitFailure, "webhook secret", "sources", "add", "x", "--kind", "github", "--token-env", "GH_TOKEN")
	o.fails(t, ExitFailure, "already exists", "sources", "add", "gh", "--kind", "github", "--token-env", "GH_TOKEN", "--secret-file", secretFile)

	repo := t.TempDir()
	apitest.Git(t, "", "init", "-q", "--bare", repo)
	contains(t, o.ok(t, "sources", "add", "bare", "--kind", "local", "--path", repo), "kiln sources hook bare --install")
	list := o.ok(t, "sources", "list")
	contains(t, list, "NAME", "gh", "github", "https://api.github.com", "bare", repo)
	show := o.ok(t, "sources", "show", "gh")
	contains(t, show, "github source gh", forge.Redaction)
	for _, s := range []string{list, show, o.ok(t, "sources", "list", "--json")} {
		if strings.Contains(s, "ghp_s3cret") || strings.Contains(s, "s3cret-hook") {
			t.Fatalf("a secret is shown:\n%s", s)
		}
	}

	hook := o.ok(t, "sources", "hook", "bare")
	contains(t, hook, "#!/bin/sh", "export KILN_SERVER='"+o.URL+"'", `trigger "$source" --ref "$ref"`)
	tokenFile := filepath.Join(t.TempDir(), "push-token")
	os.WriteFile(tokenFile, []byte(o.Token), 0o600)
	o.vars[EnvTokenFile] = tokenFile
	delete(o.vars, EnvToken)
	out = o.ok(t, "sources", "hook", "bare", "--install")
	installed := filepath.Join(repo, "hooks", "post-receive")
	contains(t, out, "installed "+installed)
	b, err := os.ReadFile(installed)
	if err != nil || !strings.Contains(string(b), "export KILN_TOKEN_FILE='"+tokenFile+"'") || strings.Contains(string(b), o.Token) {
		t.Fatalf("installed hook:\n%s", b)
	}
	o.fails(t, ExitFailure, "hooks are for local sources", "sources", "hook", "gh")

	contains(t, o.ok(t, "sources", "remove", "gh"), "removed source gh")
	o.fails(t, ExitFailure, `no source named "gh"`, "sources", "remove", "gh")
}

func TestDispatchAndTrigger(t *testing.T) {
	o := newOp(t)
	code, out, errOut := o.kiln(t, "dispatch", "ci.yml", "--source", apitest.SourceName, "--input", "target=production", "--ref", "main")
	if code != ExitOK || out != "#1\n" || !strings.Contains(errOut, "started run #1") {
		t.Fatalf("dispatch: %d %q %s", code, out, errOut)
	}
	if r, _ := o.Client.GetRun(t.Context(), "1"); !strings.Contains(string(r.Inputs), "production") {
		t.Fatalf("inputs %s", r.Inputs)
	}
	o.fails(t, ExitFailure, "no run started", "dispatch", "nope.yml", "--source", apitest.SourceName)
	o.fails(t, ExitFailure, "no run started", "dispatch", "ci.yml", "--source", apitest.SourceName, "--input", "target=moon")
	o.fails(t, ExitUsage, "--source", "dispatch", "ci.yml")
	o.fails(t, ExitUsage, "not name=value", "dispatch", "ci.yml", "--source", "app", "--input", "oops")
	o.fails(t, ExitFailure, `no source named "ghost"`, "dispatch", "ci.yml", "--source", "ghost")

	o.AutoAgent(t, func(job string) kiln.JobStatus {
		if job == "test" {
			return kiln.JobFailed
		}
		return kiln.JobSuccess
	})
	code, out, errOut = o.kiln(t, "dispatch", "ci", "--source", apitest.SourceName, "--wait")
	if code != ExitFailure || !strings.HasSuffix(out, "\n") || !strings.Contains(errOut, "failed after") {
		t.Fatalf("dispatch --wait of a failing run: %d %q %s", code, out, errOut)
	}

	sha := o.Commit(t, "README", "hello\n")
	code, out, errOut = o.kiln(t, "trigger", apitest.SourceName, "--ref", "main", "--sha", sha)
	if code != ExitOK || !strings.HasPrefix(out, "#") {
		t.Fatalf("trigger: %d %q %s", code, out, errOut)
	}
	apitest.Git(t, o.Repo, "branch", "feature")
	code, out, errOut = o.kiln(t, "trigger", apitest.SourceName, "--ref", "feature")
	if code != ExitOK || out != "" || !strings.Contains(errOut, "no run started") {
		t.Fatalf("trigger of a branch nothing runs on: %d %q %s", code, out, errOut)
	}
	o.fails(t, ExitFailure, "not a commit id", "trigger", apitest.SourceName, "--sha", "xyz")
}

func TestQueueAndEvents(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	out := o.ok(t, "queue")
	contains(t, out, "JOB", "build", "#1", "ci", "linux", "waiting for an agent", "jobs: 1 pending, 1 queued")
	var q api.Queue
	if err := json.Unmarshal([]byte(o.ok(t, "queue", "--json")), &q); err != nil || len(q.Waiting) != 1 {
		t.Fatalf("queue --json: %v", err)
	}
	out = o.ok(t, "events")
	contains(t, out, "ID", "app", "dispatch", "processed")
	contains(t, o.ok(t, "events", "1"), "event 1  processed", "runs #1", `"workflow": "ci.yml"`)
	contains(t, o.ok(t, "events", "--status", "processed", "--json"), `"events"`)
	o.fails(t, ExitUsage, "events are numbered", "events", "abc")
	o.fails(t, ExitFailure, "no event 7", "events", "7")
}
