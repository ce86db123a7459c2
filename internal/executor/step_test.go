package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

const (
	success   = kiln.StepSuccess
	failed    = kiln.StepFailed
	skipped   = kiln.StepSkipped
	cancelled = kiln.StepCancelled
)

func TestEnvAndOutputsPassBetweenSteps(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Name: "set", Run: `
echo "FOO=bar baz" >> "$KILN_ENV"
printf 'MULTI<<EOF\nline one\nline two\nEOF\n' >> "$KILN_ENV"
echo "version=1.2.3" >> "$KILN_OUTPUT"
echo "shared=first" >> "$KILN_OUTPUT"
printf 'notes<<END\na\nb\nEND\n' >> "$KILN_OUTPUT"
`},
		{Name: "use", Run: `
test "$FOO" = "bar baz"
test "$MULTI" = "$(printf 'line one\nline two')"
echo "got $FOO"
echo "shared=second" >> "$KILN_OUTPUT"
`},
	}})
	wantStatuses(t, res, success, success)
	if res.Status != kiln.JobSuccess {
		t.Fatalf("job = %s (%s)", res.Status, res.Error)
	}
	want := map[string]string{"version": "1.2.3", "shared": "second", "notes": "a\nb"}
	for k, v := range want {
		if res.Outputs[k] != v {
			t.Errorf("output %s = %q, want %q", k, res.Outputs[k], v)
		}
	}
	if !strings.Contains(rec.text(1), "got bar baz\n") {
		t.Errorf("step 2 log = %q", rec.text(1))
	}
}

func TestFailingStepFailsJobAndSkipsRest(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Name: "ok", Run: "echo one"},
		{Name: "bad", Run: "echo about to fail >&2; exit 3"},
		{Name: "next", Run: "echo should not run"},
		{Name: "on failure", If: "failure()", Run: "echo cleaning up"},
		{Name: "always", If: "${{ always() }}", Run: "echo always"},
		{Name: "on success", If: "success()", Run: "echo nope"},
	}})
	wantStatuses(t, res, success, failed, skipped, success, success, skipped)
	if res.Status != kiln.JobFailed || !strings.Contains(res.Error, `step "bad" failed: exit code 3`) {
		t.Fatalf("job = %s %q", res.Status, res.Error)
	}
	if res.Steps[1].ExitCode != 3 {
		t.Errorf("exit code = %d", res.Steps[1].ExitCode)
	}
	lines := rec.lines(1)
	if len(lines) != 1 || lines[0].Stream != StreamStderr || lines[0].Text != "about to fail" {
		t.Errorf("step log = %+v", lines)
	}
	if strings.Contains(rec.allText(), "should not run") || strings.Contains(rec.allText(), "nope") {
		t.Error("a skipped step ran")
	}
	if !strings.Contains(rec.text(3), "cleaning up") {
		t.Error("failure() step did not run")
	}
}

// Proves B56 (docs/behaviours.md).
func TestShellIsErrexit(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: "false\necho after false"},
		{If: "always()", Shell: "bash", Run: "false | true\necho bash pipefail did not stop me"},
		{If: "always()", Run: "false | true\necho sh has no pipefail"},
	}})
	wantStatuses(t, res, failed, failed, success)
	if strings.Contains(rec.allText(), "after false") || strings.Contains(rec.allText(), "did not stop me") {
		t.Errorf("log = %q", rec.allText())
	}
}

func TestCustomShells(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Contexts: map[string]any{"event": map[string]any{"branch": "main"}}, Steps: []Step{
		{Shell: "awk -f {0}", Run: `BEGIN { print "awk ran" }`},
		{Shell: "sh -x", Run: "echo traced"},
		{Shell: "awk -f", Run: `BEGIN { print "${{ event.branch }}" }`},
		{If: "always()", Shell: "no-such-shell-kiln", Run: "echo x"},
	}})
	wantStatuses(t, res, success, success, failed, failed)
	if rec.text(0) != "awk ran\n" {
		t.Errorf("awk log = %q", rec.text(0))
	}
	if !strings.Contains(rec.text(1), "+ echo traced") {
		t.Errorf("sh -x log = %q", rec.text(1))
	}
	if !strings.Contains(res.Steps[2].Error, "sh-family shells") {
		t.Errorf("expression in awk step: %q", res.Steps[2].Error)
	}
	if res.Steps[3].ExitCode != 127 || !strings.Contains(rec.text(3), "no-such-shell-kiln") {
		t.Errorf("missing shell: exit %d, log %q", res.Steps[3].ExitCode, rec.text(3))
	}
}

