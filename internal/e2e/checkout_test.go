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
	"github.com/kilnci/kiln/internal/waittest"
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
// protocol) from the source's web base, authenticated as x-access-token
// with the source's read-only clone token — credentials the orchestrator
// adds when it sends the job, never the source's own token (which can
// push), and that never show in the job's log. Then the attack: a
// stranger's pull request from a fork waits for approval (its commit
// status says so) until an admin approves it, runs with the same
// read-only credentials, and a source without a clone credential clones
// anonymously, which a private repository refuses with a message naming
// the flag that fixes it.
// Proves B58, B97, B100, B282 (docs/behaviours.md).
func TestGitHubRunChecksOutThePushedCommitWithTheCloneToken(t *testing.T) {
	t.Parallel()
	const cloneToken = "github_pat_e2e-read-only"
	root := t.TempDir()
	bare := filepath.Join(root, ghRepo+".git")
	apitest.Git(t, "", "init", "-q", "--bare", "-b", "master", bare)
	apitest.Git(t, bare, "config", "uploadpack.allowAnySHA1InWant", "true")
	wf := `on:
  push:
    branches: [master]
  pull_request:
    branches: [master]
jobs:
  build:
    steps:
      - run: echo "at $(git rev-parse HEAD) $(cat hello.txt)"
`
	work := newRepo(t, map[string]string{workflow("ci"): wf, "hello.txt": "hello from the checkout"})
	apitest.Git(t, work.dir, "push", "-q", bare, "main:master")
	sha := work.head(t)
	// The fork's commit, which GitHub keeps in the base repository as
	// refs/pull/2/head.
	forkSHA := work.commit(t, "from a fork", map[string]string{"hello.txt": "hello from a fork"})
	apitest.Git(t, work.dir, "push", "-q", bare, "HEAD:refs/pull/2/head")
	gitSrv := newGitHTTP(t, root, cloneToken)

	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gh.SetFiles(ghRepo, sha, "master", map[string]string{workflow("ci"): wf})
	gh.SetFiles(ghRepo, forkSHA, "", map[string]string{workflow("ci"): wf})
	s := startServer(t)
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gh.URL, WebBase: gitSrv.URL, Token: ghAPIToken, WebhookSecret: ghSecret,
		Clone: &forge.CloneConfig{Token: cloneToken}}}
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
	noTokensInLogs(t, s.Client, run.ID, ghAPIToken, cloneToken)

	forkRun := approveFork(t, g, forkSHA)
	if said := texts(logLines(t, s.Client, forkRun.ID, "build", intp(0))); len(said) != 1 || said[0] != "at "+forkSHA+" hello from a fork" {
		t.Fatalf("the fork's step saw %q", said)
	}
	noTokensInLogs(t, s.Client, forkRun.ID, ghAPIToken, cloneToken)

	// Without a clone credential the checkout is anonymous, and the
	// private repository refuses it: the job says which flag fixes that.
	if _, err := s.Client.UpdateSource(bg, "gh", map[string]any{"github": map[string]any{"clone": nil}}); err != nil {
		t.Fatal(err)
	}
	again, err := s.Client.RerunRun(bg, run.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	failed := waitRun(t, s.Client, again.ID, time.Minute)
	if failed.Status != kiln.RunFailed || !strings.Contains(failed.Jobs[0].Error, "--clone-token-env") ||
		!strings.Contains(strings.Join(texts(logLines(t, s.Client, again.ID, "build", intp(-1))), "\n"), "kiln sources update gh --clone-token-env") {
		t.Fatalf("anonymous checkout of a private repository: %s\njob error %q", describeRun(failed), failed.Jobs[0].Error)
	}
}

// approveFork sends a stranger's pull request from a fork at sha and
// checks that its run waits for approval — jobs pending, the commit status
// pending with the reason — until the admin approves it; it returns the
// finished run.
func approveFork(t *testing.T, g *ghServer, sha string) api.Run {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(ghPayload(t, "pull_request.opened.payload.json"), &p); err != nil {
		t.Fatal(err)
	}
	pr := p["pull_request"].(map[string]any)
	pr["head"].(map[string]any)["sha"] = sha
	pr["head"].(map[string]any)["repo"].(map[string]any)["full_name"] = "mallory/Hello-World"
	pr["user"].(map[string]any)["login"] = "mallory"
	pr["author_association"] = "FIRST_TIME_CONTRIBUTOR"
	body, _ := json.Marshal(p)
	d := waitDelivery(t, g.Client, g.deliver(t, "pull_request", "fork-1", body))
	const reason = "waiting for approval: pull request from fork mallory/Hello-World by mallory"
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 || !strings.Contains(d.Message, reason) {
		t.Fatalf("fork delivery: %s", describeDelivery(d))
	}
	waittest.Until(t, time.Minute, "the held run's commit status", func() bool {
		sts := g.statusesOf(sha, "kiln/ci (pull_request)")
		return len(sts) > 0 && sts[len(sts)-1].State == "pending" && sts[len(sts)-1].Description == reason
	})
	held, err := g.Client.GetRun(bg, d.Runs[0].ID)
	if err != nil || held.Approval == nil || held.Approval.State != api.ApprovalWaiting || held.Jobs[0].Status != kiln.JobPending ||
		held.Jobs[0].PendingReason != reason {
		t.Fatalf("held fork run: %+v (%v)", held.Approval, err)
	}
	approved, err := g.Client.ApproveRun(bg, held.ID)
	if err != nil || approved.Approval.State != api.ApprovalApproved || approved.Approval.ApprovedBy == "" {
		t.Fatalf("approve: %+v %v", approved.Approval, err)
	}
	run := waitRun(t, g.Client, held.ID, time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s\ncheckout log: %q", describeRun(run), texts(logLines(t, g.Client, run.ID, "build", intp(-1))))
	}
	waittest.Until(t, time.Minute, "the fork run's final commit status", func() bool {
		sts := g.statusesOf(sha, "kiln/ci (pull_request)")
		return len(sts) > 0 && sts[len(sts)-1].State == "success"
	})
	return run
}

func noTokensInLogs(t *testing.T, c *api.Client, run string, tokens ...string) {
	t.Helper()
	for _, l := range logLines(t, c, run, "", nil) {
		for _, tok := range tokens {
			if strings.Contains(l.Text, tok) {
				t.Fatalf("a token shows in the log: %q", l.Text)
			}
		}
	}
}
