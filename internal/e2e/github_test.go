package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// GitHub's example payloads (internal/trigger/testdata/github, from
// octokit/webhooks): a push creating master in Codertocat/Hello-World, a
// pull request opened against master, and a tag deletion.
const (
	ghRepo     = "Codertocat/Hello-World"
	ghPushSHA  = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	ghPRHead   = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
	ghSecret   = "It's a Secret to Everybody"
	ghAPIToken = "ghs_e2e-token"
)

func ghPayload(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "trigger", "testdata", "github", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendGitHub posts a delivery the way GitHub does and returns the status
// and the decoded answer.
func sendGitHub(t testing.TB, url, event, delivery string, body []byte, secret string) (int, map[string]any) {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/e2e")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Hook-ID", "292430182")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("deliver %s: %v", event, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// acceptedDelivery is the event-log id of a 202 answer.
func acceptedDelivery(t testing.TB, code int, out map[string]any) int64 {
	t.Helper()
	id, ok := out["delivery"].(float64)
	if code != http.StatusAccepted || !ok {
		t.Fatalf("answer %d %v, want 202 with a delivery", code, out)
	}
	return int64(id)
}

// waitDelivery waits until the event-log row is processed (or ended
// otherwise) and returns it.
func waitDelivery(t testing.TB, c *api.Client, id int64) api.Delivery {
	t.Helper()
	var d api.Delivery
	waittest.UntilState(t, 30*time.Second, fmt.Sprintf("event %d to be processed", id), func() (bool, string) {
		var err error
		d, err = c.Event(bg, id)
		if err != nil {
			return false, err.Error()
		}
		return d.Status != kiln.DeliveryReceived, fmt.Sprintf("%s %s", d.Status, d.Message)
	})
	return d
}

// ghWorkflows are the workflow files the fake GitHub serves: ci runs for
// pushes to master, pull requests into master and simple-* tags; fails
// runs for pushes and fails. Both wait for the gate file, so the test sees
// their pending statuses first.
func ghWorkflows(gate string) map[string]string {
	wait := fmt.Sprintf(`while [ ! -f %s ]; do sleep 0.02; done`, gate)
	return map[string]string{
		workflow("ci"): `name: ci
on:
  push:
    branches: [master]
  pull_request:
    branches: [master]
  tag: ["simple-*"]
jobs:
  hello:
    runs_on: [linux]
    checkout: false
    steps:
      - name: gate
        run: ` + wait + `
      - name: say
        run: echo "${{ event.name }} ${{ event.ref }} ${{ event.sha }} pr=${{ event.pr.number }} by ${{ event.actor }}"
`,
		workflow("fails"): `name: fails
on:
  push:
    branches: [master]
jobs:
  broken:
    checkout: false
    steps:
      - run: ` + wait + `
      - run: echo about to fail; exit 1
`,
	}
}

// ghServer is a server with a GitHub source "gh" backed by a fake GitHub
// API, and a real agent process.
type ghServer struct {
	*kilnServer
	gh      *forgetest.GitHub
	webhook string
	gate    string
}

func startGitHubServer(t *testing.T, dbURL string) *ghServer {
	t.Helper()
	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gate := filepath.Join(t.TempDir(), "gate")
	files := ghWorkflows(gate)
	gh.SetFiles(ghRepo, ghPushSHA, "master", files)
	gh.SetFiles(ghRepo, ghPRHead, "", files)
	s := startServer(t, func(c *server.Config) { c.Database = dbURL })
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gh.URL, Token: ghAPIToken, WebhookSecret: ghSecret}}
	if _, err := s.Client.AddSource(bg, src); err != nil {
		t.Fatalf("add the github source: %v", err)
	}
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "gh-agent"})
	startAgent(t, s.URL, secret, agentOpts{id: "gh-agent", maxJobs: 4})
	return &ghServer{kilnServer: s, gh: gh, webhook: s.URL + "/webhook/github/gh", gate: gate}
}

// deliver sends a properly signed delivery and returns its event-log id.
func (g *ghServer) deliver(t testing.TB, event, delivery string, body []byte) int64 {
	t.Helper()
	code, out := sendGitHub(t, g.webhook, event, delivery, body, ghSecret)
	return acceptedDelivery(t, code, out)
}

