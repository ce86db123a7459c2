package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
)

// Proves B6 (docs/behaviours.md).
func TestDispatchWithInputsStartsARun(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		d, err := h.Client.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "ci",
			Ref: "main", Inputs: map[string]any{"target": "production"}}, true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 || d.Runs[0].Number != 1 || d.Kind != "dispatch" || d.Source != apitest.SourceName {
			t.Fatalf("dispatch: %+v", d)
		}
		run, err := h.Client.GetRun(ctx, "1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(run.Inputs), "production") || run.Ref != "refs/heads/main" || run.DeliveryID != d.ID {
			t.Fatalf("run: inputs %s ref %s delivery %d", run.Inputs, run.Ref, run.DeliveryID)
		}
		// Without waiting the answer is the recorded delivery (which the
		// processor may already have finished by the time it is read).
		status, body := raw(t, h, "POST", "/api/v1/dispatch", `{"source":"app","workflow":"ci.yml"}`)
		if status != http.StatusAccepted || !strings.Contains(string(body), `"kind": "dispatch"`) {
			t.Fatalf("dispatch without wait: %d %s", status, body)
		}
	})
}

func TestDispatchOutcomesThatStartNothing(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		d, err := h.Client.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "deploy.yml"}, true)
		if err != nil || d.Status != kiln.DeliveryNoMatch || len(d.Runs) != 0 || !strings.Contains(d.Message, "deploy.yml") {
			t.Fatalf("unknown workflow: %+v, %v", d, err)
		}
		d, err = h.Client.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "ci.yml",
			Inputs: map[string]any{"target": "moon"}}, true)
		if err != nil || len(d.Runs) != 0 || d.Status == kiln.DeliveryProcessed {
			t.Fatalf("bad input value: %+v, %v", d, err)
		}
		if list, _ := h.Client.ListRuns(ctx, api.RunFilter{}); len(list.Runs) != 0 {
			t.Fatalf("runs: %+v", list.Runs)
		}
	})
}

// Proves B78 (docs/behaviours.md).
func TestDispatchBadRequestsRecordNothing(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		cases := []struct {
			status int
			code   kiln.Code
			body   string
			want   string
		}{
			{400, kiln.CodeInvalid, `{"workflow":"ci.yml"}`, `"source"`},
			{400, kiln.CodeInvalid, `{"source":"app"}`, `"workflow"`},
			{400, kiln.CodeInvalid, `{"source":"app","workflow":"../../etc/passwd"}`, "file name"},
			{400, kiln.CodeInvalid, `{"source":"app","workflow":"ci.yml","actor":"mallory"}`, `unknown field "actor"`},
			{400, kiln.CodeInvalid, `{"source":"app","workflow":"ci.yml","inputs":[1]}`, `"inputs" must be an object`},
			{400, kiln.CodeInvalid, `{"source":"app",`, "not valid JSON"},
			{400, kiln.CodeInvalid, ``, "empty"},
			{404, kiln.CodeNotFound, `{"source":"nope","workflow":"ci.yml"}`, `no source named "nope"`},
			{413, kiln.CodeTooLarge, `{"source":"app","workflow":"ci.yml","inputs":{"x":"` + long(1<<20) + `"}}`, "larger than"},
		}
		for _, c := range cases {
			wantError(t, h, c.status, c.code, "POST", "/api/v1/dispatch", c.body, c.want)
		}
		wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/dispatch?wait=sure", `{"source":"app","workflow":"ci.yml"}`, "wait")
		if evs, _ := h.Client.Events(ctx, api.EventFilter{}); len(evs.Events) != 0 {
			t.Fatalf("refused dispatches were recorded: %+v", evs.Events)
		}
	})
}

// Proves B5 (docs/behaviours.md).
func TestTriggerALocalPush(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		before := apitest.Git(t, h.Repo, "rev-parse", "HEAD")
		sha := h.Commit(t, "main.go", "package main\n")
		d, err := h.Client.Trigger(ctx, apitest.SourceName, api.TriggerRequest{Ref: "refs/heads/main", SHA: sha, Before: before}, true)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 || d.Kind != "trigger" || d.Event != "push" {
			t.Fatalf("trigger: %+v", d)
		}
		run, err := h.Client.GetRun(ctx, d.Runs[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if run.SHA != sha || run.Trigger != kiln.EventPush || run.Ref != "refs/heads/main" {
			t.Fatalf("run: %+v", run)
		}
		// With no body the trigger runs what HEAD's branch names now.
		status, body := raw(t, h, "POST", "/api/v1/sources/app/trigger?wait=true", "")
		if status != http.StatusOK || !strings.Contains(string(body), `"processed"`) {
			t.Fatalf("bare trigger: %d %s", status, body)
		}
	})
}

func TestTriggerBadRequests(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	if _, err := h.Client.AddSource(ctx, githubSource("gh")); err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"sha":"not-a-sha"}`:      "not a commit id",
		`{"before":"XYZ"}`:         "not a commit id",
		`{"ref":"main branch"}`:    "not a branch or tag",
		`{"ref":"main","new":"x"}`: `unknown field "new"`,
	} {
		wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/sources/app/trigger", body, want)
	}
	wantError(t, h, 404, kiln.CodeNotFound, "POST", "/api/v1/sources/ghost/trigger", `{"ref":"main"}`, "ghost")
	wantError(t, h, 400, kiln.CodeInvalid, "POST", "/api/v1/sources/gh/trigger", `{"ref":"main"}`, "local sources")
	if evs, _ := h.Client.Events(ctx, api.EventFilter{}); len(evs.Events) != 0 {
		t.Fatalf("refused triggers were recorded: %+v", evs.Events)
	}
}

// Proves B9 (docs/behaviours.md).
func TestEventLog(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		if _, err := h.Client.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "nope.yml"}, true); err != nil {
			t.Fatal(err)
		}
		h.Dispatch(t)
		page, err := h.Client.Events(ctx, api.EventFilter{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 2 || page.Events[0].ID != 3 || page.NextBefore != 2 || page.Events[1].Status != kiln.DeliveryNoMatch {
			t.Fatalf("first page: %+v", page)
		}
		if page.Events[0].Body != nil || len(page.Events[0].RunIDs) != 1 {
			t.Fatalf("list row: %+v", page.Events[0])
		}
		rest, _ := h.Client.Events(ctx, api.EventFilter{Before: page.NextBefore})
		if len(rest.Events) != 1 || rest.Events[0].ID != 1 {
			t.Fatalf("second page: %+v", rest)
		}
		if got, _ := h.Client.Events(ctx, api.EventFilter{Status: "no_match", Source: apitest.SourceName}); len(got.Events) != 1 {
			t.Fatalf("filtered: %+v", got)
		}
		one, err := h.Client.Event(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(one.Runs) != 1 || one.Runs[0].Number != 1 || !strings.Contains(string(one.Body), `"workflow"`) || one.ProcessedAt == nil {
			t.Fatalf("event 1: %+v", one)
		}
		wantError(t, h, 404, kiln.CodeNotFound, "GET", "/api/v1/events/99", "", "no event 99")
		wantError(t, h, 404, kiln.CodeNotFound, "GET", "/api/v1/events/abc", "", "no event")
		wantError(t, h, 400, kiln.CodeInvalid, "GET", "/api/v1/events?status=lost", "", `"lost" is not a delivery status`)
		wantError(t, h, 404, kiln.CodeNotFound, "GET", "/api/v1/events?source=ghost", "", "ghost")
	})
}
