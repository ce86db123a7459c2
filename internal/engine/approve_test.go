package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/trigger"
)

func forkEvent() *kiln.Event {
	return &kiln.Event{
		Name: kiln.EventPullRequest, Action: "opened", Ref: "refs/pull/7/head", Branch: "patch", BaseBranch: "main",
		SHA: strings.Repeat("b", 40), Repository: "acme/app", CloneURL: "https://github.example/acme/app.git",
		Actor: "mallory", PR: &kiln.PR{Number: 7},
		Fork: &kiln.Fork{HeadRepository: "mallory/app", Author: "mallory", AuthorAssociation: "NONE"},
	}
}

const forkWorkflow = `
on: pull_request
jobs:
  build:
    runs_on: [linux]
    steps:
      - run: make
  deploy:
    runs_on: ["${{ event.base_branch == 'main' && 'deploy' || 'linux' }}"]
    steps:
      - run: ./ship
`

func startHeld(t *testing.T, b bundle, ev *kiln.Event, hold string, forkLabels ...string) store.CreatedRun {
	t.Helper()
	wf, content := parse(t, forkWorkflow)
	runs, err := b.eng.Start(context.Background(), StartRequest{Source: "src", Event: ev, Hold: hold, ForkLabels: kiln.NewLabels(forkLabels...),
		Matches: []Match{{Workflow: wf, Content: content, Decision: trigger.Match(wf, ev)}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return runs[0]
}

// A fork's jobs carry the fork restriction in their routing key, whether
// runs_on is literal or evaluated at release, and their checkout is marked
// a fork's; a held run wakes no agent and tells its watchers it is
// pending, and Approve releases it, records who, and tells them again.
// Proves B98 (docs/behaviours.md).
func TestForkRunsAreHeldAndRestricted(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		changes, stop := b.eng.Watch(16)
		defer stop()
		const hold = "waiting for approval: pull request from fork mallory/app by mallory"
		run := startHeld(t, b, forkEvent(), hold, "gpu")
		if got := b.rec.wokenNames(); len(got) != 0 {
			t.Fatalf("a held run woke %v", got)
		}
		if c := <-changes; c.ID != run.ID || c.Status != kiln.RunPending {
			t.Fatalf("change %+v", c)
		}
		if j := job(t, b, run.ID, "build"); j.Status != kiln.JobPending || j.PendingReason != hold {
			t.Fatalf("held build: %s %q", j.Status, j.PendingReason)
		}
		got, err := b.eng.Approve(context.Background(), run.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if got.Approval == nil || got.Approval.ApprovedBy != "alice" {
			t.Fatalf("approval %+v", got.Approval)
		}
		if c := <-changes; c.ID != run.ID || c.Status != kiln.RunPending {
			t.Fatalf("change after approval %+v", c)
		}
		if woken := b.rec.wokenNames(); len(woken) != 2 {
			t.Fatalf("approval woke %v", woken)
		}
		keys := map[string]string{}
		for _, name := range []string{"build", "deploy"} {
			j := job(t, b, run.ID, name)
			keys[name] = j.Requirement.Key()
			stored, err := jobspec.Decode(j.Spec)
			if err != nil || stored.Checkout == nil || !stored.Checkout.Fork {
				t.Fatalf("%s's checkout is not marked a fork's: %+v %v", name, stored.Checkout, err)
			}
		}
		if keys["build"] != "linux fork:gpu" || keys["deploy"] != "deploy fork:gpu" {
			t.Fatalf("fork keys %v", keys)
		}
		deploy := kiln.AgentLabels{Labels: kiln.NewLabels("deploy", "linux"), Mandatory: kiln.NewLabels("deploy")}
		if cs, err := b.db.Queue().Claim(context.Background(), "deploy-1", deploy, 5); err != nil || len(cs) != 0 {
			t.Fatalf("a deploy agent took a fork's job: %+v %v", cs, err)
		}
		if _, err := b.eng.Approve(context.Background(), run.ID, "bob"); kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("second approval: %v", err)
		}

		// A member's pull request from a fork runs at once, still as a fork's.
		member := forkEvent()
		member.Fork.AuthorAssociation = "MEMBER"
		now := startHeld(t, b, member, "")
		if j := job(t, b, now.ID, "build"); j.Status != kiln.JobQueued || j.Requirement.Key() != "linux fork:" {
			t.Fatalf("member's fork build: %s %q", j.Status, j.Requirement.Key())
		}
		// A rerun of a fork run runs at once with the fork restriction.
		if _, err := b.eng.Cancel(context.Background(), now.ID, "stop"); err != nil {
			t.Fatal(err)
		}
		re, err := b.eng.Rerun(context.Background(), now.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if j := job(t, b, re.ID, "build"); j.Status != kiln.JobQueued || !j.Requirement.Fork {
			t.Fatalf("rerun of a fork run: %s %+v", j.Status, j.Requirement)
		}
	})
}
