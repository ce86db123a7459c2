package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/store"
)

// Engine is what the API asks of the engine: cancel a run (graceful first,
// forced on a second call), rerun one, and approve one held for approval.
type Engine interface {
	Cancel(ctx context.Context, runID, reason string) (store.Run, error)
	Rerun(ctx context.Context, runID string, failedOnly bool) (store.CreatedRun, error)
	Approve(ctx context.Context, runID, by string) (store.Run, error)
}

// Ingress is what the API asks of the ingress processor: record a manual
// dispatch or a push to a local source, and wait for a delivery's outcome.
type Ingress interface {
	Dispatch(ctx context.Context, r ingress.DispatchRequest) (int64, error)
	Trigger(ctx context.Context, source string, push ingress.TriggerRequest) (int64, error)
	Wait(id int64) <-chan store.Delivery
}

// Fleet is what the API asks of the connected agents: list them, drain one,
// and close the sockets authenticated with a revoked token. The composition
// root adapts the fleet to it.
type Fleet interface {
	Agents() []AgentView
	// Drain stops giving the agent new jobs; it finishes what it runs. An
	// unknown agent is a kiln.CodeNotFound error.
	Drain(id string) error
	DisconnectToken(tokenID string)
}

// AgentView is a connected agent as the fleet sees it.
type AgentView struct {
	ID            string
	Labels        []string
	Mandatory     []string
	MaxJobs       int
	ActiveJobs    int
	Draining      bool
	Healthy       bool
	ConnectedAt   time.Time
	LastHeartbeat time.Time
	Version       string
	Hostname      string
	TokenID       string
}

// Deps are the parts of kiln the API exposes. DB, Engine, Ingress and Logs
// are required; Fleet may be nil (agents are then listed from the store, and
// drain answers unavailable).
type Deps struct {
	DB      *store.DB
	Engine  Engine
	Ingress Ingress
	Logs    *logstore.Store
	Fleet   Fleet
	// Coordinator is this server's id among the servers sharing the
	// database: the agents the database lists as connected to another one
	// are shown as connected there (B145), this one's as its fleet says.
	Coordinator string
	// Artifacts lists and opens runs' artifacts; nil answers 404.
	Artifacts Artifacts
	// Scalers is the scaler manager; nil when no scaler is configured.
	Scalers Scalers
	// Ready reports whether the server can serve (GET /ready). Default: a
	// cheap database query.
	Ready func(ctx context.Context) error
	// Accepting, when set, reports whether agents are accepted yet; until
	// it does /ready answers 503 whatever Ready says (B133).
	Accepting func() bool
	// CredentialWarnings says where a source being created or changed puts
	// agents at risk or leaves them without access (its token can push,
	// kiln cannot tell). Default: forge.CredentialWarnings, which asks
	// GitHub about the token.
	CredentialWarnings func(ctx context.Context, src *forge.Source) []string
}

// Defaults for Config.
const (
	DefaultMaxBodyBytes    = 1 << 20
	DefaultMaxWait         = 60 * time.Second
	DefaultLogPollInterval = time.Second
	DefaultLogWriteTimeout = 30 * time.Second
	DefaultLogBuffer       = 64
	DefaultReadyTimeout    = 2 * time.Second
)

// Config tunes the API. The zero value is usable.
type Config struct {
	// MaxBodyBytes bounds a request body (413 past it). Default 1 MiB.
	MaxBodyBytes int64
	// MaxWait bounds how long ?wait=true waits for a delivery's outcome.
	MaxWait time.Duration
	// LogPollInterval is how often a log stream checks its jobs' status
	// (new attempts, finished jobs). Default 1s.
	LogPollInterval time.Duration
	// LogWriteTimeout drops a log viewer that has not taken a batch for
	// this long. Default 30s.
	LogWriteTimeout time.Duration
	// LogBuffer is how many batches a log viewer may fall behind before it
	// is resynchronized from the files. Default 64.
	LogBuffer int
	// ReadyTimeout bounds the readiness check. Default 2s.
	ReadyTimeout time.Duration
	Clock        func() time.Time
	Logger       *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.LogPollInterval <= 0 {
		c.LogPollInterval = DefaultLogPollInterval
	}
	if c.LogWriteTimeout <= 0 {
		c.LogWriteTimeout = DefaultLogWriteTimeout
	}
	if c.LogBuffer <= 0 {
		c.LogBuffer = DefaultLogBuffer
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (d Deps) validate() error {
	switch {
	case d.DB == nil:
		return errors.New("api: Deps.DB is required")
	case d.Engine == nil:
		return errors.New("api: Deps.Engine is required")
	case d.Ingress == nil:
		return errors.New("api: Deps.Ingress is required")
	case d.Logs == nil:
		return errors.New("api: Deps.Logs is required")
	}
	return nil
}

// server holds the handlers' dependencies.
type server struct {
	Deps
	cfg Config
	log *slog.Logger
}

// New returns the API's handler: /api/v1/…, /health and /ready. Mount it
// at "/" or at those paths.
func New(deps Deps, cfg Config) (http.Handler, error) {
	if err := deps.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &server{Deps: deps, cfg: cfg, log: cfg.Logger}
	if s.Ready == nil {
		s.Ready = s.databaseReady
	}
	if s.CredentialWarnings == nil {
		s.CredentialWarnings = func(ctx context.Context, src *forge.Source) []string {
			return forge.CredentialWarnings(ctx, src, forge.Options{})
		}
	}
	return s.routes(), nil
}

// databaseReady is the default readiness check: one indexed read, and,
// when a best-effort write has failed, one small write (B131): a database
// that answers reads but cannot write (a full disk) is not ready.
func (s *server) databaseReady(ctx context.Context) error {
	if err := s.DB.ProbeRead(ctx); err != nil {
		return err
	}
	if err := s.DB.ProbeWrite(ctx); err != nil {
		return &writeProblem{err}
	}
	return nil
}

// writeProblem is a database that reads but does not write.
type writeProblem struct{ err error }

func (e *writeProblem) Error() string { return e.err.Error() }
func (e *writeProblem) Unwrap() error { return e.err }

// Health is the answer of /health and /ready.
type Health struct {
	Status string `json:"status"` // ok, or unavailable
	Error  string `json:"error,omitempty"`
}

// health answers while the process serves HTTP at all.
func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
	return nil
}

// ready answers 200 when agents are accepted and the database answers a
// query within ReadyTimeout, 503 otherwise.
func (s *server) ready(w http.ResponseWriter, r *http.Request) error {
	if s.Accepting != nil && !s.Accepting() {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "unavailable", Error: "the server is starting: agents are not accepted yet"})
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	if err := s.Ready(ctx); err != nil {
		s.log.Warn("api: not ready", "err", err)
		msg := "the database is not reachable"
		var wp *writeProblem
		if errors.As(err, &wp) {
			msg = "the database does not accept writes (is its disk full?): " + wp.Error()
		}
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "unavailable", Error: msg})
		return nil
	}
	writeJSON(w, http.StatusOK, Health{Status: "ok"})
	return nil
}
