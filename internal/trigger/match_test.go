package trigger

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

func wf(t testing.TB, on string) *workflow.Workflow {
	t.Helper()
	w, err := workflow.Parse("w.yml", []byte("on: "+on+"\njobs: {a: {steps: [{run: x}]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func push(branch string, files ...string) *kiln.Event {
	return &kiln.Event{Name: kiln.EventPush, Branch: branch, Ref: "refs/heads/" + branch, ChangedFiles: files, ChangedFilesStatus: kiln.ChangedFilesFetched}
}

// TestMatch covers the matching rules of B10 and B11 (docs/workflow.md),
// one rule per case: the decision,
// the trigger that matched and the reason of the deciding check.
func TestMatch(t *testing.T) {
	pr := func(action, base string) *kiln.Event {
		return &kiln.Event{Name: kiln.EventPullRequest, Action: action, Branch: "feature", BaseBranch: base, PR: &kiln.PR{Number: 1}}
	}
	cases := []struct {
		name, on string
		ev       *kiln.Event
		matched  bool
		trigger  kiln.EventName
		reason   string // in the summary
	}{
		{"empty filter matches", "push", push("anything"), true, "push", "no branch filter"},
		{"branch glob", `{push: {branches: ["release/*"]}}`, push("release/1.2"), true, "push", "branch release/1.2 matches release/*"},
		{"glob matches the whole name", `{push: {branches: [main]}}`, push("main-old"), false, "", "branch main-old matches none of main"},
		{"star stays in a segment", `{push: {branches: ["release/*"]}}`, push("release/1/2"), false, "", "matches none"},
		{"double star crosses segments", `{push: {branches: ["release/**"]}}`, push("release/1/2"), true, "push", "matches release/**"},
		{"regex, unanchored", `{push: {branches: ["re:hotfix-[0-9]+"]}}`, push("old-hotfix-12"), true, "push", "matches re:hotfix-[0-9]+"},
		{"regex anchored", `{push: {branches: ["re:^v[0-9]+$"]}}`, push("v12x"), false, "", "matches none"},
		{"exclusion wins", `{push: {branches: ["release/*", "!release/old"]}}`, push("release/old"), false, "", "branch release/old is excluded by !release/old"},
		{"only exclusions match the rest", `{push: {branches: ["!gh-pages"]}}`, push("main"), true, "push", "branch main is not excluded"},
		{"paths any file", `{push: {paths: ["**/*.go"]}}`, push("main", "README.md", "cmd/kiln/main.go"), true, "push", "cmd/kiln/main.go matches **/*.go"},
		{"paths at the root", `{push: {paths: ["**/*.go"]}}`, push("main", "main.go"), true, "push", "main.go matches **/*.go"},
		{"paths none", `{push: {paths: ["**/*.go"]}}`, push("main", "README.md"), false, "", "none of the 1 changed files matches **/*.go"},
		{"paths exclusions first", `{push: {paths: ["**", "!docs/**"]}}`, push("main", "docs/a.md", "docs/b.md"), false, "", "every changed file is excluded"},
		{"paths exclusion leaves one", `{push: {paths: ["**/*.md", "!docs/**"]}}`, push("main", "docs/a.md", "README.md"), true, "push", "README.md matches **/*.md"},
		{"paths only exclusions", `{push: {paths: ["!docs/**"]}}`, push("main", "docs/a.md", "go.mod"), true, "push", "go.mod is not excluded"},
		{"no changed files", `{push: {paths: ["**"]}}`, push("main"), false, "", "no files changed"},
		{"unavailable files match conservatively", `{push: {paths: ["src/**"]}}`,
			&kiln.Event{Name: "push", Branch: "main", ChangedFilesStatus: kiln.ChangedFilesUnavailable}, true, "push", "unavailable, so the path filter matches conservatively"},
		{"unknown files match conservatively", `{push: {paths: ["src/**"]}}`, &kiln.Event{Name: "push", Branch: "main"}, true, "push", "not known"},
		{"push filter does not see tags", `{push: {branches: ["**"]}}`, &kiln.Event{Name: "tag", Tag: "v1"}, false, "", "no tag trigger"},
		{"tag pattern", `{tag: ["v*"]}`, &kiln.Event{Name: "tag", Tag: "v1.2"}, true, "tag", "tag v1.2 matches v*"},
		{"tag any", `tag`, &kiln.Event{Name: "tag", Tag: "x"}, true, "tag", "no tag filter"},
		{"tag mismatch", `{tag: ["v*"]}`, &kiln.Event{Name: "tag", Tag: "nightly"}, false, "", "tag nightly matches none of v*"},
		{"pr default types", `pull_request`, pr("synchronize", "main"), true, "pull_request", "action synchronize is one of the types"},
		{"pr closed not by default", `pull_request`, pr("closed", "main"), false, "", "action closed is not one of the types"},
		{"pr explicit types", `{pull_request: {types: [closed]}}`, pr("closed", "main"), true, "pull_request", ""},
		{"pr base branch", `{pull_request: {branches: [main]}}`, pr("opened", "develop"), false, "", "target branch develop matches none of main"},
		{"pr paths unknown", `{pull_request: {paths: ["**/*.go"]}}`, pr("opened", "main"), true, "pull_request", "matches conservatively"},
		{"schedule cron", `{schedule: [{cron: "0 3 * * *"}, {cron: "@daily"}]}`, &kiln.Event{Name: "schedule", Schedule: "@daily"}, true, "schedule", `cron "@daily" fired`},
		{"schedule other cron", `{schedule: ["0 3 * * *"]}`, &kiln.Event{Name: "schedule", Schedule: "0 4 * * *"}, false, "", "is not one of this workflow's schedules"},
		{"dispatch", `[push, dispatch]`, &kiln.Event{Name: "dispatch"}, true, "dispatch", "a manual run"},
		{"no such trigger", `push`, &kiln.Event{Name: "dispatch"}, false, "", "the workflow has no dispatch trigger (it has push)"},
		{"first matching trigger wins", `{push: {branches: [main]}, pull_request: , tag: }`, push("main"), true, "push", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Match(wf(t, c.on), c.ev)
			if d.Matched != c.matched || d.Trigger != c.trigger || !strings.Contains(d.Summary, c.reason) {
				t.Errorf("decision = %v %q %q; want %v %q with %q\n%s", d.Matched, d.Trigger, d.Summary, c.matched, c.trigger, c.reason, trace(d))
			}
			if d.Workflow != "w" || d.File != "w.yml" {
				t.Errorf("decision names %q %q", d.Workflow, d.File)
			}
		})
	}
}

func trace(d Decision) string {
	b, _ := json.MarshalIndent(d.Checks, "", " ")
	return string(b)
}

// The trace records every check, in order, with what was compared.
// Proves B12 (docs/behaviours.md).
func TestDecisionTrace(t *testing.T) {
	w := wf(t, `{pull_request: {branches: [main]}, push: {branches: [main], paths: ["**/*.go"]}}`)
	d := Match(w, push("main", "a.go", "b.go", "c.go", "d.go"))
	want := []Check{
		{Check: "on.pull_request", Pattern: "pull_request", Value: "push", Passed: false, Reason: "a push event does not start a pull_request trigger"},
		{Check: "on.push", Pattern: "push", Value: "push", Passed: true, Reason: "the event is a push"},
		{Check: "on.push.branches", Pattern: "main", Value: "main", Passed: true, Reason: "branch main matches main"},
		{Check: "on.push.paths", Pattern: "**/*.go", Value: "a.go, b.go, c.go (+1 more)", Passed: true, Reason: "a.go matches **/*.go"},
	}
	if len(d.Checks) != len(want) {
		t.Fatalf("checks:\n%s", trace(d))
	}
	for i := range want {
		if d.Checks[i] != want[i] {
			t.Errorf("check %d = %+v\nwant %+v", i, d.Checks[i], want[i])
		}
	}
	if !d.Matched || d.Summary != "started by the push trigger: branch main matches main; a.go matches **/*.go" {
		t.Errorf("summary = %q", d.Summary)
	}
	b, err := json.Marshal(d)
	if err != nil || !strings.Contains(string(b), `"check":"on.push.paths"`) {
		t.Errorf("json: %s %v", b, err)
	}
}

func TestMatchAll(t *testing.T) {
	ds := MatchAll([]*workflow.Workflow{wf(t, "push"), wf(t, "tag")}, push("main"))
	if len(ds) != 2 || !ds[0].Matched || ds[1].Matched {
		t.Fatalf("decisions = %+v", ds)
	}
}
