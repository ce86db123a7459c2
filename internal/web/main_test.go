package web_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
	"github.com/kilnci/kiln/internal/web"
)

func TestMain(m *testing.M) {
	code := storetest.M(m).Run()
	closeBrowser()
	os.Exit(code)
}

var ctx = context.Background()

// dash is the dashboard over a real API (apitest: real store, engine,
// ingress, log store and a local git source), served the way kiln server
// mounts them: the API at /api/, /health and /ready, the dashboard at /.
type dash struct {
	*apitest.Harness
	URL string
	Web *httptest.Server
}

func newDash(t testing.TB, db *store.DB, cfg web.Config) *dash {
	t.Helper()
	h := apitest.New(t, db)
	apiHandler := h.Server.Config.Handler
	cfg.PublicURL = "http://127.0.0.1"
	dh, err := web.New(web.Deps{DB: db, API: apiHandler}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range []string{"/api/", "/health", "/ready"} {
		mux.Handle(p, apiHandler)
	}
	mux.Handle("/", dh)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return &dash{Harness: h, URL: srv.URL, Web: srv}
}

func newSQLiteDash(t testing.TB, cfg web.Config) *dash {
	return newDash(t, storetest.New(t, storetest.ReleaseWith(engine.Release)), cfg)
}

// token creates an admin token of role and returns its secret.
func (d *dash) token(t testing.TB, name string, role store.Role) string {
	t.Helper()
	_, secret, err := d.DB.Auth().AddAdminToken(ctx, store.AdminTokenSpec{Name: name, Role: role})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// browserless is an HTTP client with a cookie jar that does not follow
// redirects, so tests see each answer.
func browserless(t testing.TB) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// login posts the login form and returns the client holding the session.
func (d *dash) login(t testing.TB, secret string) *http.Client {
	t.Helper()
	c := browserless(t)
	resp, err := c.PostForm(d.URL+"/login", url.Values{"token": {secret}, "next": {"/runs"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runs" {
		t.Fatalf("login answered %d (location %q)", resp.StatusCode, resp.Header.Get("Location"))
	}
	return c
}

// get fetches a page and returns its status and body.
func get(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a form and returns the status and body.
func post(t testing.TB, c *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the session's CSRF token from a page's forms.
func csrf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("the page has no form with a CSRF token")
	}
	return m[1]
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waittest.Until(t, 30*time.Second, what, cond)
}

func contains(t testing.TB, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Fatalf("the page does not contain %q:\n%s", p, body)
		}
	}
}
