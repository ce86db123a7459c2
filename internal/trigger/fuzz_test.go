package trigger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

// fuzzWorkflows is a fixed set covering every trigger and filter kind.
var fuzzOn = []string{
	`push`,
	`{push: {branches: [main, "release/**", "!release/old", "re:^hotfix-[0-9]+$"], paths: ["**/*.go", "!docs/**"]}}`,
	`{pull_request: {types: [opened, closed], branches: ["!wip/*"], paths: ["!**/*.md"]}, tag: ["v*", "re:^[0-9]+\\.[0-9]+$"]}`,
	`{schedule: ["0 3 * * *", {cron: "@daily", timezone: Asia/Tokyo}], dispatch: }`,
}

// FuzzMatch matches fuzzed event fields against the fixed workflows: no
// panic, a trace that agrees with the decision, and a decision that
// survives a JSON round trip.
// Proves B10 (docs/behaviours.md).
func FuzzMatch(f *testing.F) {
	var wfs []*workflow.Workflow
	for _, on := range fuzzOn {
		wfs = append(wfs, wf(f, on))
	}
	f.Add("push", "", "main", "", "", "", "a.go\ndocs/x.md", "fetched")
	f.Add("pull_request", "opened", "feature", "main", "", "", "", "")
	f.Add("tag", "", "", "", "v1.0", "", "", "")
	f.Add("schedule", "", "", "", "", "@daily", "", "unavailable")
	f.Add("push", "", "release/old", "", "", "", "docs/a.md", "fetched")
	f.Fuzz(func(t *testing.T, name, action, branch, base, tag, sched, files, status string) {
		ev := &kiln.Event{Name: kiln.EventName(name), Action: action, Branch: branch, BaseBranch: base, Tag: tag, Schedule: sched,
			ChangedFilesStatus: kiln.ChangedFilesStatus(status)}
		if files != "" {
			ev.ChangedFiles = strings.Split(files, "\n")
		}
		for _, d := range MatchAll(wfs, ev) {
			if d.Matched != (d.Trigger != "") || d.Summary == "" {
				t.Fatalf("inconsistent decision %+v", d)
			}
			for i, c := range d.Checks {
				last := i == len(d.Checks)-1
				if d.Matched && last && !c.Passed {
					t.Fatalf("matched with a failing last check %+v", c)
				}
			}
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var back Decision
			if err := json.Unmarshal(b, &back); err != nil || back.Matched != d.Matched || len(back.Checks) != len(d.Checks) {
				t.Fatalf("round trip: %v", err)
			}
		}
	})
}

// FuzzFromGitHub feeds arbitrary deliveries to the GitHub normalizer (and
// the Gitea one, which shares its payload code): an event that validates,
// an ignored error, or a kiln error with code invalid or too_large.
// Proves B73 (docs/behaviours.md).
func FuzzFromGitHub(f *testing.F) {
	files, _ := filepath.Glob("testdata/github/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(strings.SplitN(filepath.Base(file), ".", 2)[0], compact(f, data))
	}
	f.Add("push", []byte(`{"ref":"refs/heads/a","after":"`+strings.Repeat("a", 40)+`","repository":{"full_name":"o/r"}}`))
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		for _, normalize := range []func(string, []byte) (*kiln.Event, error){FromGitHub, FromGitea} {
			ev, err := normalize(event, body)
			switch {
			case err == nil:
				if err := Validate(ev); err != nil || ev.SHA == "" || ev.Repository == "" {
					t.Fatalf("normalized event does not validate (%v): %+v", err, ev)
				}
				if ev.ChangedFilesStatus == kiln.ChangedFilesFetched && len(ev.ChangedFiles) == 0 && ev.Name != kiln.EventPush {
					t.Fatalf("fetched files on %s", ev.Name)
				}
			case IsIgnored(err):
			default:
				if c := kiln.ErrorCode(err); c != kiln.CodeInvalid && c != kiln.CodeTooLarge {
					t.Fatalf("error %v has code %s", err, c)
				}
			}
		}
	})
}

// compact keeps the fields the normalizers read, so the fuzzer mutates
// small inputs (the real payloads are up to 28 KB of unread fields).
func compact(t testing.TB, data []byte) []byte {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	keep := func(v any, keys ...string) map[string]any {
		in, _ := v.(map[string]any)
		out := map[string]any{}
		for _, k := range keys {
			if x, ok := in[k]; ok {
				out[k] = x
			}
		}
		return out
	}
	out := keep(m, "ref", "before", "after", "created", "deleted", "forced", "commits", "action", "number", "total_commits")
	out["repository"] = keep(m["repository"], "full_name", "clone_url", "default_branch")
	out["sender"] = keep(m["sender"], "login")
	if hc, ok := m["head_commit"].(map[string]any); ok {
		out["head_commit"] = keep(hc, "id", "message")
	}
	if pr, ok := m["pull_request"].(map[string]any); ok {
		out["pull_request"] = map[string]any{"title": pr["title"], "head": keep(pr["head"], "ref", "sha"), "base": keep(pr["base"], "ref")}
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
