package api_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
)

func TestListRunsFiltersAndPages(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		for range 3 {
			h.Dispatch(t)
		}
		page, err := h.Client.ListRuns(ctx, api.RunFilter{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Runs) != 2 || page.Runs[0].Number != 3 || page.Runs[1].Number != 2 || page.NextBefore != 2 {
			t.Fatalf("first page: %+v", page)
		}
		r := page.Runs[0]
		if r.Workflow != "ci" || r.Source != apitest.SourceName || r.Trigger != kiln.EventDispatch || r.Status != kiln.RunPending {
			t.Fatalf("run summary: %+v", r)
		}
		if r.Jobs != nil || r.Event != nil || r.Trace != nil {
			t.Fatalf("a list answer carries details: %+v", r)
		}
		next, err := h.Client.ListRuns(ctx, api.RunFilter{Limit: 2, Before: page.NextBefore})
		if err != nil || len(next.Runs) != 1 || next.Runs[0].Number != 1 || next.NextBefore != 0 {
			t.Fatalf("second page: %+v, %v", next, err)
		}
		for _, f := range []api.RunFilter{{Workflow: "other"}, {Repository: "acme/other"}, {Status: kiln.RunFailed}} {
			if got, err := h.Client.ListRuns(ctx, f); err != nil || len(got.Runs) != 0 {
				t.Fatalf("filter %+v: %+v, %v", f, got, err)
			}
		}
		if got, _ := h.Client.ListRuns(ctx, api.RunFilter{Status: kiln.RunPending, Workflow: "ci", Repository: "app"}); len(got.Runs) != 3 {
			t.Fatalf("matching filter found %d runs", len(got.Runs))
		}
	})
}

func TestListRunsBadQueries(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	for q, want := range map[string]string{
		"?status=done":   `status "done" is not a run status`,
		"?limit=0":       "limit",
		"?limit=5000":    "limit",
		"?limit=ten":     "limit",
		"?before=-3":     "before",
		"?stauts=failed": `unknown query parameter "stauts"`,
	} {
		wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "GET", "/api/v1/runs"+q, "", want)
	}
}

func TestShowRunByNumberOrID(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		run := h.Dispatch(t)
		for _, ref := range []string{"1", "#1", run.ID} {
			got, err := h.Client.GetRun(ctx, ref)
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			if got.ID != run.ID || len(got.Jobs) != 2 || got.Trace == nil || got.Event == nil {
				t.Fatalf("%s: %+v", ref, got)
			}
		}
		build, test := run.Jobs[0], run.Jobs[1]
		if build.Name != "build" || build.Status != kiln.JobQueued || build.PendingReason == "" || build.PendingSince == nil {
			t.Fatalf("build: %+v", build)
		}
		if len(build.Steps) != 2 || build.Steps[1].Name != "vet" || build.Steps[0].StartedAt != nil {
			t.Fatalf("build steps: %+v", build.Steps)
		}
		if test.Status != kiln.JobPending || !strings.Contains(test.PendingReason, "build") || len(test.Needs) != 1 {
			t.Fatalf("test: %+v", test)
		}
		// Times that have not happened are absent, never "0001-01-01".
		status, body := raw(t, h, "GET", "/api/v1/runs/1", "")
		if status != http.StatusOK || strings.Contains(string(body), "0001-01-01") || strings.Contains(string(body), "finished_at") {
			t.Fatalf("%d %s", status, body)
		}
		wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/runs/99", "", "no run #99")
		wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/runs/no-such-run", "", "no run")
		wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/runs/%ff%fe", "", "no run")
		wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "GET", "/api/v1/runs/1?verbose=1", "", "verbose")
	})
}

// Proves B22 (docs/behaviours.md).
func TestCancelIsGracefulThenForcedThenAConflict(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		run := h.Dispatch(t)
		h.Claim(t, "agent-1") // build runs on an agent
		first, err := h.Client.CancelRun(ctx, "1", "")
		if err != nil {
			t.Fatal(err)
		}
		if first.Forced || first.Run.Status != kiln.RunCancelling || first.Run.Jobs[0].Status != kiln.JobCancelling ||
			first.Run.Jobs[1].Status != kiln.JobCancelled || !strings.Contains(first.Run.CancelReason, "api:tests") {
			t.Fatalf("first cancel: forced %v, run %s, jobs %s/%s, reason %q", first.Forced, first.Run.Status,
				first.Run.Jobs[0].Status, first.Run.Jobs[1].Status, first.Run.CancelReason)
		}
		second, err := h.Client.CancelRun(ctx, run.ID, "operator gave up")
		if err != nil {
			t.Fatal(err)
		}
		if !second.Forced || second.Run.Status != kiln.RunCancelled || second.Run.Jobs[0].Status != kiln.JobCancelled {
			t.Fatalf("second cancel: forced %v, run %s, build %s", second.Forced, second.Run.Status, second.Run.Jobs[0].Status)
		}
		before, _ := h.Client.GetRun(ctx, "1")
		wantError(t, h, http.StatusConflict, kiln.CodeConflict, "POST", "/api/v1/runs/1/cancel", "", "already finished")
		after, _ := h.Client.GetRun(ctx, "1")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused cancel changed the run:\n%+v\n%+v", before, after)
		}
		wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "POST", "/api/v1/runs/42/cancel", "", "no run #42")
	})
}