// Proves B20 (docs/behaviours.md).
func TestRetryThenSuccess(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{{
		Name:  "flaky",
		Run:   `n=$(cat "$KILN_TEMP/n" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$KILN_TEMP/n"; echo "try $n"; test $n -ge 3`,
		Retry: Retry{MaxAttempts: 4, Delay: 10 * time.Millisecond, Backoff: BackoffExponential},
	}}})
	wantStatuses(t, res, success)
	if res.Steps[0].Attempt != 3 {
		t.Errorf("attempt = %d, want 3", res.Steps[0].Attempt)
	}
	var attempts []int
	for _, ev := range rec.stepEvents(0) {
		if ev.Status == kiln.StepRunning {
			attempts = append(attempts, ev.Attempt)
		}
	}
	if len(attempts) != 3 || attempts[0] != 1 || attempts[2] != 3 {
		t.Errorf("running events for attempts %v", attempts)
	}
	checkSeq(t, rec.lines(0)) // one numbering across all attempts
	log := rec.text(0)
	for _, want := range []string{"try 1\n", "[kiln] attempt 1 of 4 failed: exit code 1; retrying in 10ms", "[kiln] attempt 2 of 4 failed: exit code 1; retrying in 20ms", "[kiln] attempt 3 of 4\n", "try 3\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// Proves B20 (docs/behaviours.md).
func TestRetryGivesUp(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, _ := runJob(t, x, &Job{JobID: "j", Steps: []Step{{
		Run:   "exit 4",
		Retry: Retry{MaxAttempts: 2, Delay: time.Millisecond},
	}}})
	wantStatuses(t, res, failed)
	if res.Steps[0].Attempt != 2 || res.Steps[0].ExitCode != 4 {
		t.Errorf("step = %+v", res.Steps[0])
	}
}

// Proves B20 (docs/behaviours.md).
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	exp := Retry{Delay: time.Second, MaxDelay: 5 * time.Second, Backoff: BackoffExponential}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 60: 5 * time.Second} {
		if got := exp.wait(n); got != want {
			t.Errorf("exponential wait(%d) = %s, want %s", n, got, want)
		}
	}
	uncapped := Retry{Delay: time.Second, Backoff: BackoffExponential}
	if got := uncapped.wait(200); got <= 0 {
		t.Errorf("uncapped wait overflowed: %s", got)
	}
	fixed := Retry{Delay: 3 * time.Second, MaxDelay: time.Second}
	if got := fixed.wait(5); got != 3*time.Second {
		t.Errorf("fixed wait = %s", got)
	}
}

// Proves B21 (docs/behaviours.md).
func TestContinueOnError(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, _ := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: "exit 1", ContinueOnError: true},
		{Run: "echo still success"},
		{If: "failure()", Run: "echo no"},
	}})
	wantStatuses(t, res, failed, success, skipped)
	if res.Status != kiln.JobSuccess {
		t.Fatalf("job = %s %q", res.Status, res.Error)
	}
}

