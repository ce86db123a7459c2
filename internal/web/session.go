package web

import (
	"context"
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

type sessionKey struct{}

// sessionOf is the request's session (view and act put it there).
func sessionOf(r *http.Request) store.Session {
	s, _ := r.Context().Value(sessionKey{}).(store.Session)
	return s
}

// handler is a page or an action: it answers, or returns an error the
// site renders as a page.
type handler func(w http.ResponseWriter, r *http.Request) error

// view serves h to a logged-in session; anyone else is sent to the login
// page, and comes back where they were going.
func (s *site) view(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(w, r)
		if !ok {
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// act serves a form post: a logged-in admin session whose form carries
// the session's CSRF token. A read-only session may not post at all (the
// API would refuse it too); a post without the token is refused before
// anything runs (B301).
func (s *site) act(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(w, r)
		if !ok {
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess))
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, kiln.Errorf(kiln.CodeInvalid, "the form could not be read: %v", err))
			return
		}
		got := r.PostForm.Get("csrf")
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
			s.fail(w, r, kiln.Errorf(kiln.CodeForbidden, "this form has expired or did not come from this dashboard (no valid CSRF token); reload the page and try again"))
			return
		}
		if sess.Token.Role != store.RoleAdmin && r.URL.Path != "/logout" {
			s.fail(w, r, kiln.Errorf(kiln.CodeForbidden, "you are logged in with the read-only token %q, which may only look", sess.Token.Name))
			return
		}
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// session returns the request's valid session, or sends the browser to the
// login page (or answers 401 to a script) and returns false.
func (s *site) session(w http.ResponseWriter, r *http.Request) (store.Session, bool) {
	if c, err := r.Cookie(s.cookieName()); err == nil && c.Value != "" {
		sess, err := s.db.Sessions().Get(r.Context(), c.Value)
		if err == nil {
			return sess, true
		}
		if kiln.ErrorCode(err) != kiln.CodeUnauthorized {
			s.fail(w, r, err)
			return store.Session{}, false
		}
	}
	if r.Method != http.MethodGet || r.Header.Get("Accept") == "text/event-stream" {
		http.Error(w, "log in first", http.StatusUnauthorized)
		return store.Session{}, false
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	return store.Session{}, false
}

type loginData struct {
	Next, Error string
}

func (s *site) loginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusOK, "login", "Log in", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

// login exchanges a token for a session cookie (B300), at most
// LoginsPerMinute attempts per remote address (B302).
func (s *site) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	_ = r.ParseForm()
	next := safeNext(r.PostForm.Get("next"))
	if !s.logins.allow(remoteHost(r)) {
		w.Header().Set("Retry-After", "60")
		s.render(w, r, http.StatusTooManyRequests, "login", "Log in", loginData{Next: next, Error: "Too many login attempts from your address; wait a minute."})
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	cookie, sess, err := s.db.Sessions().Open(r.Context(), secret, s.cfg.SessionTTL)
	if kiln.ErrorCode(err) == kiln.CodeUnauthorized || (err == nil && secret == "") {
		s.render(w, r, http.StatusUnauthorized, "login", "Log in", loginData{Next: next, Error: "That token is not valid (wrong, revoked or expired)."})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(), Value: cookie, Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode, Expires: sess.ExpiresAt})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *site) logout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(s.cookieName()); err == nil {
		if err := s.db.Sessions().Close(r.Context(), c.Value); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(), Value: "", Path: "/", HttpOnly: true, Secure: s.secure,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// safeNext keeps a post-login destination on this site: a path, never
// another origin ("//evil", "/\evil", "https://…").
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/runs"
	}
	return next
}

func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limiter allows n events per window per key (a token bucket each),
// keeping at most max keys: past that, the fullest buckets are forgotten
// first, and a flood of addresses shares one bucket.
type limiter struct {
	mu      sync.Mutex
	n       float64
	window  time.Duration
	max     int
	clock   func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(n int, window time.Duration, max int, clock func() time.Time) *limiter {
	return &limiter{n: float64(n), window: window, max: max, clock: clock, buckets: map[string]*bucket{}}
}

func (l *limiter) allow(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if len(l.buckets) >= l.max {
		for k, b := range l.buckets {
			if b.tokens+l.refill(b, now) >= l.n {
				delete(l.buckets, k)
			}
		}
		if len(l.buckets) >= l.max {
			key = "(overflow)"
		}
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.n, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.n, b.tokens+l.refill(b, now))
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (l *limiter) refill(b *bucket, now time.Time) float64 {
	return now.Sub(b.at).Seconds() / l.window.Seconds() * l.n
}