// Proves B78 (docs/behaviours.md).
func TestCancelBadBodiesChangeNothing(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		before, _ := h.Client.GetRun(ctx, "1")
		for body, want := range map[string]string{
			`{"reason": 7}`:                   `field "reason" must be a string`,
			`{"reson": "typo"}`:               `unknown field "reson"`,
			`{"reason": "x"`:                  "not valid JSON",
			`not json`:                        "not valid JSON",
			`[1, 2]`:                          "must be a JSON object",
			`{"reason": "a"} {"reason": "b"}`: "more after its JSON value",
			`{"reason": "` + long(600) + `"}`: "longer than 500",
		} {
			wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "POST", "/api/v1/runs/1/cancel", body, want)
		}
		status, b := raw(t, h, "POST", "/api/v1/runs/1/cancel", `{"reason":"x"}`, "Content-Type", "text/plain")
		wantErrorBody(t, status, b, http.StatusUnsupportedMediaType, kiln.CodeInvalid, "application/json")
		status, b = raw(t, h, "POST", "/api/v1/runs/1/cancel", `{"reason":"`+long(2<<20)+`"}`)
		wantErrorBody(t, status, b, http.StatusRequestEntityTooLarge, kiln.CodeTooLarge, "larger than")
		after, _ := h.Client.GetRun(ctx, "1")
		if !reflect.DeepEqual(before, after) || after.Status != kiln.RunPending {
			t.Fatalf("refused cancels changed the run:\n%+v\n%+v", before, after)
		}
	})
}

func TestRerunOfAnUnfinishedRunIsAConflict(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		wantError(t, h, http.StatusConflict, kiln.CodeConflict, "POST", "/api/v1/runs/1/rerun", `{"failed_only": true}`, "still pending")
		wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "POST", "/api/v1/runs/1/rerun", `{"failed": true}`, `unknown field "failed"`)
		wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "POST", "/api/v1/runs/1/rerun", `{"failed_only": "yes"}`, "true or false")
		wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "POST", "/api/v1/runs/7/rerun", "", "no run #7")
		if list, _ := h.Client.ListRuns(ctx, api.RunFilter{}); len(list.Runs) != 1 {
			t.Fatalf("refused reruns created runs: %d", len(list.Runs))
		}
	})
}

func long(n int) string { return strings.Repeat("x", n) }

func TestRerunAWholeRunOrItsFailedJobs(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		orig := h.Dispatch(t)
		build := h.Claim(t, "agent-1")
		h.Finish(t, build, kiln.JobSuccess)
		test := h.Claim(t, "agent-1")
		h.Finish(t, test, kiln.JobFailed)
		if r, _ := h.Client.GetRun(ctx, "1"); r.Status != kiln.RunFailed {
			t.Fatalf("original run is %s", r.Status)
		}
		whole, err := h.Client.RerunRun(ctx, "1", false)
		if err != nil {
			t.Fatal(err)
		}
		if whole.Number != 2 || whole.RerunOf != orig.ID || whole.Jobs[0].Status != kiln.JobQueued || whole.Jobs[1].Status != kiln.JobPending {
			t.Fatalf("whole rerun: #%d of %q, jobs %s/%s", whole.Number, whole.RerunOf, whole.Jobs[0].Status, whole.Jobs[1].Status)
		}
		failed, err := h.Client.RerunRun(ctx, orig.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		if failed.Number != 3 || failed.Jobs[0].Status != kiln.JobSuccess || failed.Jobs[1].Status != kiln.JobQueued {
			t.Fatalf("failed-only rerun: #%d, jobs %s/%s", failed.Number, failed.Jobs[0].Status, failed.Jobs[1].Status)
		}
		status, body := raw(t, h, "POST", "/api/v1/runs/3/rerun", "")
		wantErrorBody(t, status, body, http.StatusConflict, kiln.CodeConflict, "still")
	})
}

func TestRerunOfARunWithNothingFailedIsAConflict(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	h.Dispatch(t)
	h.Finish(t, h.Claim(t, "agent-1"), kiln.JobSuccess)
	h.Finish(t, h.Claim(t, "agent-1"), kiln.JobSuccess)
	wantError(t, h, http.StatusConflict, kiln.CodeConflict, "POST", "/api/v1/runs/1/rerun", `{"failed_only":true}`, "no failed or cancelled jobs")
	if list, _ := h.Client.ListRuns(ctx, api.RunFilter{}); len(list.Runs) != 1 {
		t.Fatalf("a refused rerun created a run")
	}
}