func TestStepIf(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	cases := []struct {
		name  string
		first string // the first step's script
		cond  string
		want  kiln.StepStatus
	}{
		{"default after success", "true", "", success},
		{"default after failure", "false", "", skipped},
		{"success after success", "true", "success()", success},
		{"failure after success", "true", "failure()", skipped},
		{"failure after failure", "false", "${{ failure() }}", success},
		{"always after failure", "false", "always()", success},
		{"cancelled without cancel", "true", "cancelled()", skipped},
		{"false", "true", "false", skipped},
		{"bad condition", "true", "no such thing(", failed},
		{"expression true", "true", "matrix.os == 'linux'", success},
		{"expression false", "true", "${{ matrix.os == 'mac' }}", skipped},
		{"expression after failure is implicitly success()", "false", "matrix.os == 'linux'", skipped},
		{"always and expression after failure", "false", "always() && matrix.os == 'linux'", success},
		{"failure and false expression", "false", "failure() && matrix.os == 'mac'", skipped},
		{"cancelled or failure after failure", "false", "cancelled() || failure()", success},
		{"job.status", "false", "always() && job.status == 'failure'", success},
		{"env context", "true", "env.WHO == 'job'", success},
		{"unknown function", "true", "nosuch()", failed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res, _ := runJob(t, x, &Job{JobID: "j", JobEnv: map[string]string{"WHO": "job"},
				Contexts: map[string]any{"matrix": map[string]any{"os": "linux"}},
				Steps:    []Step{{Run: c.first}, {If: c.cond, Run: "true"}}})
			if got := res.Steps[1].Status; got != c.want {
				t.Fatalf("second step = %s, want %s (%s)", got, c.want, res.Steps[1].Error)
			}
		})
	}
}

func TestEnvLayering(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.BaseEnv = append(testEnv(), "A=base", "E=base") })
	res, rec := runJob(t, x, &Job{
		RunID: "r1", JobID: "j1", Name: "build",
		WorkflowEnv: map[string]string{"A": "workflow", "B": "workflow", "C": "workflow", "KILN_WORKSPACE": "/hijacked"},
		JobEnv:      map[string]string{"B": "job", "C": "job", "CI": "custom"},
		Steps: []Step{
			{Run: `echo "C=env-file" >> "$KILN_ENV"; echo "D=env-file" >> "$KILN_ENV"`},
			{Env: map[string]string{"D": "step", "F": "${{ env.C }}-rendered"},
				Run: `echo "$A $B $C $D $E $F $CI $KILN $KILN_RUN_ID $KILN_JOB_ID $KILN_JOB"; echo "ws=$KILN_WORKSPACE"; pwd`},
		},
	})
	wantStatuses(t, res, success, success)
	lines := rec.lines(1)
	if len(lines) != 3 {
		t.Fatalf("log = %+v", lines)
	}
	if want := "workflow job env-file step base env-file-rendered custom true r1 j1 build"; lines[0].Text != want {
		t.Errorf("env = %q\nwant  %q", lines[0].Text, want)
	}
	ws := strings.TrimPrefix(lines[1].Text, "ws=")
	if ws == "/hijacked" || !strings.HasPrefix(ws, x.cfg.WorkRoot) || lines[2].Text != ws {
		t.Errorf("workspace = %q, pwd = %q", ws, lines[2].Text)
	}
}

// The event and the run reach steps as KILN_* variables; a branch name
// that is a shell command stays a value.
func TestStepsSeeTheEventAndRunAsVariables(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	hostile := `main$(touch pwned)`
	res, rec := runJob(t, x, &Job{JobID: "j", Contexts: map[string]any{
		"event": map[string]any{"name": "push", "ref": "refs/heads/" + hostile, "sha": "53ac1f02", "branch": hostile,
			"tag": "", "repository": "acme/app", "actor": "dev"},
		"run": map[string]any{"id": "r1", "number": float64(12), "attempt": float64(2), "workflow": "ci"},
	}, Steps: []Step{{Run: `echo "$KILN_EVENT|$KILN_REF|$KILN_SHA|$KILN_BRANCH|$KILN_REPOSITORY|$KILN_ACTOR|$KILN_RUN_NUMBER|$KILN_RUN_ATTEMPT|$KILN_WORKFLOW|${KILN_TAG-unset}"; ls`}}})
	wantStatuses(t, res, success)
	out := rec.text(0)
	want := "push|refs/heads/" + hostile + "|53ac1f02|" + hostile + "|acme/app|dev|12|2|ci|unset"
	if !strings.Contains(out, want) {
		t.Errorf("step printed:\n%s\nwant a line %q", out, want)
	}
	for _, line := range strings.Split(out, "\n") {
		if line == "pwned" { // ls lists the workspace
			t.Error("the branch name ran as a command")
		}
	}
}

