package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/trigger"
)

// repoWith creates a repository holding the given workflow files.
func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, ".kiln", "workflows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	validCI = `on:
  push: {branches: [main], paths: ["**/*.go"]}
  pull_request:
jobs:
  test:
    matrix: {go: ["1.25", "1.26"]}
    steps: [{run: go test ./...}]
`
	brokenDeploy = `on: [push]
jobs:
  deploy:
    needs: [tset]
    timeout: 10
    steps: [{run: "./deploy.sh ${{ event.brnach }}"}]
`
)

func TestLintClean(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI, "notes.md": "ignored"})
	code, out, errOut := runCLI(t, nil, "lint", repo)
	if code != ExitOK || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if out != ".kiln/workflows/ci.yml: ok (workflow \"ci\": 2 jobs, on push, pull_request)\n" {
		t.Errorf("stdout = %q", out)
	}
}

// Proves B71 (docs/behaviours.md).
func TestLintBroken(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI, "deploy.yml": brokenDeploy})
	code, out, errOut := runCLI(t, nil, "lint", repo)
	if code != ExitFailure {
		t.Fatalf("code %d, want 1", code)
	}
	want := []string{
		`.kiln/workflows/ci.yml: ok`,
		`.kiln/workflows/deploy.yml:4:13: needs: job "tset" does not exist`,
		`.kiln/workflows/deploy.yml:5:14: timeout: 10 has no unit`,
		`.kiln/workflows/deploy.yml:6:42: run: event has no field "brnach"; did you mean "branch"?`,
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("stdout:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	if errOut != "kiln: 3 problems in 1 workflow file\n" {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestLintNothingToDo(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lint", empty}, "no workflows: "},
		{[]string{"lint", filepath.Join(empty, "missing")}, "is not a directory"},
		{[]string{"lint", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"lint", "--json", empty}, "--event and --json go with --explain"},
		{[]string{"lint", "--explain", "p.json", empty}, "--explain needs --event"},
		{[]string{"lint", "--explain", "p.json", "--event", "push", "--forge", "gitlab", empty}, `--forge "gitlab"`},
		{[]string{"lint", "--explain", filepath.Join(empty, "none.json"), "--event", "push", empty}, "read the payload"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, nil, c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

func writePayload(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func pushPayload(branch string, files ...string) map[string]any {
	return map[string]any{
		"ref": "refs/heads/" + branch, "before": strings.Repeat("1", 40), "after": strings.Repeat("2", 40),
		"commits":    []any{map[string]any{"id": strings.Repeat("2", 40), "message": "m", "added": files, "removed": []string{}, "modified": []string{}}},
		"repository": map[string]any{"full_name": "o/r", "clone_url": "https://example.org/o/r.git", "default_branch": "main"},
		"sender":     map[string]any{"login": "me"},
	}
}

// Proves B12 (docs/behaviours.md).
func TestLintExplain(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI, "release.yml": "on: {tag: [\"v*\"]}\njobs: {a: {steps: [{run: x}]}}\n"})
	payload := writePayload(t, pushPayload("main", "cmd/main.go"))
	code, out, errOut := runCLI(t, nil, "lint", repo, "--explain", payload, "--event", "push")
	if code != ExitOK {
		t.Fatalf("code %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"event: push to branch main in o/r at 222222222222; 1 changed file (fetched)",
		"ci (.kiln/workflows/ci.yml): started by the push trigger: branch main matches main; cmd/main.go matches **/*.go",
		"  pass  on.push.paths              cmd/main.go matches **/*.go",
		"release (.kiln/workflows/release.yml): not started: the workflow has no push trigger (it has tag)",
		"  fail  on.tag                     a push event does not start a tag trigger",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestLintExplainJSON(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI})
	payload := writePayload(t, pushPayload("main", "README.md"))
	code, out, _ := runCLI(t, nil, "lint", repo, "--explain", payload, "--event", "push", "--json")
	if code != ExitOK {
		t.Fatalf("code %d", code)
	}
	var got struct {
		Event     map[string]any
		Decisions []trigger.Decision
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	d := got.Decisions
	if got.Event["branch"] != "main" || len(d) != 1 || d[0].Matched || d[0].Checks[len(d[0].Checks)-2].Reason != "none of the 1 changed files matches **/*.go" {
		t.Errorf("decisions = %+v", got)
	}
}

func TestLintExplainIgnoredAndBad(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI})
	ping := writePayload(t, map[string]any{"zen": "hi"})
	code, out, _ := runCLI(t, nil, "lint", repo, "--explain", ping, "--event", "ping")
	if code != ExitOK || !strings.Contains(out, "this ping event starts no run: GitHub checks that the hook works") {
		t.Errorf("ping: code %d out %q", code, out)
	}
	bad := writePayload(t, map[string]any{"ref": 5})
	code, _, errOut := runCLI(t, nil, "lint", repo, "--explain", bad, "--event", "push")
	if code != ExitUsage || !strings.Contains(errOut, "field ref has the wrong type") {
		t.Errorf("bad payload: code %d stderr %q", code, errOut)
	}
}

func TestLintExplainGitea(t *testing.T) {
	repo := repoWith(t, map[string]string{"ci.yml": validCI})
	pr := writePayload(t, map[string]any{"action": "synchronized", "number": 3,
		"pull_request": map[string]any{"title": "t", "head": map[string]any{"ref": "f", "sha": strings.Repeat("b", 40)}, "base": map[string]any{"ref": "main"}},
		"repository":   map[string]any{"full_name": "o/r"}})
	code, out, errOut := runCLI(t, nil, "lint", repo, "--explain", pr, "--event", "pull_request", "--forge", "gitea")
	if code != ExitOK || !strings.Contains(out, "action synchronize is one of the types") {
		t.Errorf("code %d, out:\n%s\n%s", code, out, errOut)
	}
}

// The repository's own CI workflow lints clean.
func TestProjectWorkflowLintsClean(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "lint", "../..")
	if code != ExitOK {
		t.Fatalf("code %d:\n%s%s", code, out, errOut)
	}
}