func (g *ghServer) open(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(g.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// statusesOf are the statuses posted for sha in context, in order.
func (g *ghServer) statusesOf(sha, context string) []forgetest.Status {
	var out []forgetest.Status
	for _, st := range g.gh.Statuses() {
		if st.SHA == sha && st.Context == context && st.Repo == ghRepo {
			out = append(out, st)
		}
	}
	return out
}

func runCount(t testing.TB, c *api.Client) int {
	t.Helper()
	l, err := c.ListRuns(bg, api.RunFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Runs)
}

func eventCount(t testing.TB, c *api.Client) int {
	t.Helper()
	l, err := c.Events(bg, api.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Events)
}

// GitHub's own push payload, signed, reaches a server whose GitHub source
// is a fake GitHub API: the workflows are read at the pushed commit, a
// real agent process runs the matched ones, and commit statuses go back —
// pending, then success for the passing workflow and failure for the
// failing one, with the context "kiln/<workflow> (push)" and a link to the run. The
// same delivery again is a duplicate; a bad signature is 401 and records
// nothing; a pull request and a tag push start their triggers' runs, a
// tag deletion starts none. On SQLite and PostgreSQL.
// Proves B68, B272 and B280 (docs/behaviours.md).
func TestGitHubWebhookRunsTheMatchedWorkflowOnARealAgent(t *testing.T) {
	t.Parallel()
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			dbURL := ""
			if b.Name != "sqlite" {
				dbURL = b.URL(t)
			}
			testGitHubWebhook(t, startGitHubServer(t, dbURL))
		})
	}
}

