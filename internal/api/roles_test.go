package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/store"
)

// secretReads are the GET routes a read-only token may not call: token
// lists and source configuration. Written out here rather than read from
// routes.go, so the test says what the rule is.
var secretReads = map[string]bool{
	"GET /api/v1/tokens":              true,
	"GET /api/v1/admin-tokens":        true,
	"GET /api/v1/sources":             true,
	"GET /api/v1/sources/{name}":      true,
	"GET /api/v1/sources/{name}/hook": true,
}

// readOnlyToken creates a read-only admin token.
func readOnlyToken(t *testing.T, h *apitest.Harness, name string) (store.AdminToken, string) {
	t.Helper()
	tk, secret, err := h.DB.Auth().AddAdminToken(ctx, store.AdminTokenSpec{Name: name, Role: store.RoleReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	return tk, secret
}

// Every route of routes.go's table, with each role: a read-only token gets
// 403 on every method but GET and on the GETs of tokens and sources, and
// gets through everywhere else; an admin token gets through everywhere. A
// route added to the table is in this matrix without anyone listing it.
// Proves B59 (docs/behaviours.md).
func TestRolesOnEveryRoute(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		run := h.Dispatch(t)
		_, ro := readOnlyToken(t, h, "grafana")
		bodies := `{"name":"x"}`
		for _, rt := range api.Routes() {
			if rt.Public {
				continue
			}
			key := rt.Method + " " + rt.Path
			allowed := rt.Method == http.MethodGet && !secretReads[key]
			if rt.ReadOnly != allowed {
				t.Errorf("%s: Routes() says read-only tokens may call it = %v, the rule says %v", key, rt.ReadOnly, allowed)
			}
			path := strings.NewReplacer("{run}", run.ID, "{id}", "1", "{name}", apitest.SourceName).Replace(rt.Path)
			status, body := raw(t, h, rt.Method, path, bodies, "Authorization", "Bearer "+ro)
			if !allowed {
				what := "may only read"
				if rt.Method == http.MethodGet {
					what = "may not read tokens or source configuration"
				}
				wantErrorBody(t, status, body, http.StatusForbidden, kiln.CodeForbidden, `"grafana"`, "read-only role", what, "needs an admin token")
				continue
			}
			if (status < 200 || status > 299) && status != http.StatusNotFound {
				t.Errorf("%s with a read-only token: %d %s", key, status, body)
			}
		}
		// The refused requests did nothing.
		if srcs, err := h.Client.Sources(ctx); err != nil || len(srcs) != 1 {
			t.Fatalf("sources after refused requests: %v %v", srcs, err)
		}
		if tks, _ := h.Client.Tokens(ctx); len(tks) != 0 {
			t.Fatalf("refused requests created agent tokens: %v", tks)
		}
		if tks, _ := h.Client.AdminTokens(ctx); len(tks) != 2 {
			t.Fatalf("refused requests changed admin tokens: %+v", tks)
		}
		if got, _ := h.Client.GetRun(ctx, run.ID); got.Status != kiln.RunPending && got.Status != kiln.RunRunning {
			t.Fatalf("a refused cancel changed the run: %s", got.Status)
		}
		// An admin token passes the role check on every route (what the
		// handler then answers is the handler's business).
		for _, rt := range api.Routes() {
			path := strings.NewReplacer("{run}", run.ID, "{id}", "1", "{name}", apitest.SourceName).Replace(rt.Path)
			if status, body := raw(t, h, rt.Method, path, bodies); status == http.StatusForbidden || status == http.StatusUnauthorized {
				t.Errorf("%s %s with the admin token: %d %s", rt.Method, rt.Path, status, body)
			}
		}
	})
}

// What a read-only token reads is the same as what an admin reads.
func TestReadOnlyTokenReads(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	run := h.Dispatch(t)
	_, ro := readOnlyToken(t, h, "dashboards")
	c, err := api.NewClient(h.URL, ro)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRun(ctx, run.ID)
	if err != nil || got.ID != run.ID || len(got.Jobs) != 2 {
		t.Fatalf("read-only GetRun: %+v %v", got, err)
	}
	if q, err := c.Queue(ctx, 0); err != nil || len(q.Waiting) != 1 {
		t.Fatalf("read-only Queue: %+v %v", q, err)
	}
	_, err = c.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "ci.yml"}, true)
	wantCode(t, err, kiln.CodeForbidden)
	_, err = c.AdminTokens(ctx)
	wantCode(t, err, kiln.CodeForbidden)
	// The error tells the CLI's user what to do.
	if msg := kiln.ErrorMessage(err); !strings.Contains(msg, "read-only") {
		t.Fatalf("message %q", msg)
	}
	var eb kiln.ErrorBody
	status, body := raw(t, h, "POST", "/api/v1/runs/"+run.ID+"/cancel", "", "Authorization", "Bearer "+ro)
	if err := json.Unmarshal(body, &eb); err != nil || status != http.StatusForbidden || eb.Error.Code != kiln.CodeForbidden {
		t.Fatalf("cancel with a read-only token: %d %s", status, body)
	}
}
