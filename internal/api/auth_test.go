package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// concrete fills a route's wildcards with plausible values.
func concrete(path string) string {
	return strings.NewReplacer("{run}", "1", "{id}", "1", "{name}", apitest.SourceName).Replace(path)
}

// Proves B59 (docs/behaviours.md).
func TestEveryAPIRouteNeedsAToken(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		revokedID, revoked := adminToken(t, h, "revoked")
		if _, err := h.DB.Auth().RevokeAdminToken(ctx, revokedID); err != nil {
			t.Fatal(err)
		}
		cases := map[string]struct{ header, message string }{
			"missing":  {"", "missing authorization"},
			"scheme":   {"Basic dXNlcjpwYXNz", "Bearer"},
			"empty":    {"Bearer ", "Bearer"},
			"unknown":  {"Bearer kadm_nosuchtoken", "invalid or expired token"},
			"revoked":  {"Bearer " + revoked, "invalid or expired token"},
			"agentish": {"Bearer kat_" + strings.Repeat("a", 52), "invalid or expired token"},
		}
		for _, rt := range api.Routes() {
			if rt.Public {
				continue
			}
			for name, c := range cases {
				status, body := raw(t, h, rt.Method, concrete(rt.Path), `{"name":"x"}`, "Authorization", c.header)
				if status != http.StatusUnauthorized {
					t.Fatalf("%s %s with %s token: status %d: %s", rt.Method, rt.Path, name, status, body)
				}
				wantErrorBody(t, status, body, http.StatusUnauthorized, kiln.CodeUnauthorized, c.message)
			}
		}
		// Nothing was done on behalf of the refused requests.
		srcs, err := h.Client.Sources(ctx)
		if err != nil || len(srcs) != 1 {
			t.Fatalf("sources after refused requests: %v, %v", srcs, err)
		}
		if tks, _ := h.Client.Tokens(ctx); len(tks) != 0 {
			t.Fatalf("refused requests created tokens: %v", tks)
		}
	})
}

func TestUnauthorizedAnswerNamesTheScheme(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	req, _ := http.NewRequest("GET", h.URL+"/api/v1/runs", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
		t.Fatalf("WWW-Authenticate = %q", got)
	}
}

func TestExpiredAdminTokenIsRefused(t *testing.T) {
	clock := storetest.NewClock()
	db := storetest.New(t, storetest.WithClock(clock.Now), storetest.ReleaseWith(engine.Release))
	h := apitest.New(t, db)
	_, secret, err := db.Auth().CreateAdminToken(ctx, "short", clock.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if status, body := raw(t, h, "GET", "/api/v1/runs", "", "Authorization", "Bearer "+secret); status != http.StatusOK {
		t.Fatalf("fresh token: %d %s", status, body)
	}
	clock.Advance(2 * time.Minute)
	status, body := raw(t, h, "GET", "/api/v1/runs", "", "Authorization", "Bearer "+secret)
	wantErrorBody(t, status, body, http.StatusUnauthorized, kiln.CodeUnauthorized, "invalid or expired token")
}

// Proves B61 (docs/behaviours.md).
func TestHealthAndReadyNeedNoToken(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	for _, path := range []string{"/health", "/ready"} {
		status, body := raw(t, h, "GET", path, "", "Authorization", "")
		if status != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
			t.Fatalf("%s: %d %s", path, status, body)
		}
	}
	if err := h.Client.Ready(ctx); err != nil {
		t.Fatal(err)
	}
}

// Proves B61 (docs/behaviours.md).
func TestReadyAndAuthWhenTheDatabaseIsGone(t *testing.T) {
	db := newSQLite(t)
	h := apitest.New(t, db)
	db.Close()
	status, body := raw(t, h, "GET", "/ready", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "database") {
		t.Fatalf("/ready with the database closed: %d %s", status, body)
	}
	wantCode(t, h.Client.Ready(ctx), kiln.CodeUnavailable)
	if status, _ := raw(t, h, "GET", "/health", ""); status != http.StatusOK {
		t.Fatalf("/health with the database closed: %d", status)
	}
	wantError(t, h, http.StatusServiceUnavailable, kiln.CodeUnavailable, "GET", "/api/v1/runs", "", "database")
}

// adminToken creates another admin token.
func adminToken(t *testing.T, h *apitest.Harness, name string) (id, secret string) {
	t.Helper()
	tk, secret, err := h.DB.Auth().CreateAdminToken(ctx, name, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return tk.ID, secret
}
