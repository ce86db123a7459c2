package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/forge"
)

// repo is a real git repository on main.
type repo struct {
	dir string
}

// newRepo makes a repository whose first commit on main holds files
// (path → content).
func newRepo(t testing.TB, files map[string]string) *repo {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	apitest.Git(t, "", "init", "-q", "-b", "main", dir)
	r := &repo{dir: dir}
	r.commit(t, "first", files)
	return r
}

// commit writes files and commits them on the current branch; it returns
// the new commit's sha.
func (r *repo) commit(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(r.dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	apitest.Git(t, r.dir, "add", "-A")
	apitest.Git(t, r.dir, "commit", "-q", "--allow-empty", "-m", msg)
	return r.head(t)
}

func (r *repo) head(t testing.TB) string {
	t.Helper()
	return apitest.Git(t, r.dir, "rev-parse", "HEAD")
}

// workflow is the path of a workflow file in a repository.
func workflow(name string) string { return ".kiln/workflows/" + name + ".yml" }

// addLocalSource configures dir as the local source name.
func addLocalSource(t testing.TB, c *api.Client, name, dir string) {
	t.Helper()
	src := forge.Source{Name: name, Kind: kiln.SourceLocal, Local: &forge.LocalConfig{Path: dir}}
	if _, err := c.AddSource(bg, src); err != nil {
		t.Fatalf("add source %s: %v", name, err)
	}
}

// triggerOne tells kiln main moved in the local source and returns the one
// run the push started.
func triggerOne(t testing.TB, c *api.Client, source string) api.Run {
	t.Helper()
	d, err := c.Trigger(bg, source, api.TriggerRequest{Ref: "main"}, true)
	if err != nil {
		t.Fatalf("trigger %s: %v", source, err)
	}
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("trigger %s: %s (%s), runs %v", source, d.Status, d.Message, d.Runs)
	}
	return getRun(t, c, d.Runs[0].ID)
}

// localRun is a server with a local source holding the given workflows,
// ready to trigger.
func localRun(t *testing.T, s *kilnServer, workflows map[string]string) *repo {
	t.Helper()
	files := map[string]string{"README": "app\n"}
	for name, yml := range workflows {
		files[workflow(name)] = yml
	}
	r := newRepo(t, files)
	addLocalSource(t, s.Client, "app", r.dir)
	return r
}
