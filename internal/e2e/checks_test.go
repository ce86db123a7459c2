package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// Commits of the checks test beyond GitHub's example push.
var (
	ghLintSHA     = strings.Repeat("b", 40)
	ghFallbackSHA = strings.Repeat("c", 40)
)

// startGitHubAppServer is startGitHubServer with a GitHub App source "gh"
// that posts check runs: the fake GitHub is the App's installation.
func startGitHubAppServer(t *testing.T) *ghServer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	gh := forgetest.NewGitHub(t)
	gh.SetApp(forgetest.App{ID: "4242", InstallationID: 77, Key: &key.PublicKey,
		Permissions: map[string]string{"contents": "read", "statuses": "write", "checks": "write"}})
	gate := t.TempDir() + "/gate"
	files := ghWorkflows(gate)
	gh.SetFiles(ghRepo, ghPushSHA, "master", files)
	s := startServer(t)
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gh.URL, WebhookSecret: ghSecret, Checks: true,
		App: &forge.GitHubApp{AppID: "4242", InstallationID: 77, PrivateKeyPEM: keyPEM}}}
	if _, err := s.Client.AddSource(bg, src); err != nil {
		t.Fatalf("add the github app source: %v", err)
	}
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "gh-agent"})
	startAgent(t, s.URL, secret, agentOpts{id: "gh-agent", maxJobs: 4})
	return &ghServer{kilnServer: s, gh: gh, webhook: s.URL + "/webhook/github/gh", gate: gate}
}

// pushAt is GitHub's example push moved to commit sha.
func pushAt(t testing.TB, sha string) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(ghPayload(t, "push.with-new-branch.payload.json"), &p); err != nil {
		t.Fatal(err)
	}
	p["after"] = sha
	if hc, ok := p["head_commit"].(map[string]any); ok {
		hc["id"] = sha
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkRun is the latest check run named name on sha.
func (g *ghServer) checkRun(sha, name string) (forgetest.CheckRun, bool) {
	runs := g.gh.CheckRuns()
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].HeadSHA == sha && runs[i].Name == name && runs[i].Repo == ghRepo {
			return runs[i], true
		}
	}
	return forgetest.CheckRun{}, false
}

// lineOf is the 1-based line of content that contains text.
func lineOf(t testing.TB, content, text string) int {
	for i, l := range strings.Split(content, "\n") {
		if strings.Contains(l, text) {
			return i + 1
		}
	}
	t.Fatalf("%q is not in the workflow", text)
	return 0
}

