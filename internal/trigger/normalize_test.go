package trigger

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", path))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Every real GitHub payload under testdata/github normalizes to the event
// (or the ignored reason) it shows.
func TestFromGitHubRealPayloads(t *testing.T) {
	cases := []struct {
		file, event string
		want        *kiln.Event
		ignored     string
	}{
		{"push.payload.json", "push", nil, "tag simple-tag was deleted"},
		{"push.with-installation.payload.json", "push", nil, "tag simple-tag was deleted"},
		{"push.with-new-branch.payload.json", "push", &kiln.Event{
			Name: "push", Ref: "refs/heads/master", SHA: "6113728f27ae82c7b1a177c8d03f9e96e0adf246", Before: "0000000000000000000000000000000000000000", Branch: "master",
			Repository: "Codertocat/Hello-World", CloneURL: "https://github.com/Codertocat/Hello-World.git", DefaultBranch: "master",
			Actor: "Codertocat", Message: "Initial commit",
			// A new branch: the payload cannot tell what changed against its base.
			ChangedFiles: nil, ChangedFilesStatus: "",
		}, ""},
		{"pull_request.opened.payload.json", "pull_request", &kiln.Event{
			Name: "pull_request", Action: "opened", Ref: "refs/pull/2/head", SHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
			Branch: "changes", BaseBranch: "master", Repository: "Codertocat/Hello-World",
			CloneURL: "https://github.com/Codertocat/Hello-World.git", DefaultBranch: "master", Actor: "Codertocat",
			PR: &kiln.PR{Number: 2, Title: "Update the README with new information."},
		}, ""},
		{"pull_request.synchronize.payload.json", "pull_request", &kiln.Event{
			Name: "pull_request", Action: "synchronize", Ref: "refs/pull/2/head", SHA: "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
			Before: "f95f852bd8fca8fcc58a9a2d6c842781e32a215e", Branch: "changes", BaseBranch: "master", Repository: "Codertocat/Hello-World",
			CloneURL: "https://github.com/Codertocat/Hello-World.git", DefaultBranch: "master", Actor: "Codertocat",
			PR: &kiln.PR{Number: 2, Title: "Update the README with new information."},
		}, ""},
		{"pull_request.reopened.payload.json", "pull_request", nil, ""},
		{"pull_request.closed.payload.json", "pull_request", nil, ""},
		{"create.payload.json", "create", nil, "the push of the new branch or tag"},
		{"ping.payload.json", "ping", nil, "GitHub checks that the hook works"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			ev, err := FromGitHub(c.event, readFixture(t, "github/"+c.file))
			if c.ignored != "" {
				if !IsIgnored(err) || !strings.Contains(err.Error(), c.ignored) {
					t.Fatalf("err = %v, want ignored: %s", err, c.ignored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.want == nil { // only the action is checked
				wantAction := strings.Split(c.file, ".")[1]
				if ev.Action != wantAction || ev.PR == nil || ev.PR.Number != 2 || ev.BaseBranch != "master" {
					t.Fatalf("event = %+v", ev)
				}
				return
			}
			assertEvent(t, ev, c.want)
		})
	}
}

func assertEvent(t *testing.T, got, want *kiln.Event) {
	t.Helper()
	if err := Validate(got); err != nil {
		t.Errorf("normalized event does not validate: %v", err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("event:\n got %s\nwant %s", g, w)
	}
}

// Proves B4 (docs/behaviours.md).
func TestFromGiteaFixtures(t *testing.T) {
	repo := func(ev *kiln.Event) *kiln.Event {
		ev.Repository, ev.CloneURL, ev.DefaultBranch = "kiln-org/app", "https://gitea.example.org/kiln-org/app.git", "main"
		return ev
	}
	// The fixtures' pull request comes from bob's fork; Gitea does not say
	// how bob relates to the repository.
	giteaFork := &kiln.Fork{HeadRepository: "bob/app", Author: "bob"}
	cases := []struct {
		file, event string
		want        *kiln.Event
		ignored     string
	}{
		{"push.json", "push", repo(&kiln.Event{Name: "push", Ref: "refs/heads/main", SHA: "9e3a1f7c2b5d8e4a6c0f1b3d5e7a9c2e4f6b8d0a",
			Before: "1f0e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6", Branch: "main", Actor: "alice", Message: "docs: describe the store\n",
			ChangedFiles:       []string{"internal/store/jobs.go", "go.mod", "go.sum", "docs/store.md", "docs/old.md"},
			ChangedFilesStatus: "fetched"}), ""},
		{"push.truncated.json", "push", repo(&kiln.Event{Name: "push", Ref: "refs/heads/main", SHA: "9e3a1f7c2b5d8e4a6c0f1b3d5e7a9c2e4f6b8d0a",
			Before: "1f0e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6", Branch: "main", Actor: "alice", Message: "docs: describe the store\n"}), ""},
		{"push.new-branch.json", "push", repo(&kiln.Event{Name: "push", Ref: "refs/heads/feature/store", SHA: "9e3a1f7c2b5d8e4a6c0f1b3d5e7a9c2e4f6b8d0a",
			Before: "0000000000000000000000000000000000000000", Branch: "feature/store", Actor: "alice", Message: "docs: describe the store\n"}), ""},
		{"push.tag.json", "push", repo(&kiln.Event{Name: "tag", Ref: "refs/tags/v1.2.0", SHA: "9e3a1f7c2b5d8e4a6c0f1b3d5e7a9c2e4f6b8d0a",
			Before: "0000000000000000000000000000000000000000", Tag: "v1.2.0", Actor: "alice", Message: "docs: describe the store\n"}), ""},
		{"push.delete.json", "push", nil, "branch feature/old was deleted"},
		{"pull_request.opened.json", "pull_request", repo(&kiln.Event{Name: "pull_request", Action: "opened", Ref: "refs/pull/12/head",
			SHA: "c0ffee00d15ea5e5badc0de0123456789abcdef0", Branch: "faster-claims", BaseBranch: "main", Actor: "bob",
			PR: &kiln.PR{Number: 12, Title: "store: faster claims"}, Fork: giteaFork}), ""},
		{"pull_request.synchronized.json", "pull_request", repo(&kiln.Event{Name: "pull_request", Action: "synchronize", Ref: "refs/pull/12/head",
			SHA: "c0ffee00d15ea5e5badc0de0123456789abcdef0", Branch: "faster-claims", BaseBranch: "main", Actor: "bob",
			PR: &kiln.PR{Number: 12, Title: "store: faster claims"}, Fork: giteaFork}), ""},
		{"pull_request.closed.json", "pull_request", repo(&kiln.Event{Name: "pull_request", Action: "closed", Ref: "refs/pull/12/head",
			SHA: "c0ffee00d15ea5e5badc0de0123456789abcdef0", Branch: "faster-claims", BaseBranch: "main", Actor: "bob",
			PR: &kiln.PR{Number: 12, Title: "store: faster claims"}, Fork: giteaFork}), ""},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			ev, err := FromGitea(c.event, readFixture(t, "gitea/"+c.file))
			if c.ignored != "" {
				if !IsIgnored(err) || !strings.Contains(err.Error(), c.ignored) {
					t.Fatalf("err = %v, want ignored: %s", err, c.ignored)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			assertEvent(t, ev, c.want)
		})
	}
	if _, err := FromGitea("create", []byte(`{}`)); !IsIgnored(err) {
		t.Errorf("create: %v", err)
	}
}

// pushBody builds a GitHub push payload with n commits.
func pushBody(n int, mutate func(map[string]any)) []byte {
	var commits []map[string]any
	for i := range n {
		commits = append(commits, map[string]any{"id": strings.Repeat("a", 40), "message": "m",
			"added": []string{"a.go"}, "removed": []string{}, "modified": []string{"dir/" + string(rune('a'+i%26)) + ".go", "a.go"}})
	}
	p := map[string]any{"ref": "refs/heads/main", "before": strings.Repeat("1", 40), "after": strings.Repeat("2", 40),
		"created": false, "deleted": false, "forced": false, "commits": commits,
		"repository": map[string]any{"full_name": "o/r", "clone_url": "https://x/o/r.git", "default_branch": "main"},
		"sender":     map[string]any{"login": "me"}}
	if mutate != nil {
		mutate(p)
	}
	b, _ := json.Marshal(p)
	return b
}

func TestGitHubChangedFiles(t *testing.T) {
	ev, err := FromGitHub("push", pushBody(2, nil))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ChangedFilesStatus != "fetched" || !slices.Equal(ev.ChangedFiles, []string{"a.go", "dir/a.go", "dir/b.go"}) {
		t.Errorf("files = %v (%q), want the deduplicated union", ev.ChangedFiles, ev.ChangedFilesStatus)
	}
	incomplete := map[string]func(map[string]any){
		"20 commits (GitHub truncates)": nil,
		"forced":                        func(p map[string]any) { p["forced"] = true },
		"created":                       func(p map[string]any) { p["created"] = true },
		"no commits":                    func(p map[string]any) { p["commits"] = []any{} },
	}
	for name, mut := range incomplete {
		n := 2
		if mut == nil {
			n = 20
		}
		ev, err := FromGitHub("push", pushBody(n, mut))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ev.ChangedFilesStatus != "" || ev.ChangedFiles != nil {
			t.Errorf("%s: files %v status %q, want unknown", name, ev.ChangedFiles, ev.ChangedFilesStatus)
		}
	}
}

// Malformed deliveries are clear errors (code invalid or too_large), never
// panics, and never "ignored".
// Proves B73 (docs/behaviours.md).
func TestBadPayloads(t *testing.T) {
	good := pushBody(1, nil)
	cases := []struct {
		name, event string
		body        []byte
		code        kiln.Code
		want        string
	}{
		{"truncated json", "push", good[:len(good)/2], kiln.CodeInvalid, "malformed"},
		{"not an object", "push", []byte(`[1,2]`), kiln.CodeInvalid, "not a JSON object"},
		{"empty", "push", nil, kiln.CodeInvalid, "not a JSON object"},
		{"wrong type", "push", []byte(`{"ref": 5}`), kiln.CodeInvalid, "field ref has the wrong type"},
		{"no ref", "push", []byte(`{"after": "` + strings.Repeat("a", 40) + `"}`), kiln.CodeInvalid, "has no ref"},
		{"bad sha", "push", pushBody(1, func(p map[string]any) { p["after"] = "HEAD" }), kiln.CodeInvalid, "no valid commit id"},
		{"no repository", "push", pushBody(1, func(p map[string]any) { delete(p, "repository") }), kiln.CodeInvalid, "no repository.full_name"},
		{"control chars in ref", "push", pushBody(1, func(p map[string]any) { p["ref"] = "refs/heads/a\x1b[31m" }), kiln.CodeInvalid, "ref contains control characters"},
		{"too large", "push", append([]byte(`{"ref":"`), make([]byte, MaxPayloadSize)...), kiln.CodeTooLarge, "at most"},
		{"pr without pull_request", "pull_request", []byte(`{"action":"opened","number":1}`), kiln.CodeInvalid, "has no pull_request"},
		{"pr without number", "pull_request", []byte(`{"action":"opened","pull_request":{"head":{"ref":"a","sha":"` + strings.Repeat("a", 40) + `"},"base":{"ref":"main"}}}`), kiln.CodeInvalid, "no valid number"},
		{"no event type", "", []byte(`{}`), kiln.CodeInvalid, "no event type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := FromGitHub(c.event, c.body)
			if err == nil || IsIgnored(err) || ev != nil {
				t.Fatalf("ev = %v, err = %v", ev, err)
			}
			if kiln.ErrorCode(err) != c.code || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v (%s), want %s containing %q", err, kiln.ErrorCode(err), c.code, c.want)
			}
		})
	}
}

func TestIgnoredEvents(t *testing.T) {
	for ev, want := range map[string]string{"issues": "kiln does not start runs for issues events", "delete": "deleting", "star": "star events"} {
		if _, err := FromGitHub(ev, []byte(`{}`)); !IsIgnored(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", ev, err)
		}
	}
	if _, err := FromGitHub("push", pushBody(1, func(p map[string]any) { p["ref"] = "refs/notes/commits" })); !IsIgnored(err) {
		t.Errorf("notes ref: %v", err)
	}
}

func TestValidate(t *testing.T) {
	sha := strings.Repeat("a", 40)
	good := []*kiln.Event{
		{Name: "push", Branch: "main", SHA: sha},
		{Name: "dispatch", SHA: sha, Branch: "main"},
		{Name: "schedule", Schedule: "@daily"},
		{Name: "pull_request", Action: "opened", PR: &kiln.PR{Number: 1}},
	}
	for _, ev := range good {
		if err := Validate(ev); err != nil {
			t.Errorf("%+v: %v", ev, err)
		}
	}
	bad := map[string]*kiln.Event{
		"no valid name":                 {Name: "merge"},
		"is not a commit id":            {Name: "push", Branch: "main", SHA: "HEAD"},
		"a push event needs a branch":   {Name: "push"},
		"a tag event needs a tag":       {Name: "tag"},
		"needs an action":               {Name: "pull_request", PR: &kiln.PR{Number: 1}},
		"needs the cron":                {Name: "schedule"},
		"control characters":            {Name: "push", Branch: "a\x00b"},
		"is not fetched or unavailable": {Name: "dispatch", ChangedFilesStatus: "maybe"},
	}
	for want, ev := range bad {
		if err := Validate(ev); err == nil || !strings.Contains(err.Error(), want) || kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("%+v: err = %v, want %q", ev, err, want)
		}
	}
	if err := Validate(nil); err == nil {
		t.Error("nil event validates")
	}
}
