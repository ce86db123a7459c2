package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/web"
)

// B300: a token is exchanged for an HttpOnly, SameSite=Strict session
// cookie kept in the database (so every server honours it); the session
// ends at logout and when its token is revoked.
func TestLoginSessionLogoutAndRevocation(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		d := newDash(t, db, web.Config{})
		c := browserless(t)
		if code, _ := get(t, c, d.URL+"/runs"); code != http.StatusSeeOther {
			t.Fatalf("GET /runs without a session: %d, want a redirect to the login page", code)
		}
		if code, body := post(t, c, d.URL+"/login", url.Values{"token": {"kadm_wrong"}}); code != http.StatusUnauthorized || !strings.Contains(body, "not valid") {
			t.Fatalf("a wrong token: %d", code)
		}
		secret := d.token(t, "alice", store.RoleAdmin)
		resp, err := c.PostForm(d.URL+"/login", url.Values{"token": {secret}, "next": {"//evil.example/"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != "/runs" {
			t.Fatalf("login sent the browser to %q; another origin must never be a destination", loc)
		}
		var cookie *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "kiln_session" {
				cookie = ck
			}
		}
		if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Secure {
			t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure on http", cookie)
		}
		if _, err := db.Sessions().Get(ctx, cookie.Value); err != nil {
			t.Fatalf("the session is not in the database: %v", err)
		}
		code, body := get(t, c, d.URL+"/runs")
		if code != http.StatusOK {
			t.Fatalf("GET /runs logged in: %d", code)
		}
		contains(t, body, "alice", "Log out")

		// Logout ends it.
		if code, _ := post(t, c, d.URL+"/logout", url.Values{"csrf": {csrf(t, body)}}); code != http.StatusSeeOther {
			t.Fatalf("logout: %d", code)
		}
		if _, err := db.Sessions().Get(ctx, cookie.Value); err == nil {
			t.Fatal("the session outlived its logout")
		}

		// Revoking the token ends its sessions.
		c = d.login(t, secret)
		if code, _ := get(t, c, d.URL+"/runs"); code != http.StatusOK {
			t.Fatalf("after a second login: %d", code)
		}
		tk, err := db.Auth().AuthenticateAdmin(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Auth().RevokeAdminToken(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if code, _ := get(t, c, d.URL+"/runs"); code != http.StatusSeeOther {
			t.Fatalf("a revoked token's session still serves pages (%d)", code)
		}
	}, storetest.ReleaseWith(engine.Release))
}

// B300: a session lasts dashboard.session_ttl.
func TestSessionExpires(t *testing.T) {
	// The store's writer reads the clock from its own goroutine.
	start := time.Now()
	var later atomic.Int64
	clock := func() time.Time { return start.Add(time.Duration(later.Load())) }
	db := storetest.New(t, storetest.ReleaseWith(engine.Release), storetest.WithClock(clock))
	d := newDash(t, db, web.Config{SessionTTL: time.Hour})
	c := d.login(t, d.token(t, "bob", store.RoleAdmin))
	if code, _ := get(t, c, d.URL+"/runs"); code != http.StatusOK {
		t.Fatalf("fresh session: %d", code)
	}
	later.Store(int64(61 * time.Minute))
	if code, _ := get(t, c, d.URL+"/runs"); code != http.StatusSeeOther {
		t.Fatalf("a session past its TTL still serves pages (%d)", code)
	}
}

// B301: a form post without the session's CSRF token is refused, and
// changes nothing.
func TestPostWithoutCSRFTokenIsRefused(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	run := d.Dispatch(t)
	c := d.login(t, d.Token)
	for _, form := range []url.Values{{}, {"csrf": {"forged"}}} {
		code, body := post(t, c, d.URL+"/runs/1/cancel", form)
		if code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Fatalf("cancel with csrf %q: %d", form.Get("csrf"), code)
		}
	}
	got, err := d.Client.GetRun(ctx, run.ID)
	if err != nil || got.Status.Terminal() || got.CancelReason != "" {
		t.Fatalf("the run changed: %v %+v", err, got.Status)
	}
	_, page := get(t, c, d.URL+"/runs/1")
	if code, _ := post(t, c, d.URL+"/runs/1/cancel", url.Values{"csrf": {csrf(t, page)}}); code != http.StatusSeeOther {
		t.Fatalf("cancel with the token: %d", code)
	}
}

// B302: login attempts are rate-limited per remote address.
func TestLoginAttemptsAreRateLimited(t *testing.T) {
	d := newSQLiteDash(t, web.Config{LoginsPerMinute: 3})
	c := browserless(t)
	for i := 0; i < 3; i++ {
		if code, _ := post(t, c, d.URL+"/login", url.Values{"token": {"nope"}}); code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, code)
		}
	}
	code, _ := post(t, c, d.URL+"/login", url.Values{"token": {d.Token}})
	if code != http.StatusTooManyRequests {
		t.Fatalf("the fourth attempt in a minute: %d, want 429 even with a good token", code)
	}
}

// B303: a read-only session sees no buttons and may not post.
func TestReadOnlySessionSeesNoButtonsAndCannotPost(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	d.Dispatch(t)
	c := d.login(t, d.token(t, "viewer", store.RoleReadOnly))
	code, page := get(t, c, d.URL+"/runs/1")
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	for _, action := range []string{"/cancel", "/rerun", "/approve"} {
		if strings.Contains(page, action+`"`) {
			t.Fatalf("a read-only session sees the %s button", action)
		}
	}
	code, _ = post(t, c, d.URL+"/runs/1/cancel", url.Values{"csrf": {csrf(t, page)}}) // the logout form's token
	if code != http.StatusForbidden {
		t.Fatalf("a read-only cancel: %d", code)
	}
	if _, page := get(t, c, d.URL+"/events"); strings.Contains(page, "<th scope=\"col\">Kind</th>") {
		t.Fatal("a read-only session sees the sources' configuration")
	}
}