// A GitHub App source with checks on posts one check run per workflow and
// event instead of a commit status: created queued or in progress while
// the run waits, completed with its conclusion, a link to the run and a
// summary naming the failed job, the failing step annotated at its line
// of the workflow file with the end of its log. A push whose workflow
// fails lint gets a failed check run with each lint error annotated at
// its line. When GitHub refuses check runs (422) the server posts commit
// statuses instead and the run (or, for lint errors, the delivery) says
// why.
// Proves B277, B278 and B279 (docs/behaviours.md).
func TestGitHubAppSourcePostsCheckRuns(t *testing.T) {
	t.Parallel()
	g := startGitHubAppServer(t)
	c := g.Client
	d := waitDelivery(t, c, g.deliver(t, "push", "push-1", pushAt(t, ghPushSHA)))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 2 {
		t.Fatalf("push delivery: %s", describeDelivery(d))
	}
	// Both check runs exist while their runs wait at the gate.
	for _, wf := range []string{"ci", "fails"} {
		waittest.UntilState(t, 30*time.Second, "the check run of "+wf, func() (bool, string) {
			cr, ok := g.checkRun(ghPushSHA, "kiln/"+wf+" (push)")
			return ok && (cr.Status == "queued" || cr.Status == "in_progress"), fmt.Sprintf("%+v", g.gh.CheckRuns())
		})
	}
	g.open(t)
	runs := map[string]api.Run{}
	for _, ref := range d.Runs {
		r := waitRun(t, c, ref.ID, time.Minute)
		runs[r.Workflow] = r
	}
	for wf, want := range map[string]string{"ci": "success", "fails": "failure"} {
		waittest.UntilState(t, 30*time.Second, "the check run of "+wf+" to complete", func() (bool, string) {
			cr, ok := g.checkRun(ghPushSHA, "kiln/"+wf+" (push)")
			return ok && cr.Status == "completed", fmt.Sprintf("%+v", cr)
		})
		cr, _ := g.checkRun(ghPushSHA, "kiln/"+wf+" (push)")
		link := fmt.Sprintf("%s/runs/%d", g.Config.PublicURL, runs[wf].Number)
		if cr.Conclusion != want || cr.DetailsURL != link || cr.ExternalID != runs[wf].ID || cr.StartedAt == "" || cr.CompletedAt == "" {
			t.Errorf("%s: check run %+v, want %s linking %s", wf, cr, want, link)
		}
	}
	fails, _ := g.checkRun(ghPushSHA, "kiln/fails (push)")
	if fails.Output.Title != "1 of 1 job failed" || !strings.Contains(fails.Output.Summary, "**broken** failed") {
		t.Errorf("failed run's output: %+v", fails.Output)
	}
	content := ghWorkflows(g.gate)[workflow("fails")]
	if len(fails.Annotations) != 1 {
		t.Fatalf("annotations %+v", fails.Annotations)
	}
	a := fails.Annotations[0]
	t.Logf("the failed run's check run: %q\n%s\nannotation %s:%d %q: %q", fails.Output.Title, fails.Output.Summary, a.Path, a.StartLine, a.Title, a.Message)
	if a.Path != workflow("fails") || a.StartLine != lineOf(t, content, "about to fail; exit 1") || a.Level != "failure" ||
		!strings.Contains(a.Message, "about to fail") || !strings.HasPrefix(a.Title, "broken › ") {
		t.Errorf("the failing step's annotation: %+v", a)
	}
	ci, _ := g.checkRun(ghPushSHA, "kiln/ci (push)")
	if len(ci.Annotations) != 0 || ci.Output.Title != "the job passed" {
		t.Errorf("passing run's check run: %+v", ci)
	}
	if sts := g.gh.Statuses(); len(sts) != 0 {
		t.Errorf("commit statuses besides check runs: %+v", sts)
	}

	// A workflow that fails lint: a failed check run, its errors annotated.
	bad := "name: bad\non:\n  push:\n    branches: [master]\njobs:\n  x:\n    runs_onn: [linux]\n    steps:\n      - run: true\n"
	ciFile := ghWorkflows(g.gate)[workflow("ci")]
	g.gh.SetFiles(ghRepo, ghLintSHA, "", map[string]string{workflow("ci"): ciFile, workflow("bad"): bad})
	d = waitDelivery(t, c, g.deliver(t, "push", "push-lint", pushAt(t, ghLintSHA)))
	if d.Status != kiln.DeliveryInvalidWorkflow {
		t.Fatalf("lint delivery: %s", describeDelivery(d))
	}
	waittest.UntilState(t, 30*time.Second, "the lint check run", func() (bool, string) {
		_, ok := g.checkRun(ghLintSHA, "kiln/bad (push)")
		return ok, fmt.Sprintf("%+v", g.gh.CheckRuns())
	})
	lint, _ := g.checkRun(ghLintSHA, "kiln/bad (push)")
	if lint.Conclusion != "failure" || lint.ExternalID != fmt.Sprintf("delivery-%d", d.ID) || len(lint.Annotations) == 0 {
		t.Fatalf("lint check run %+v", lint)
	}
	found := false
	for _, a := range lint.Annotations {
		found = found || (a.Path == workflow("bad") && a.StartLine == lineOf(t, bad, "runs_onn") && strings.Contains(a.Message, "runs_onn"))
	}
	if !found {
		t.Errorf("no annotation of the unknown key runs_onn at its line: %+v", lint.Annotations)
	}

	// GitHub refuses check runs: commit statuses instead, and the run says why.
	g.gh.FailChecks(http.StatusUnprocessableEntity, "Validation Failed")
	g.gh.SetFiles(ghRepo, ghFallbackSHA, "", map[string]string{workflow("ci"): ciFile})
	d = waitDelivery(t, c, g.deliver(t, "push", "push-fallback", pushAt(t, ghFallbackSHA)))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("fallback delivery: %s", describeDelivery(d))
	}
	run := waitRun(t, c, d.Runs[0].ID, time.Minute)
	waittest.UntilState(t, 30*time.Second, "a success status instead of a check run", func() (bool, string) {
		sts := g.statusesOf(ghFallbackSHA, "kiln/ci (push)")
		return len(sts) > 0 && sts[len(sts)-1].State == "success", fmt.Sprint(g.gh.Statuses())
	})
	waittest.UntilState(t, 30*time.Second, "the run to say why", func() (bool, string) {
		r := getRun(t, c, run.ID)
		return strings.Contains(r.ReportNote, "Validation Failed") && strings.Contains(r.ReportNote, "commit status"), r.ReportNote
	})
	// A lint check run refused: a failure status, and the delivery says why.
	lintSHA2 := strings.Repeat("d", 40)
	g.gh.SetFiles(ghRepo, lintSHA2, "", map[string]string{workflow("bad"): bad})
	id := g.deliver(t, "push", "push-lint-fallback", pushAt(t, lintSHA2))
	waittest.UntilState(t, 30*time.Second, "a failure status for the broken workflow", func() (bool, string) {
		sts := g.statusesOf(lintSHA2, "kiln/bad (push)")
		return len(sts) > 0 && sts[len(sts)-1].State == "failure", fmt.Sprint(g.gh.Statuses())
	})
	waittest.UntilState(t, 30*time.Second, "the delivery to say why", func() (bool, string) {
		d, err := c.Event(bg, id)
		return err == nil && d.Status == kiln.DeliveryInvalidWorkflow && strings.Contains(d.Message, "GitHub refused the check run kiln/bad (push)"), d.Message
	})
	if log, err := os.ReadFile(g.log.path); err == nil && !strings.Contains(string(log), "check run refused; posted a commit status instead") {
		t.Errorf("the server log does not say why the check run became a status")
	}
}
