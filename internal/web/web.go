// Package web is kiln's dashboard: server-rendered pages (html/template,
// assets embedded, a little hand-written JavaScript for live logs) served
// by kiln server at /. Browsers log in with an admin or read-only token
// and hold a session cookie; every page reads, and every button acts,
// through the REST API's handler in the process (inproc.go), so the
// dashboard can do nothing the session's token could not do with the API.
// docs/dashboard.md is the operator's guide.
package web

import (
	"embed"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

//go:embed templates static
var assets embed.FS

// Defaults for Config.
const (
	DefaultSessionTTL       = 12 * time.Hour
	DefaultLoginsPerMinute  = 10
	DefaultViewersPerJob    = 50
	DefaultFollowKeepalive  = 15 * time.Second
	DefaultLogWindow        = 1000
	DefaultLiveInterval     = 500 * time.Millisecond
	maxLoginAddressesKept   = 10000
	sessionCookie           = "kiln_session"
	secureSessionCookieName = "__Host-kiln_session"
)

// Deps are what the dashboard needs: the database (sessions, badges) and
// the API's handler (everything else).
type Deps struct {
	DB  *store.DB
	API http.Handler
}

// Config tunes the dashboard. The zero value is usable.
type Config struct {
	// PublicURL is where people reach the server; an https:// one makes the
	// session cookie Secure.
	PublicURL string
	// SessionTTL is how long a login lasts (dashboard.session_ttl). 12h.
	SessionTTL time.Duration
	// LoginsPerMinute bounds login attempts per remote address. 10.
	LoginsPerMinute int
	// ViewersPerJob bounds the live log followers of one job, and the
	// live pages of one run, on this server; one more is told to reload
	// later. 50.
	ViewersPerJob int
	// FollowKeepalive is how often an idle live log sends a comment so
	// proxies keep it open. 15s.
	FollowKeepalive time.Duration
	// LogWindow is how many lines of a step a page or a fetch carries. 1000.
	LogWindow int
	// LiveInterval is how often the watcher of a run that pages follow
	// live reads its fingerprint (one per run, however many pages). 500ms.
	LiveInterval time.Duration
	Clock        func() time.Time
	Logger       *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.SessionTTL <= 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.LoginsPerMinute <= 0 {
		c.LoginsPerMinute = DefaultLoginsPerMinute
	}
	if c.ViewersPerJob <= 0 {
		c.ViewersPerJob = DefaultViewersPerJob
	}
	if c.FollowKeepalive <= 0 {
		c.FollowKeepalive = DefaultFollowKeepalive
	}
	if c.LogWindow <= 0 {
		c.LogWindow = DefaultLogWindow
	}
	if c.LiveInterval <= 0 {
		c.LiveInterval = DefaultLiveInterval
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// site holds the handlers' dependencies.
type site struct {
	db     *store.DB
	api    http.Handler
	cfg    Config
	log    *slog.Logger
	secure bool
	pages  *pages
	logins *limiter

	mu      sync.Mutex
	viewers map[string]int // live followers per job id, and per "run:"+run id
	live    *runHub
}

// New returns the dashboard's handler. Mount it at "/" next to the API.
func New(deps Deps, cfg Config) (http.Handler, error) {
	if deps.DB == nil || deps.API == nil {
		return nil, errors.New("web: Deps.DB and Deps.API are required")
	}
	cfg = cfg.withDefaults()
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	s := &site{db: deps.DB, api: deps.API, cfg: cfg, log: cfg.Logger, pages: p,
		logins: newLimiter(cfg.LoginsPerMinute, time.Minute, maxLoginAddressesKept, cfg.Clock), viewers: map[string]int{}}
	s.live = &runHub{s: s, watches: map[string]*runWatch{}}
	if u, err := url.Parse(cfg.PublicURL); err == nil && strings.EqualFold(u.Scheme, "https") {
		s.secure = true
	}
	return s.routes(), nil
}

// cookieName is the session cookie's name: with the __Host- prefix when
// Secure, so a sibling subdomain cannot plant one.
func (s *site) cookieName() string {
	if s.secure {
		return secureSessionCookieName
	}
	return sessionCookie
}

func (s *site) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(assets))
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("GET /badge/{source}/{file}", s.badge)

	mux.Handle("POST /logout", s.act(s.logout))
	mux.Handle("GET /{$}", http.RedirectHandler("/runs", http.StatusSeeOther))
	mux.Handle("GET /runs", s.view(s.runsPage))
	mux.Handle("GET /runs/{run}", s.view(s.runPage))
	mux.Handle("GET /runs/{run}/live", s.view(s.runLive))
	mux.Handle("POST /runs/{run}/cancel", s.act(s.cancelRun))
	mux.Handle("POST /runs/{run}/rerun", s.act(s.rerunRun))
	mux.Handle("POST /runs/{run}/approve", s.act(s.approveRun))
	mux.Handle("GET /runs/{run}/artifacts/{name}", s.view(s.artifact))
	mux.Handle("GET /runs/{run}/jobs/{job}", s.view(s.logPage))
	mux.Handle("GET /runs/{run}/jobs/{job}/lines", s.view(s.logLines))
	mux.Handle("GET /runs/{run}/jobs/{job}/raw", s.view(s.logRaw))
	mux.Handle("GET /runs/{run}/jobs/{job}/follow", s.view(s.logFollow))
	mux.Handle("GET /queue", s.view(s.queuePage))
	mux.Handle("GET /agents", s.view(s.agentsPage))
	mux.Handle("POST /agents/{id}/drain", s.act(s.drainAgent))
	mux.Handle("GET /scalers", s.view(s.scalersPage))
	mux.Handle("GET /events", s.view(s.eventsPage))
	mux.Handle("GET /dispatch", s.view(s.dispatchPage))
	mux.Handle("POST /dispatch", s.act(s.dispatch))
	return securityHeaders(mux)
}

// securityHeaders sets what every dashboard answer carries: no framing,
// no sniffing, scripts and styles only from the server itself.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