// Proves B58 (docs/behaviours.md).
func TestAgentCredentialsNeverReachSteps(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) {
		c.BaseEnv = append(testEnv(), "KILN_AGENT_TOKEN=agent-secret-1", "KILN_TOKEN=tok-secret-2",
			"KILN_ADMIN_TOKEN=admin-secret-3", "KILN_SERVER_URL=http://server", "KILN_ENV=/outer", "KEEP_ME=yes")
	})
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{{Run: "env"}}})
	wantStatuses(t, res, success)
	out := rec.text(0)
	for _, bad := range []string{"KILN_AGENT_TOKEN", "agent-secret-1", "KILN_TOKEN", "KILN_ADMIN_TOKEN", "KILN_SERVER_URL", "KILN_ENV=/outer"} {
		if strings.Contains(out, bad) {
			t.Errorf("step environment contains %q", bad)
		}
	}
	for _, want := range []string{"KEEP_ME=yes", "CI=true", "KILN=true", "KILN_ENV=/"} {
		if !strings.Contains(out, want) {
			t.Errorf("step environment lacks %q", want)
		}
	}
}

func TestSanitizeEnv(t *testing.T) {
	t.Parallel()
	for name, agentOnly := range map[string]bool{
		"KILN_AGENT_TOKEN": true, "KILN_AGENT_ID": true, "KILN_TOKEN": true, "KILN_ADMIN_TOKEN": true,
		"KILN_SERVER": true, "KILN_SERVER_URL": true, "KILN_DATABASE_URL": true,
		"PATH": false, "KILNX": false, "kiln_token": false, "MY_KILN_TOKEN": false,
	} {
		if got := AgentOnlyEnv(name); got != agentOnly {
			t.Errorf("AgentOnlyEnv(%q) = %v", name, got)
		}
	}
	got := SanitizeEnv([]string{"A=1", "KILN_TOKEN=x", "=bad", "noequals", "B=2=3"})
	if strings.Join(got, " ") != "A=1 B=2=3" {
		t.Errorf("SanitizeEnv = %q", got)
	}
}

func TestKilnPath(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: `mkdir -p tools/a tools/b
printf '#!/bin/sh\necho hello from a\n' > tools/a/hello
printf '#!/bin/sh\necho hello from b\n' > tools/b/hello
chmod +x tools/a/hello tools/b/hello
echo "$PWD/tools/a" >> "$KILN_PATH"
echo tools/b >> "$KILN_PATH"`},
		{Run: "hello; echo \"$PATH\""},
	}})
	wantStatuses(t, res, success, success)
	lines := rec.lines(1)
	if len(lines) != 2 || lines[0].Text != "hello from b" || !strings.Contains(lines[1].Text, "/tools/b:") {
		t.Fatalf("log = %+v", lines)
	}
}

func TestWorkingDirectory(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Contexts: map[string]any{"matrix": map[string]any{"dir": "sub"}}, Steps: []Step{
		{Run: "mkdir -p sub/deeper"},
		{WorkingDirectory: "${{ matrix.dir }}/deeper", Run: `pwd; echo "$KILN_WORKSPACE"`},
		{If: "always()", WorkingDirectory: "missing", Run: "true"},
	}})
	wantStatuses(t, res, success, success, failed)
	lines := rec.lines(1)
	if len(lines) != 2 || lines[0].Text != filepath.Join(lines[1].Text, "sub", "deeper") {
		t.Fatalf("log = %+v", lines)
	}
	if !strings.Contains(res.Steps[2].Error, `working_directory "missing" is not a directory`) {
		t.Errorf("error = %q", res.Steps[2].Error)
	}
}

