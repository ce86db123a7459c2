package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
)

// gitHTTP serves the bare repositories under root over git's smart HTTP
// protocol (git http-backend), as GitHub serves clones: only to requests
// carrying the user x-access-token with token as the password.
type gitHTTP struct {
	*httptest.Server
	refused atomic.Int64 // requests without the right credentials
	served  atomic.Int64
}

func newGitHTTP(t testing.TB, root, token string) *gitHTTP {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"},
	}
	if _, err := os.Stat(h.Path); err != nil {
		t.Skipf("!!! git http-backend is not installed (%v): the HTTPS checkout is not tested", err)
	}
	g := &gitHTTP{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "x-access-token" || pass != token {
			g.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
			http.Error(w, "Invalid username or token.", http.StatusUnauthorized)
			return
		}
		g.served.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// A push to a GitHub source runs a job that checks out the pushed commit
// the way it would from github.com: over HTTPS (git's smart HTTP
// protocol) from the source's web base, authenticated with the source's
// token as x-access-token — credentials the orchestrator adds when it
// sends the job, and that never show in the job's log.
// Proves B58 (docs/behaviours.md).
func TestGitHubRunChecksOutThePushedCommitWithTheSourceToken(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	bare := filepath.Join(root, ghRepo+".git")
	apitest.Git(t, "", "init", "-q", "--bare", "-b", "master", bare)
	apitest.Git(t, bare, "config", "uploadpack.allowAnySHA1InWant", "true")
	wf := `on:
  push:
    branches: [master]
jobs:
  build:
    steps:
      - run: echo "at $(git rev-parse HEAD) $(cat hello.txt)"
`
	work := newRepo(t, map[string]string{workflow("ci"): wf, "hello.txt": "hello from the checkout"})
	apitest.Git(t, work.dir, "push", "-q", bare, "main:master")
	sha := work.head(t)
	gitSrv := newGitHTTP(t, root, ghAPIToken)

	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gh.SetFiles(ghRepo, sha, "master", map[string]string{workflow("ci"): wf})
	s := startServer(t)
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gh.URL, WebBase: gitSrv.URL, Token: ghAPIToken, WebhookSecret: ghSecret}}
	if _, err := s.Client.AddSource(bg, src); err != nil {
		t.Fatal(err)
	}
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "cloner"})

	// GitHub's push payload, at the commit this test pushed.
	var p map[string]any
	if err := json.Unmarshal(ghPayload(t, "push.with-new-branch.payload.json"), &p); err != nil {
		t.Fatal(err)
	}
	p["after"] = sha
	p["head_commit"].(map[string]any)["id"] = sha
	body, _ := json.Marshal(p)
	g := &ghServer{kilnServer: s, gh: gh, webhook: s.URL + "/webhook/github/gh"}
	d := waitDelivery(t, s.Client, g.deliver(t, "push", "clone-1", body))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("delivery: %s", describeDelivery(d))
	}
	run := waitRun(t, s.Client, d.Runs[0].ID, time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s\ncheckout log: %q", describeRun(run), texts(logLines(t, s.Client, run.ID, "build", intp(-1))))
	}
	if said := texts(logLines(t, s.Client, run.ID, "build", intp(0))); len(said) != 1 || said[0] != "at "+sha+" hello from the checkout" {
		t.Fatalf("the step saw %q", said)
	}
	if gitSrv.served.Load() == 0 || gitSrv.refused.Load() != 0 {
		t.Fatalf("git requests: %d served, %d refused for missing credentials", gitSrv.served.Load(), gitSrv.refused.Load())
	}
	for _, l := range logLines(t, s.Client, run.ID, "", nil) {
		if strings.Contains(l.Text, ghAPIToken) {
			t.Fatalf("the token shows in the log: %q", l.Text)
		}
	}
}