func testGitHubWebhook(t *testing.T, g *ghServer) {
	c := g.Client
	push := ghPayload(t, "push.with-new-branch.payload.json")
	d := waitDelivery(t, c, g.deliver(t, "push", "push-1", push))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 2 || d.Source != "gh" || d.Kind != "github" {
		t.Fatalf("push delivery: %s", describeDelivery(d))
	}
	runs := map[string]api.Run{}
	for _, ref := range d.Runs {
		r := getRun(t, c, ref.ID)
		runs[r.Workflow] = r
	}
	ci, fails := runs["ci"], runs["fails"]
	if ci.SHA != ghPushSHA || ci.Ref != "refs/heads/master" || ci.Repository != ghRepo || ci.Trigger != kiln.EventPush ||
		ci.Actor != "Codertocat" || ci.Source != "gh" || fails.ID == "" {
		t.Fatalf("runs of the push: %+v", runs)
	}
	// Both runs are pending on GitHub before they finish.
	for _, wf := range []string{"ci", "fails"} {
		waittest.UntilState(t, 30*time.Second, "a pending status for kiln/"+wf, func() (bool, string) {
			sts := g.statusesOf(ghPushSHA, "kiln/"+wf+" (push)")
			return len(sts) > 0, fmt.Sprint(g.gh.Statuses())
		})
	}

	// The same delivery again is a duplicate: no new run.
	code, out := sendGitHub(t, g.webhook, "push", "push-1", push, ghSecret)
	if code != http.StatusAccepted || out["duplicate"] != true {
		t.Fatalf("redelivery: %d %v", code, out)
	}
	// A bad signature is refused and records nothing.
	events, nruns := eventCount(t, c), runCount(t, c)
	for _, secret := range []string{"wrong secret", ""} {
		if code, out := sendGitHub(t, g.webhook, "push", "push-forged", push, secret); code != http.StatusUnauthorized {
			t.Fatalf("forged delivery: %d %v", code, out)
		}
	}
	if e, r := eventCount(t, c), runCount(t, c); e != events || r != nruns || r != 2 {
		t.Fatalf("after a duplicate and forged deliveries: %d events (was %d), %d runs (was %d)", e, events, r, nruns)
	}

	g.open(t)
	ci, fails = waitRun(t, c, ci.ID, time.Minute), waitRun(t, c, fails.ID, time.Minute)
	if ci.Status != kiln.RunSuccess || fails.Status != kiln.RunFailed {
		t.Fatalf("%s / %s", describeRun(ci), describeRun(fails))
	}
	say := texts(logLines(t, c, ci.ID, "hello", intp(1)))
	if want := "push refs/heads/master " + ghPushSHA + " pr= by Codertocat"; len(say) != 1 || say[0] != want {
		t.Fatalf("the step saw %q, want %q", say, want)
	}
	for _, want := range []struct {
		run   api.Run
		state string
	}{{ci, "success"}, {fails, "failure"}} {
		ctx := "kiln/" + want.run.Workflow + " (push)"
		waittest.UntilState(t, 30*time.Second, ctx+" to be "+want.state, func() (bool, string) {
			sts := g.statusesOf(ghPushSHA, ctx)
			return len(sts) > 0 && sts[len(sts)-1].State == want.state, fmt.Sprint(sts)
		})
		sts := g.statusesOf(ghPushSHA, ctx)
		if sts[0].State != "pending" {
			t.Fatalf("%s: first status %q, want pending: %v", ctx, sts[0].State, sts)
		}
		link := fmt.Sprintf("%s/runs/%d", g.Config.PublicURL, want.run.Number)
		for _, st := range sts {
			if st.TargetURL != link || !strings.Contains(st.Description, fmt.Sprintf("#%d", want.run.Number)) {
				t.Fatalf("%s: status %+v, want the link %s", ctx, st, link)
			}
		}
	}

	// B280: the failed run's final status names the job that failed.
	if sts := g.statusesOf(ghPushSHA, "kiln/fails (push)"); !strings.HasSuffix(sts[len(sts)-1].Description, ": 1 of 1 job failed (broken)") {
		t.Errorf("the failed run's status says %q, not which job failed", sts[len(sts)-1].Description)
	}

	// A pull request opened against master runs ci on its head commit.
	d = waitDelivery(t, c, g.deliver(t, "pull_request", "pr-1", ghPayload(t, "pull_request.opened.payload.json")))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("pull request delivery: %s", describeDelivery(d))
	}
	pr := waitRun(t, c, d.Runs[0].ID, time.Minute)
	if pr.Workflow != "ci" || pr.Trigger != kiln.EventPullRequest || pr.SHA != ghPRHead || pr.Status != kiln.RunSuccess {
		t.Fatalf("pull request run: %s %s %s: %s", pr.Workflow, pr.Trigger, pr.SHA, describeRun(pr))
	}
	if say := texts(logLines(t, c, pr.ID, "hello", intp(1))); len(say) != 1 || !strings.Contains(say[0], "pr=2") {
		t.Fatalf("the pull request's step saw %q", say)
	}
	// B272: its status has its own context, so a push run on the same
	// commit could not overwrite it.
	waittest.UntilState(t, 30*time.Second, "the pull request run's status", func() (bool, string) {
		sts := g.statusesOf(ghPRHead, "kiln/ci (pull_request)")
		return len(sts) > 0 && sts[len(sts)-1].State == "success", fmt.Sprint(g.gh.Statuses())
	})

	// GitHub's example tag push is a deletion: it starts nothing.
	tagDeletion := ghPayload(t, "push.payload.json")
	d = waitDelivery(t, c, g.deliver(t, "push", "tag-del", tagDeletion))
	if d.Status != kiln.DeliveryIgnored || len(d.Runs) != 0 {
		t.Fatalf("tag deletion: %s", describeDelivery(d))
	}
	// The same push creating the tag (GitHub's fields for a created ref)
	// runs ci through its tag trigger.
	tagPush := createdTag(t, tagDeletion)
	d = waitDelivery(t, c, g.deliver(t, "push", "tag-new", tagPush))
	if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("tag push: %s", describeDelivery(d))
	}
	tag := waitRun(t, c, d.Runs[0].ID, time.Minute)
	if tag.Workflow != "ci" || tag.Trigger != kiln.EventTag || tag.Ref != "refs/tags/simple-tag" || tag.Status != kiln.RunSuccess {
		t.Fatalf("tag run: %s %s %s: %s", tag.Workflow, tag.Trigger, tag.Ref, describeRun(tag))
	}
}

// createdTag turns GitHub's tag-deletion push into the push that created
// the tag: after is the commit, before all zeros, created rather than
// deleted.
func createdTag(t testing.TB, deletion []byte) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(deletion, &p); err != nil {
		t.Fatal(err)
	}
	p["before"], p["after"] = strings.Repeat("0", 40), ghPushSHA
	p["created"], p["deleted"] = true, false
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// describeDelivery is an event-log row without its body.
func describeDelivery(d api.Delivery) string {
	return fmt.Sprintf("event %d %s %s/%s from %s: %s %q runs %v attempts %d processed %v",
		d.ID, d.DeliveryID, d.Kind, d.Event, d.Source, d.Status, d.Message, d.Runs, d.Attempts, d.ProcessedAt)
}
