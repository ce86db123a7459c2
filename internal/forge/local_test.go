package forge

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// testGit is a real git repository in a temporary directory.
type testGit struct {
	t   testing.TB
	dir string
}

func gitEnvForTests() []string {
	return append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Ada Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com",
		"GIT_COMMITTER_NAME=Ada Lovelace", "GIT_COMMITTER_EMAIL=ada@example.com")
}

func newTestGit(t testing.TB, bare bool) *testGit {
	t.Helper()
	g := &testGit{t: t, dir: filepath.Join(t.TempDir(), "repo")}
	args := []string{"init", "-q", "-b", "main"}
	if bare {
		args = append(args, "--bare")
	}
	g.runIn("", append(args, g.dir)...)
	return g
}

func (g *testGit) runIn(dir string, args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnvForTests()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		g.t.Fatalf("git %v: %v: %s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func (g *testGit) git(args ...string) string { return g.runIn(g.dir, args...) }

func (g *testGit) write(files map[string]string) {
	for p, content := range files {
		full := filepath.Join(g.dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
}

func (g *testGit) commit(msg string, files map[string]string) string {
	g.write(files)
	g.git("add", "-A")
	g.git("commit", "-q", "-m", msg)
	return g.git("rev-parse", "HEAD")
}

// sampleRepo builds main: c1 (workflows), c2 (a big workflow, a symlink,
// code), a v1 tag on c1, and a feature branch off c1 with c3.
func sampleRepo(t *testing.T) (g *testGit, c1, c2, c3 string) {
	g = newTestGit(t, false)
	c1 = g.commit("first\n\nwith a body", map[string]string{
		".kiln/workflows/ci.yml":       "on: push\njobs: {}\n",
		".kiln/workflows/nightly.yaml": "on: schedule\n",
		".kiln/workflows/README.md":    "docs",
		".kiln/workflows/sub/x.yml":    "nested: ignored",
		"README.md":                    "hello",
	})
	g.git("tag", "-a", "v1", "-m", "release one")
	if err := os.Symlink("ci.yml", filepath.Join(g.dir, ".kiln/workflows/link.yml")); err != nil {
		t.Fatal(err)
	}
	c2 = g.commit("second", map[string]string{
		".kiln/workflows/big.yml": strings.Repeat("# padding\n", 110_000), // over 1 MiB
		"src/a.go":                "package a",
	})
	g.git("checkout", "-q", "-b", "feature", c1)
	c3 = g.commit("feature work", map[string]string{"src/feature.go": "package a"})
	g.git("checkout", "-q", "main")
	return g, c1, c2, c3
}

func localSource(dir string) *Source {
	return &Source{Name: "app", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: dir}}
}

func paths(files []WorkflowFile) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

func TestLocalWorkflows(t *testing.T) {
	g, c1, c2, _ := sampleRepo(t)
	repo, err := NewRepo(localSource(g.dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	files, err := repo.Workflows(ctx, "", c1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".kiln/workflows/ci.yml", ".kiln/workflows/nightly.yaml"}; !slices.Equal(paths(files), want) {
		t.Fatalf("at c1: %v, want %v", paths(files), want)
	}
	if string(files[0].Content) != "on: push\njobs: {}\n" {
		t.Errorf("ci.yml = %q", files[0].Content)
	}

	files, err = repo.Workflows(ctx, "", c2[:12]) // abbreviated ids work too
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{".kiln/workflows/big.yml", ".kiln/workflows/ci.yml", ".kiln/workflows/link.yml", ".kiln/workflows/nightly.yaml"}; !slices.Equal(paths(files), want) {
		t.Fatalf("at c2: %v, want %v", paths(files), want)
	}
	if kiln.ErrorCode(files[0].Err) != kiln.CodeTooLarge || files[0].Content != nil {
		t.Errorf("big.yml: %v", files[0].Err)
	}
	if files[2].Err == nil || !strings.Contains(files[2].Err.Error(), "symbolic link") {
		t.Errorf("link.yml: %v", files[2].Err)
	}

	// A commit with no workflow directory, and a commit that is not there.
	empty := newTestGit(t, false)
	c := empty.commit("no workflows", map[string]string{"a": "b"})
	erepo, _ := NewRepo(localSource(empty.dir), Options{})
	if files, err := erepo.Workflows(ctx, "", c); err != nil || len(files) != 0 {
		t.Errorf("no directory: %v %v", files, err)
	}
	_, err = repo.Workflows(ctx, "", strings.Repeat("d", 40))
	wantCode(t, err, kiln.CodeNotFound)
	_, err = repo.Workflows(ctx, "", "--output=/tmp/x")
	wantCode(t, err, kiln.CodeInvalid)
}

func TestLocalChangedFiles(t *testing.T) {
	g, c1, c2, c3 := sampleRepo(t)
	repo, _ := NewRepo(localSource(g.dir), Options{})
	ctx := t.Context()
	ev := &kiln.Event{Name: kiln.EventPush, Branch: "main", DefaultBranch: "main", Before: c1, SHA: c2}
	files, ok, err := repo.ChangedFiles(ctx, ev)
	if err != nil || !ok {
		t.Fatalf("%v %v", ok, err)
	}
	if want := []string{".kiln/workflows/big.yml", ".kiln/workflows/link.yml", "src/a.go"}; !slices.Equal(files, want) {
		t.Errorf("c1..c2 = %v, want %v", files, want)
	}

	// The first push of a feature branch counts from where it forked.
	ev = &kiln.Event{Name: kiln.EventPush, Branch: "feature", DefaultBranch: "main", Before: zeros, SHA: c3}
	if files, ok, err = repo.ChangedFiles(ctx, ev); err != nil || !ok || !slices.Equal(files, []string{"src/feature.go"}) {
		t.Errorf("new branch: %v %v %v", files, ok, err)
	}
	for name, ev := range map[string]*kiln.Event{
		"first push of main": {Name: kiln.EventPush, Branch: "main", DefaultBranch: "main", Before: zeros, SHA: c2},
		"unknown before":     {Name: kiln.EventPush, Branch: "main", Before: strings.Repeat("e", 40), SHA: c2},
		"pull request":       {Name: kiln.EventPullRequest, PR: &kiln.PR{Number: 1}, SHA: c2},
	} {
		if files, ok, err := repo.ChangedFiles(ctx, ev); err != nil || ok || files != nil {
			t.Errorf("%s: %v %v %v", name, files, ok, err)
		}
	}
}

func TestLocalResolveAndClone(t *testing.T) {
	g, c1, c2, c3 := sampleRepo(t)
	repo, _ := NewRepo(localSource(g.dir), Options{})
	ctx := t.Context()
	for ref, want := range map[string]string{"main": c2, "refs/heads/feature": c3, "v1": c1, c1[:10]: c1} {
		if got, err := repo.Resolve(ctx, "", ref); err != nil || got != want {
			t.Errorf("Resolve(%s) = %s, %v; want %s", ref, got, err, want)
		}
	}
	_, err := repo.Resolve(ctx, "", "nope")
	wantCode(t, err, kiln.CodeNotFound)
	_, err = repo.Resolve(ctx, "", "--all")
	wantCode(t, err, kiln.CodeInvalid)

	ci, err := repo.Clone(ctx, "")
	if err != nil || ci.URL != "file://"+g.dir || ci.Password != "" {
		t.Fatalf("Clone = %+v, %v", ci, err)
	}
	// An agent on the same host clones it over file://.
	dst := filepath.Join(t.TempDir(), "checkout")
	g.runIn("", "clone", "-q", ci.URL, dst)
	if b, err := os.ReadFile(filepath.Join(dst, "src/a.go")); err != nil || string(b) != "package a" {
		t.Errorf("clone: %q %v", b, err)
	}
	if err := repo.PostStatus(ctx, "", c2, Status{State: StateSuccess, Context: "kiln/ci"}); err != nil {
		t.Errorf("PostStatus on a local source: %v", err)
	}
}

func TestLocalEvent(t *testing.T) {
	g, c1, c2, c3 := sampleRepo(t)
	src := localSource(g.dir)
	ctx := t.Context()

	ev, err := LocalEvent(ctx, src, LocalPush{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := kiln.Event{Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: c2, Repository: "app",
		CloneURL: "file://" + g.dir, DefaultBranch: "main", Actor: "Ada Lovelace", Message: "second"}
	if !eventEqual(*ev, want) {
		t.Errorf("HEAD push:\n got %+v\nwant %+v", *ev, want)
	}

	ev, err = LocalEvent(ctx, src, LocalPush{Ref: "feature", Before: zeros, SHA: c3}, Options{})
	if err != nil || ev.Ref != "refs/heads/feature" || ev.Branch != "feature" || ev.SHA != c3 || ev.Before != zeros || ev.Message != "feature work" {
		t.Errorf("feature push: %+v %v", ev, err)
	}
	// The event feeds ChangedFiles directly.
	repo, _ := NewRepo(src, Options{})
	if files, ok, _ := repo.ChangedFiles(ctx, ev); !ok || !slices.Equal(files, []string{"src/feature.go"}) {
		t.Errorf("changed files of the feature push: %v %v", files, ok)
	}

	ev, err = LocalEvent(ctx, src, LocalPush{Ref: "v1"}, Options{})
	if err != nil || ev.Name != kiln.EventTag || ev.Tag != "v1" || ev.Ref != "refs/tags/v1" || ev.SHA != c1 || ev.Branch != "" {
		t.Errorf("tag: %+v %v", ev, err)
	}
	if ev.Message != "first\n\nwith a body" {
		t.Errorf("message %q", ev.Message)
	}

	for _, c := range []struct {
		push LocalPush
		code kiln.Code
	}{
		{LocalPush{Ref: "nope"}, kiln.CodeNotFound},
		{LocalPush{Ref: "-x"}, kiln.CodeInvalid},
		{LocalPush{Ref: "refs/notes/commits"}, kiln.CodeInvalid},
		{LocalPush{Ref: "main", SHA: "HEAD~1"}, kiln.CodeInvalid},
		{LocalPush{Ref: "main", SHA: strings.Repeat("f", 40)}, kiln.CodeNotFound},
		{LocalPush{Ref: "main", Before: "yesterday"}, kiln.CodeInvalid},
	} {
		_, err := LocalEvent(ctx, src, c.push, Options{})
		if kiln.ErrorCode(err) != c.code {
			t.Errorf("%+v: %v, want %s", c.push, err, c.code)
		}
	}
	_, err = LocalEvent(ctx, localSource(t.TempDir()), LocalPush{}, Options{})
	wantCode(t, err, kiln.CodeNotFound)
	_, err = LocalEvent(ctx, ghSource, LocalPush{}, Options{})
	wantCode(t, err, kiln.CodeInvalid)
}

func eventEqual(a, b kiln.Event) bool {
	return a.Name == b.Name && a.Ref == b.Ref && a.Branch == b.Branch && a.Tag == b.Tag && a.SHA == b.SHA && a.Before == b.Before &&
		a.Repository == b.Repository && a.CloneURL == b.CloneURL && a.DefaultBranch == b.DefaultBranch && a.Actor == b.Actor && a.Message == b.Message
}

// A server started from inside a git hook inherits GIT_DIR and friends;
// they must not redirect kiln's git commands to another repository.
func TestLocalIgnoresInheritedGitEnvironment(t *testing.T) {
	g, c1, _, _ := sampleRepo(t)
	other := newTestGit(t, false)
	other.commit("other", map[string]string{"x": "y"})
	t.Setenv("GIT_DIR", filepath.Join(other.dir, ".git"))
	t.Setenv("GIT_WORK_TREE", other.dir)
	t.Setenv("GIT_CONFIG_PARAMETERS", "'core.bare'='true'")
	repo, _ := NewRepo(localSource(g.dir), Options{})
	files, err := repo.Workflows(t.Context(), "", c1)
	if err != nil || len(files) != 2 {
		t.Fatalf("Workflows = %v, %v", paths(files), err)
	}
}

func TestLocalWorkflowsTooManyFiles(t *testing.T) {
	g := newTestGit(t, false)
	files := map[string]string{}
	for i := range DefaultMaxWorkflowFiles + 1 {
		files[".kiln/workflows/w"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strings.Repeat("0", i/26)+".yml"] = "on: push\n"
	}
	sha := g.commit("many", files)
	repo, _ := NewRepo(localSource(g.dir), Options{})
	_, err := repo.Workflows(t.Context(), "", sha)
	wantCode(t, err, kiln.CodeTooLarge)
}