func TestBadEnvFilesFailTheStep(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.MaxOutputBytes = 100 })
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: `echo "not a valid line" >> "$KILN_ENV"`},
		{If: "always()", Run: `printf 'X<<EOF\nno end\n' >> "$KILN_OUTPUT"`},
		{If: "always()", Run: `echo "KILN_WORKSPACE=/elsewhere" >> "$KILN_ENV"`},
		{If: "always()", Run: `head -c 200 /dev/zero | tr '\0' a | sed 's/^/big=/' >> "$KILN_OUTPUT"`},
		{If: "always()", Run: `echo "ok=1" >> "$KILN_OUTPUT"`},
	}})
	wantStatuses(t, res, failed, failed, failed, failed, success)
	for i, want := range []string{
		"$KILN_ENV: line 1: expected NAME=value or NAME<<DELIMITER",
		"$KILN_OUTPUT: line 1: the value of X is not closed",
		"$KILN_ENV: KILN_WORKSPACE is set by kiln",
		"$KILN_OUTPUT: the job's outputs would be 203 bytes, more than the 100 bytes allowed",
	} {
		if !strings.Contains(res.Steps[i].Error, want) {
			t.Errorf("step %d error = %q, want %q", i, res.Steps[i].Error, want)
		}
		if !strings.Contains(rec.text(i), want) {
			t.Errorf("step %d log lacks the error: %q", i, rec.text(i))
		}
	}
	if len(res.Outputs) != 1 || res.Outputs["ok"] != "1" {
		t.Errorf("outputs = %v", res.Outputs)
	}
}

func TestInvalidJob(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	for name, job := range map[string]*Job{
		"empty run":       {Steps: []Step{{Run: "  "}}},
		"bad env name":    {JobEnv: map[string]string{"A-B": "x"}, Steps: []Step{{Run: "true"}}},
		"bad backoff":     {Steps: []Step{{Run: "true", Retry: Retry{Backoff: "linear"}}}},
		"option as ref":   {Checkout: &Checkout{URL: "file:///x", Ref: "--upload-pack=evil"}, Steps: []Step{{Run: "true"}}},
		"short sha":       {Checkout: &Checkout{URL: "file:///x", SHA: "abc123"}, Steps: []Step{{Run: "true"}}},
		"option as url":   {Checkout: &Checkout{URL: "--upload-pack=evil", Ref: "main"}, Steps: []Step{{Run: "true"}}},
		"url and path":    {Checkout: &Checkout{URL: "file:///x", LocalPath: "/x", Ref: "main"}, Steps: []Step{{Run: "true"}}},
		"negative timout": {Timeout: -time.Second, Steps: []Step{{Run: "true"}}},
	} {
		res, rec := runJob(t, x, job)
		if res.Status != kiln.JobFailed || res.Error == "" || len(rec.events) != 0 {
			t.Errorf("%s: result %+v, %d events", name, res, len(rec.events))
		}
	}
}

func TestWorkspaceRemovedOrKept(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{{Run: "echo $KILN_WORKSPACE; touch made-here"}}})
	ws := strings.TrimSpace(rec.text(0))
	if _, err := os.Stat(ws); !os.IsNotExist(err) || res.Workspace != "" {
		t.Errorf("workspace %s still there (%v)", ws, err)
	}
	entries, _ := os.ReadDir(x.cfg.WorkRoot)
	if len(entries) != 0 {
		t.Errorf("work root not empty: %v", entries)
	}

	res, rec = runJob(t, x, &Job{JobID: "j", KeepWorkspace: true, Steps: []Step{{Run: "touch made-here; mkdir ro; touch ro/f; chmod 500 ro"}}})
	if _, err := os.Stat(filepath.Join(res.Workspace, "made-here")); err != nil {
		t.Fatalf("kept workspace: %v (%+v)", err, res)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(res.Workspace), "meta")); !os.IsNotExist(err) {
		t.Errorf("meta kept: %v", err)
	}
	if err := removeTree(filepath.Dir(res.Workspace)); err != nil {
		t.Errorf("removeTree of a read-only directory: %v", err)
	}
	_ = rec
}

