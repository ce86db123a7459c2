package api_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/store"
)

// A source's fork policy is set when it is created and changed with PATCH,
// a JSON merge patch that keeps every secret it does not name; the answers
// carry warnings about the credentials (a classic token that can push) and
// never a secret. A patch cannot rename a source, change its kind, store
// the redaction placeholder as a secret, or set an unknown policy.
// Proves B100 (docs/behaviours.md).
func TestSourceForkPolicyAndPatch(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		gh := forgetest.NewGitHub(t)
		gh.SetScopes("repo, read:org")
		src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{APIBase: gh.URL, Token: "ghp_secret", WebhookSecret: "hook-secret"}}
		created, err := h.Client.CreateSource(ctx, api.SourceRequest{Source: src, ForkPullRequests: kiln.ForkRun, ForkLabels: []string{"GPU", "gpu"}})
		if err != nil {
			t.Fatal(err)
		}
		if created.ForkPullRequests != kiln.ForkRun || created.ForkLabels.Key() != "gpu" {
			t.Fatalf("created: %s %v", created.ForkPullRequests, created.ForkLabels)
		}
		if len(created.Warnings) != 1 || !strings.Contains(created.Warnings[0], "scope repo") || !strings.Contains(created.Warnings[0], "--clone-token-env") {
			t.Fatalf("warnings %q", created.Warnings)
		}
		local, err := h.Client.Source(ctx, apitest.SourceName)
		if err != nil || local.ForkPullRequests != kiln.ForkApprove || local.ForkLabels == nil || len(local.Warnings) != 0 {
			t.Fatalf("a source added without a policy: %+v %v", local, err)
		}

		// The policy alone: no credentials asked about.
		upd, err := h.Client.UpdateSource(ctx, "gh", map[string]any{"fork_pull_requests": "deny", "fork_labels": nil})
		if err != nil || upd.ForkPullRequests != kiln.ForkDeny || len(upd.ForkLabels) != 0 || len(upd.Warnings) != 0 {
			t.Fatalf("policy patch: %+v %v", upd, err)
		}
		// A clone token: the other secrets are kept, none is shown.
		gh.SetScopes("")
		upd, err = h.Client.UpdateSource(ctx, "gh", map[string]any{"github": map[string]any{"clone": map[string]any{"token": "github_pat_read"}}})
		if err != nil || upd.GitHub.Clone == nil || upd.GitHub.Clone.Token != forge.Redaction || len(upd.Warnings) != 0 {
			t.Fatalf("clone patch: %+v %v", upd.GitHub, err)
		}
		status, body := raw(t, h, "GET", "/api/v1/sources/gh", "")
		if status != 200 || strings.Contains(string(body), "github_pat_read") || strings.Contains(string(body), "ghp_secret") {
			t.Fatalf("GET shows a secret: %s", body)
		}
		st, err := h.DB.Sources().GetByName(ctx, "gh")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := ingress.Decode(st)
		if err != nil || stored.GitHub.Token != "ghp_secret" || stored.GitHub.WebhookSecret != "hook-secret" || stored.GitHub.Clone.Token != "github_pat_read" ||
			st.ForkPullRequests != kiln.ForkDeny {
			t.Fatalf("stored after patches: %+v %+v (%v)", stored.GitHub, st, err)
		}
		// null removes.
		if upd, err = h.Client.UpdateSource(ctx, "gh", map[string]any{"github": map[string]any{"clone": nil}}); err != nil || upd.GitHub.Clone != nil {
			t.Fatalf("removing the clone credential: %+v %v", upd.GitHub, err)
		}

		for body, want := range map[string]string{
			`{"name":"other"}`:                                 "name cannot change",
			`{"kind":"gitea"}`:                                 "kind cannot change",
			`{"github":{"token":"(redacted)"}}`:                "github.token",
			`{"fork_pull_requests":"maybe"}`:                   "not approve, run or deny",
			`{"fork_labels":["has space"]}`:                    "fork_labels",
			`{"forks":"deny"}`:                                 `unknown field "forks"`,
			`{"github":{"clone":{"token":"t","ssh_key":"k"}}}`: "not both",
			`[]`: "JSON",
		} {
			wantError(t, h, 400, kiln.CodeInvalid, "PATCH", "/api/v1/sources/gh", body, want)
		}
		wantError(t, h, 404, kiln.CodeNotFound, "PATCH", "/api/v1/sources/ghost", `{"fork_pull_requests":"run"}`, "ghost")
		if st2, _ := h.DB.Sources().GetByName(ctx, "gh"); st2.ForkPullRequests != kiln.ForkDeny || string(st2.Config) != string(mustSource(t, h).Config) {
			t.Fatal("a refused patch changed the source")
		}
	})
}

func mustSource(t *testing.T, h *apitest.Harness) store.Source {
	t.Helper()
	st, err := h.DB.Sources().GetByName(ctx, "gh")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A run held for approval shows why on the API; approving it records the
// admin token's name and the time and releases its jobs; cancelling one
// rejects it; approving a run that needs none, or twice, is a conflict.
// Proves B97 (docs/behaviours.md).
func TestApproveRun(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		const reason = "waiting for approval: pull request from fork mallory/app by mallory"
		held := func() store.CreatedRun {
			ev, _ := json.Marshal(kiln.Event{Name: kiln.EventPullRequest, Fork: &kiln.Fork{HeadRepository: "mallory/app", Author: "mallory", AuthorAssociation: "NONE"}})
			cr, err := h.DB.Runs().Create(ctx, store.NewRun{Workflow: "ci", Event: ev, Hold: reason,
				Jobs: []store.NewJob{{Name: "build", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux"), Fork: true}}}})
			if err != nil {
				t.Fatal(err)
			}
			return cr
		}
		cr := held()
		run, err := h.Client.GetRun(ctx, itoa(cr.Number))
		if err != nil || run.Approval == nil || run.Approval.State != api.ApprovalWaiting || run.Approval.Reason != reason ||
			run.Fork == nil || run.Fork.HeadRepository != "mallory/app" || run.Jobs[0].PendingReason != reason {
			t.Fatalf("held run: %+v %+v %v", run.Approval, run.Fork, err)
		}
		run, err = h.Client.ApproveRun(ctx, itoa(cr.Number))
		if err != nil || run.Approval.State != api.ApprovalApproved || run.Approval.ApprovedBy != "tests" || run.Approval.ApprovedAt == nil ||
			run.Jobs[0].Status != kiln.JobQueued {
			t.Fatalf("approved: %+v, job %s, %v", run.Approval, run.Jobs[0].Status, err)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/runs/"+itoa(cr.Number)+"/approve", "", "approved already, by tests")

		rejected := held()
		res, err := h.Client.CancelRun(ctx, itoa(rejected.Number), "")
		if err != nil || res.Run.Approval.State != api.ApprovalRejected || res.Run.CancelReason != "rejected by api:tests" || res.Run.Jobs[0].Status != kiln.JobCancelled {
			t.Fatalf("rejected: %+v %q %v", res.Run.Approval, res.Run.CancelReason, err)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/runs/"+itoa(rejected.Number)+"/approve", "", "no longer be approved")

		h.Dispatch(t)
		runs, err := h.Client.ListRuns(ctx, api.RunFilter{Limit: 1})
		if err != nil || len(runs.Runs) != 1 {
			t.Fatal(err)
		}
		wantError(t, h, 409, kiln.CodeConflict, "POST", "/api/v1/runs/"+itoa(runs.Runs[0].Number)+"/approve", "", "needs no approval")
		wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/runs/"+itoa(cr.Number)+"/approve", `{"by":"me"}`, "unknown field")
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
