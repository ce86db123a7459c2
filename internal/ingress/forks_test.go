package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/store"
)

const (
	prSHA     = "ec26c3e57ca3a959ca5aad62de7213c562f8c821" // the real payloads' head commit
	prYAML    = "on: pull_request\njobs:\n  build:\n    runs_on: [linux]\n    steps: [{run: make}]\n"
	giteaRepo = "kiln-org/app"
	giteaSHA  = "c0ffee00d15ea5e5badc0de0123456789abcdef0"
)

// forkPayload is a real GitHub pull_request payload rewritten as opened
// from fork head by author, whom GitHub relates to the repository as
// association.
func forkPayload(t *testing.T, head, author, association string) []byte {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(payload(t, "pull_request.opened.payload.json"), &p); err != nil {
		t.Fatal(err)
	}
	pr := p["pull_request"].(map[string]any)
	pr["head"].(map[string]any)["repo"].(map[string]any)["full_name"] = head
	pr["user"].(map[string]any)["login"] = author
	pr["author_association"] = association
	b, _ := json.Marshal(p)
	return b
}

// setPolicy sets a source's fork policy and labels.
func setPolicy(t *testing.T, db *store.DB, name string, policy kiln.ForkPolicy, labels ...string) {
	t.Helper()
	st, err := db.Sources().GetByName(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	st.ForkPullRequests, st.ForkLabels = policy, kiln.NewLabels(labels...)
	if err := db.Sources().Update(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) runOf(t *testing.T, d store.Delivery) store.Run {
	t.Helper()
	if len(d.RunIDs) != 1 {
		t.Fatalf("delivery %s %q made %d runs", d.Status, d.Message, len(d.RunIDs))
	}
	run, err := f.db.Runs().Get(context.Background(), d.RunIDs[0])
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// The attack: a stranger opens a pull request from a fork. Under the
// default policy (approve) its run is created held, every job pending with
// the reason, and the delivery says so; a pull request from a fork by a
// member of the repository runs at once; under "run" the stranger's runs
// at once too; under "deny" the delivery is recorded as ignored with the
// reason and nothing is created. Every fork job keeps to the labels the
// source allows forks.
// Proves B99 (docs/behaviours.md).
func TestGitHubForkPullRequestPolicies(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		f.gh.SetFiles(repo, prSHA, "", map[string]string{".kiln/workflows/ci.yml": prYAML})
		const reason = "waiting for approval: pull request from fork mallory/Hello-World by mallory"

		_, out := f.send(t, "pull_request", "f-1", forkPayload(t, "mallory/Hello-World", "mallory", "FIRST_TIME_CONTRIBUTOR"), "")
		d := f.finished(t, deliveryID(t, out))
		run := f.runOf(t, d)
		if d.Status != kiln.DeliveryProcessed || !strings.Contains(d.Message, reason) {
			t.Fatalf("outsider's delivery: %s %q", d.Status, d.Message)
		}
		if !run.Approval.Waiting() || run.Approval.Reason != reason {
			t.Fatalf("outsider's run: approval %+v", run.Approval)
		}
		if j := run.Jobs[0]; j.Status != kiln.JobPending || j.PendingReason != reason || j.Requirement.Key() != "linux fork:" {
			t.Fatalf("outsider's job: %s %q %q", j.Status, j.PendingReason, j.Requirement.Key())
		}

		_, out = f.send(t, "pull_request", "f-2", forkPayload(t, "octocat/Hello-World", "octocat", "MEMBER"), "")
		run = f.runOf(t, f.finished(t, deliveryID(t, out)))
		if run.Approval != nil || run.Jobs[0].Status != kiln.JobQueued || !run.Jobs[0].Requirement.Fork {
			t.Fatalf("member's fork run: approval %+v, job %s %+v", run.Approval, run.Jobs[0].Status, run.Jobs[0].Requirement)
		}

		setPolicy(t, f.db, "gh", kiln.ForkRun, "gpu")
		_, out = f.send(t, "pull_request", "f-3", forkPayload(t, "mallory/Hello-World", "mallory", "NONE"), "")
		run = f.runOf(t, f.finished(t, deliveryID(t, out)))
		if run.Approval != nil || run.Jobs[0].Status != kiln.JobQueued || run.Jobs[0].Requirement.Key() != "linux fork:gpu" {
			t.Fatalf("outsider under run: approval %+v, job %s %q", run.Approval, run.Jobs[0].Status, run.Jobs[0].Requirement.Key())
		}

		setPolicy(t, f.db, "gh", kiln.ForkDeny)
		before, _ := f.db.Runs().List(context.Background(), store.RunFilter{Limit: 100})
		// (A space makes it another body than f-2's: the same signed body
		// again would be a replay, B116.)
		_, out = f.send(t, "pull_request", "f-4", append(forkPayload(t, "octocat/Hello-World", "octocat", "MEMBER"), ' '), "")
		d = f.finished(t, deliveryID(t, out))
		if d.Status != kiln.DeliveryIgnored || d.Message != "pull request from fork octocat/Hello-World by octocat: the source denies fork pull requests" {
			t.Fatalf("denied delivery: %s %q", d.Status, d.Message)
		}
		if after, _ := f.db.Runs().List(context.Background(), store.RunFilter{Limit: 100}); len(after) != len(before) {
			t.Fatal("a denied fork pull request created a run")
		}
		// A branch of the repository itself is no fork: it runs.
		_, out = f.send(t, "pull_request", "f-5", payload(t, "pull_request.opened.payload.json"), "")
		run = f.runOf(t, f.finished(t, deliveryID(t, out)))
		if run.Jobs[0].Status != kiln.JobQueued || run.Jobs[0].Requirement.Fork {
			t.Fatalf("the repository's own pull request: %s %+v", run.Jobs[0].Status, run.Jobs[0].Requirement)
		}
	})
}

// A Gitea pull request from a fork says nothing of its author: kiln asks
// Gitea's collaborators API. A collaborator's runs at once; a
// non-collaborator's, and one Gitea cannot answer for (500), waits for
// approval.
// Proves B99 (docs/behaviours.md).
func TestGiteaForkPullRequestAsksTheCollaboratorsAPI(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		gt := forgetest.NewGitea(t)
		gt.Token = "gt-token"
		gt.SetFiles(giteaRepo, giteaSHA, "", map[string]string{".kiln/workflows/ci.yml": prYAML})
		st, err := Encode(&forge.Source{Name: "gt", Kind: kiln.SourceGitea, Gitea: &forge.GiteaConfig{APIBase: gt.URL, Token: "gt-token", WebhookSecret: secret}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.Sources().Create(context.Background(), st); err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile("../trigger/testdata/gitea/pull_request.opened.json")
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			answer int
			held   bool
		}{{http.StatusNoContent, false}, {http.StatusNotFound, true}, {http.StatusInternalServerError, true}} {
			gt.SetCollaborator(giteaRepo, "bob", c.answer)
			// Each its own body: the same one again would be a replay (B116).
			d := f.finished(t, f.sendGitea(t, "g-"+string(rune('a'+i)), append(slices.Clone(body), strings.Repeat(" ", i)...)))
			run := f.runOf(t, d)
			if run.Approval.Waiting() != c.held {
				t.Fatalf("Gitea answered %d: held %v, want %v (%q)", c.answer, run.Approval.Waiting(), c.held, d.Message)
			}
			if c.held && run.Approval.Reason != "waiting for approval: pull request from fork bob/app by bob" {
				t.Fatalf("reason %q", run.Approval.Reason)
			}
			if !run.Jobs[0].Requirement.Fork {
				t.Fatalf("Gitea fork job without the fork restriction: %+v", run.Jobs[0].Requirement)
			}
		}
	})
}

// sendGitea posts a signed Gitea delivery to source gt and returns its id.
func (f *fixture) sendGitea(t *testing.T, id string, body []byte) int64 {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/webhook/gitea/gt", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitea-Event", "pull_request")
	req.Header.Set("X-Gitea-Delivery", id)
	req.Header.Set("X-Gitea-Signature", strings.TrimPrefix(forge.Sign([]byte(secret), body), "sha256="))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("gitea delivery: %d %v", resp.StatusCode, out)
	}
	return deliveryID(t, out)
}