func TestHashFilesInStepEnv(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "j", Steps: []Step{
		{Run: "mkdir -p a/b; echo one > a/b/x.sum; echo two > a/y.sum; echo no > a/z.txt"},
		{Env: map[string]string{
			"ALL":  "${{ hashFiles('**/*.sum') }}",
			"SOME": "${{ hashFiles('**/*.sum', '!a/y.sum') }}",
			"NONE": "${{ hashFiles('*.nothing') }}",
		}, Run: `echo "$ALL"; echo "$SOME"; echo "[$NONE]"; cat a/b/x.sum a/y.sum | wc -c`},
	}})
	wantStatuses(t, res, success, success)
	lines := rec.lines(1)
	if len(lines) != 4 || len(lines[0].Text) != 64 || len(lines[1].Text) != 64 || lines[0].Text == lines[1].Text || lines[2].Text != "[]" {
		t.Fatalf("log = %+v", lines)
	}
}

func TestHashFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a/b/x.sum"), "one\n")
	writeFile(t, filepath.Join(dir, "a/y.sum"), "two\n")
	// GitHub's definition: sha256 over the sha256 of each file, in path order.
	h1, h2 := sha256.Sum256([]byte("one\n")), sha256.Sum256([]byte("two\n"))
	want := sha256.Sum256(append(h1[:], h2[:]...))
	got, err := hashFilesIn(dir)([]string{"a/y.sum", "**/*.sum"})
	if err != nil || got != hex.EncodeToString(want[:]) {
		t.Errorf("hashFiles = %q, %v", got, err)
	}
	if got, err := hashFilesIn(dir)([]string{"*.none"}); got != "" || err != nil {
		t.Errorf("no match = %q, %v", got, err)
	}
	if _, err := hashFilesIn(dir)([]string{"[bad"}); err == nil {
		t.Error("a bad pattern was accepted")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]Config{
		"negative grace":    {GracePeriod: -time.Second},
		"negative timeout":  {DefaultStepTimeout: -time.Second},
		"negative log cap":  {MaxLogBytesPerStep: -1},
		"tiny lines":        {MaxLineBytes: 10},
		"negative batch":    {BatchLines: -1},
		"negative outputs":  {MaxOutputBytes: -1},
		"negative env file": {MaxEnvFileBytes: -1},
	} {
		cfg.WorkRoot = t.TempDir()
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	x, err := New(Config{WorkRoot: filepath.Join(t.TempDir(), "new", "root")})
	if err != nil {
		t.Fatal(err)
	}
	if x.cfg.GracePeriod != DefaultGracePeriod || x.cfg.BatchLines != DefaultBatchLines || x.cfg.ShimPath == "" {
		t.Errorf("defaults not applied: %+v", x.cfg)
	}
}

// hashFiles() gives what GitHub's gives for the same files (vectors
// computed with sha256sum: the SHA-256 of the concatenated SHA-256 sums
// of the matched files, in path order), and a leading "./" — in a pattern
// or an exclusion — matches as without it (B210).
func TestHashFilesMatchesGitHub(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod": "module example.com/x\n", "go.sum": "golang.org/x/text v0.3.0 h1:abc=\n", "sub/go.sum": "sub sum\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const single = "5108550584fb133f61f93db6bf818c4d77fe4cd85347577569dfbf5ae0b860cd"
	const both = "1437aad8bfc264ac51be328f90f65735f4c29f3cde4633f09bc703112b124323"
	for _, c := range []struct {
		patterns []string
		want     string
	}{
		{[]string{"go.sum"}, single},
		{[]string{"./go.sum"}, single},
		{[]string{"././go.sum"}, single},
		{[]string{"**/go.sum"}, both},
		{[]string{"./**/go.sum"}, both},
		{[]string{"sub/go.sum", "go.sum"}, both},
		{[]string{"**/go.sum", "!./sub/**"}, single},
		{[]string{"./**/go.sum", "!sub/go.sum"}, single},
		{[]string{"./nothing.sum"}, ""},
	} {
		got, err := hashFilesIn(dir)(c.patterns)
		if err != nil || got != c.want {
			t.Errorf("hashFiles(%q) = %q, %v; want %q", c.patterns, got, err, c.want)
		}
	}
}
