package localrun

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a committed repository with the given files.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

const pipeline = `name: ci
on: {push: {}}
jobs:
  build:
    steps:
      - {name: first, run: "true"}
      - {name: second, run: "true"}
      - {name: greet, run: 'echo "FOO is $FOO"'}
  test:
    needs: [build]
    steps: [{name: fails, run: exit 3}]
  after:
    needs: [test]
    steps: [{run: echo never}]
`

const other = `name: other
on: {push: {}}
jobs:
  lonely:
    steps: [{name: other-step, run: echo other}]
`

// B246: kiln run shows the ▶ header of every step, also of one shorter
// than its poll; the checkout is one line unless it fails; and the closing
// sentence counts jobs as a person would.
// B247: --workflow runs only the workflows named and --env reaches every
// step. B248: with colour, kiln run's own lines are painted.
func TestKilnRunShowsEveryStepAndCountsJobs(t *testing.T) {
	dir := gitRepo(t, map[string]string{".kiln/workflows/ci.yml": pipeline, ".kiln/workflows/other.yml": other})
	var out, errb bytes.Buffer
	code, err := Run(context.Background(), Options{
		Dir: dir, Out: &out, Err: &errb, Workflows: []string{"ci"}, Env: []string{"FOO=from-the-command-line"}, Colour: true,
	})
	text := out.String()
	if err != nil || code != ExitFailed {
		t.Fatalf("code %d, err %v\n%s\n%s", code, err, text, errb.String())
	}
	plain := stripSGR(text)
	for _, want := range []string{
		"kiln run: a push of branch main (",
		"[build] ▶ checkout\n", "[build] ▶ first\n", "[build] ▶ second\n", "[build] ▶ greet\n",
		"[build]   FOO is from-the-command-line\n",
		"[test] ▶ fails\n", "[test] ■ fails: failed\n",
		"kiln run: 1 of 3 jobs failed, 1 skipped\n",
	} {
		if !strings.Contains(plain, want) {
			t.Errorf("output lacks %q:\n%s", want, plain)
		}
	}
	for _, unwanted := range []string{"git fetch", "other-step", "lonely", "did not pass"} {
		if strings.Contains(plain, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, plain)
		}
	}
	if !strings.Contains(text, "\x1b[1m▶ first\x1b[0m") || !strings.Contains(text, "\x1b[31m") {
		t.Errorf("no colour in:\n%q", text)
	}
}

// B247: --json prints the result as JSON on stdout, the progress on stderr.
func TestKilnRunJSON(t *testing.T) {
	dir := gitRepo(t, map[string]string{".kiln/workflows/other.yml": other})
	var out, errb bytes.Buffer
	code, err := Run(context.Background(), Options{Dir: dir, Out: &out, Err: &errb, JSON: true})
	if err != nil || code != ExitOK {
		t.Fatalf("code %d, err %v\n%s\n%s", code, err, out.String(), errb.String())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	if res.Status != "success" || len(res.Runs) != 1 || res.Runs[0].File != ".kiln/workflows/other.yml" ||
		len(res.Runs[0].Jobs) != 1 || res.Runs[0].Jobs[0].Result != "success" || res.Runs[0].Jobs[0].Steps[0].Name != "other-step" {
		t.Fatalf("result: %+v", res)
	}
	if !strings.Contains(errb.String(), "[lonely] ▶ other-step") || strings.Contains(errb.String(), "\x1b[") {
		t.Errorf("progress on stderr:\n%s", errb.String())
	}
}

// B246: the closing sentence.
func TestClosingSentence(t *testing.T) {
	for want, c := range map[string]tally{
		"the job passed":                   {total: 1, passed: 1},
		"all 7 jobs passed":                {total: 7, passed: 7},
		"5 of 7 jobs passed, 2 skipped":    {total: 7, passed: 5, skipped: 2},
		"1 of 7 jobs failed, 2 skipped":    {total: 7, passed: 4, failed: 1, skipped: 2},
		"1 of 1 job failed":                {total: 1, failed: 1},
		"2 of 4 jobs failed, 1 cancelled":  {total: 4, passed: 1, failed: 2, cancelled: 1},
		"1 of 2 jobs cancelled":            {total: 2, passed: 1, cancelled: 1},
		"1 of 3 jobs cancelled, 1 skipped": {total: 3, passed: 1, cancelled: 1, skipped: 1},
	} {
		if got := c.sentence(); got != want {
			t.Errorf("%+v: %q, want %q", c, got, want)
		}
	}
}

func stripSGR(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
