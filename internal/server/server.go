package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/retention"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/kilnci/kiln/internal/cluster"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/metrics"
	"github.com/kilnci/kiln/internal/store"
)

// Options are what a caller (the CLI, kiln run, the end-to-end tests) gives
// the server besides its configuration.
type Options struct {
	// Out receives what the operator must see once: the first admin token.
	Out io.Writer
	// Logger is the server's log; default text on stderr at cfg.Log.Level.
	Logger *slog.Logger
	// AgentBinary is the kiln executable started for local agents; default
	// this process's executable.
	AgentBinary string
	// Ready, when set, receives the server once it accepts connections.
	Ready func(*Server)
	// Clock for the store and the engine; default time.Now.
	Clock func() time.Time
	// CloneCredentials makes each job's checkout when it is sent (kiln run
	// points it at the working tree); default: the clone URL and
	// credentials of the run's source (sourceCredentials).
	CloneCredentials fleet.CloneCredentials
	// Reload, when set, asks for the configuration to be read again with
	// LoadConfig (kiln server sends one per SIGHUP): its scalers and
	// scaler_caps are applied; other changes are logged as needing a
	// restart (B227–B229).
	Reload     <-chan struct{}
	LoadConfig func() (Config, error)
}

// Server is a running kiln server, handed to Options.Ready.
type Server struct {
	Addr       string // host:port it listens on
	URL        string // http://Addr
	AdminToken string // set when this start created or was given the admin token
	DB         *store.DB
	Engine     *engine.Engine
	Fleet      *fleet.Fleet
	Ingress    *ingress.Processor
	Sources    *ingress.Sources
	Logs       *logstore.Store
	Metrics    *metrics.Metrics
	MetricsURL string // where /metrics is served: on URL, or on metrics.listen
}

// shutdownGrace bounds how long in-flight HTTP requests may take to finish
// when the server stops; streamGrace is when requests still open (log
// follows) are told to end.
const (
	shutdownGrace = 10 * time.Second
	streamGrace   = 2 * time.Second
)

// Run starts the server and blocks until ctx ends, then shuts down: HTTP
// requests in flight finish, agent connections close (their agents
// reconnect to the next server), and runs stay in the database to continue
// after a restart.
//
// A stop is no failure wherever it comes, during start-up included:
// whatever was waiting for the database (the migration lock, a first
// query) gives up with the context, and Run returns nil, so a supervisor
// restarting a server that had just started does not see it fail.
func Run(ctx context.Context, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Logger
	if log == nil {
		log = newLogger(os.Stderr, cfg.Log)
	}
	err := run(ctx, cfg, opts, log)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		log.Info("kiln server stopped; the stop interrupted work in progress", "work", err)
		return nil
	}
	return err
}

func run(ctx context.Context, cfg Config, opts Options, log *slog.Logger) error {
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	started := time.Now()
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	// Bind before anything is created: a first start that cannot listen
	// (the port is in use) leaves no database behind and prints no admin
	// token it would then lose (B129).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen on %s: the address is in use (another kiln server?); stop it, or give this one another address with --listen HOST:PORT", cfg.Listen)
		}
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	var rawMetricsLn net.Listener
	if cfg.Metrics.Listen != "" {
		if rawMetricsLn, err = net.Listen("tcp", cfg.Metrics.Listen); err != nil {
			return fmt.Errorf("metrics.listen on %s: %w", cfg.Metrics.Listen, err)
		}
		defer rawMetricsLn.Close()
	}
	if err := secureDataDir(cfg, log); err != nil {
		return err
	}
	// The store calls the engine's Release inside the transaction that makes
	// a job ready (creating a run, for its root jobs), bounding the spec it
	// renders by queue.max_spec_bytes (B105).
	db, err := store.Open(ctx, storeConfig(cfg, engine.ReleaseWithin(cfg.Queue.MaxSpecBytes), opts.Clock, log))
	if err != nil {
		return err
	}
	defer db.Close()
	blobs, err := openStorage(ctx, cfg, os.Getenv, log)
	if err != nil {
		return err
	}
	logs, err := logstore.Open(logstore.Config{Dir: filepath.Join(cfg.DataDir, "logs"), Logger: log.With("part", "logs"),
		Archive: logArchive(cfg, blobs), ShipInterval: cfg.Storage.LogShipInterval})
	if err != nil {
		return err
	}
	defer logs.Close()
	admin, err := bootstrapAdmin(ctx, db, cfg, opts.Out)
	if err != nil {
		return err
	}

	// Webhook bodies larger than webhooks.in_memory_bytes wait here, in
	// unlinked files, until they are verified (B103).
	spoolDir := filepath.Join(cfg.DataDir, "tmp")
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return fmt.Errorf("data_dir: %w", err)
	}
	// This process's membership among the servers sharing the database:
	// its row is written before it serves, so its agents never look
	// orphaned; on SQLite it is the only one, and the leader.
	cl, err := cluster.New(db, cluster.Config{AdvertiseURL: advertiseURL(cfg, ln),
		HeartbeatInterval: cfg.Cluster.HeartbeatInterval, DeadAfter: cfg.Cluster.DeadAfter,
		Sole: db.Dialect() == "sqlite", Clock: opts.Clock, Logger: log.With("part", "cluster")})
	if err != nil {
		return err
	}
	if err := cl.Join(ctx); err != nil {
		return err
	}

	sources := ingress.NewSources(db, forge.Options{Logger: log.With("part", "forge")})
	creds := opts.CloneCredentials
	if creds == nil {
		creds = sourceCredentials{sources}
	}
	// The fleet serves agents; what its store operations commit goes to
	// the engine through fl.Effects(). The scalers start agents for the
	// jobs it leaves waiting.
	scalers, err := newScalers(cfg, db, opts, log.With("part", "scaler"))
	if err != nil {
		return err
	}
	fcfg := fleetConfig(cfg, cl, opts.Clock, log)
	fcfg.Scaler = fleetScaler(scalers)
	// The upload settle: a job's success waits for the cache and artifact
	// uploads it started (recorded in the database, so on any server).
	settle := caches.NewSettle(db, caches.SettleConfig{Timeout: cfg.Caches.UploadSettleTimeout, Logger: log.With("part", "settle")})
	fcfg.Settle = settle
	gate := newStartGate(cfg.LocalAgents)
	fcfg.OnRegister = gate.registered
	fl, err := fleet.New(db, logs, creds, fcfg)
	if err != nil {
		return err
	}
	// The reporter is made once the engine is; GitHub refusing a check
	// run (posted as a commit status instead) is recorded on the run.
	var reporter *statusReporter
	statuses := newStatusPoster(sources, log.With("part", "statuses"), func(src string, st forge.Status, reason string) {
		reporter.fellBack(src, st, reason)
	})
	met, err := newMetrics(cfg, db, fl, statuses, log.With("part", "metrics"))
	if err != nil {
		return err
	}
	if scalers != nil {
		scalers.SetFleet(fl)
		scalers.SetHooks(met.ScalerHooks())
		scalers.SetLeading(func() bool { _, ok := cl.Leading(); return ok })
	}
	// The engine wakes and cancels jobs through the fleet, applies what the
	// fleet commits, and tells the metrics what it did.
	eng := engine.New(db, fl, engine.Config{
		SweepInterval: cfg.Queue.SweepInterval, UnroutableGrace: cfg.Queue.UnroutableGrace,
		CancelGrace: cfg.Runs.CancelGrace, Clock: opts.Clock, Logger: log.With("part", "engine"),
		Hooks: met.EngineHooks(), Scalers: engineScalers(scalers),
		Leading: func() bool { _, ok := cl.Leading(); return ok },
	})
	reporter = newStatusReporter(eng, db, sources, logs, statuses, cfg.PublicURL, log.With("part", "statuses"))
	// The instance id, kept in the data directory, names this server's
	// delivery claims, so a restart takes up at once what it held.
	instance, err := instanceID(cfg.DataDir)
	if err != nil {
		return err
	}
	proc := ingress.New(db, eng, sources, ingress.Config{
		Owner:        instance,
		MaxBodyBytes: cfg.Webhooks.MaxBodyBytes, ClaimLease: cfg.Webhooks.ClaimLease, Logger: log.With("part", "ingress"),
		MaxUnverified: cfg.Webhooks.MaxUnverified, InMemoryBytes: cfg.Webhooks.InMemoryBytes, SpoolDir: spoolDir,
		UnverifiedWait: cfg.HTTP.ReadTimeout / 2,
		Recorded:       met.DeliveryRecorded, Finished: met.DeliveryFinished, Refused: met.WebhookRefused,
		Invalid: reporter.invalid,
	})
	scheduler := ingress.NewScheduler(db, eng, cfg.Runs.ScheduleInterval, opts.Clock, log.With("part", "schedules"))

	arts, err := artifacts.New(db, blobs, artifacts.Config{MaxBytes: cfg.Artifacts.MaxBytes, Idle: cfg.HTTP.WriteTimeout,
		Tracker: settle, Logger: log.With("part", "artifacts")})
	if err != nil {
		return err
	}
	cachesSvc, err := caches.New(db, blobs, caches.Config{MaxBytes: cfg.Caches.MaxBytes, Idle: cfg.HTTP.WriteTimeout,
		Tracker: settle, Clock: opts.Clock, Logger: log.With("part", "caches")})
	if err != nil {
		return err
	}

	// The garbage collector: retention.* on the leader only.
	gc, err := retention.New(db, blobs, logs, cachesSvc, cl, retention.Config{
		Runs: cfg.Retention.Runs, Artifacts: cfg.Retention.Artifacts, Caches: cfg.Retention.Caches,
		Deliveries: cfg.Retention.Deliveries, Clock: opts.Clock, Logger: log.With("part", "retention"), Hooks: met.RetentionHooks(),
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /ws", fl.Handler())
	perWrite := func(h http.Handler) http.Handler { return perWriteDeadlines(h, cfg.HTTP.WriteTimeout) }
	mux.Handle("POST /webhook/{kind}/{source}", perWrite(http.HandlerFunc(proc.Webhook)))
	mux.Handle("/agent/v1/", arts.AgentHandler()) // its own deadlines, per read and per write
	mux.Handle("/agent/v1/jobs/{job}/cache", cachesSvc.AgentHandler())
	if cfg.Metrics.Listen == "" {
		mux.Handle("GET /metrics", perWrite(metricsOnMain(db, met, log)))
	}
	if err := mountAPI(mux, perWrite, apiDeps{db: db, eng: eng, fleet: fl, proc: proc, sources: sources, logs: logs, arts: arts, log: log, writeTimeout: cfg.HTTP.WriteTimeout, scalers: scalers, coordinator: cl.ID(),
		publicURL: cfg.PublicURL, sessionTTL: cfg.Dashboard.SessionTTL}); err != nil {
		return err
	}

	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	var metricsLn *metricsListener
	if rawMetricsLn != nil {
		metricsLn = listenMetrics(rawMetricsLn, cfg.HTTP, met, log)
		metricsURL = "http://" + rawMetricsLn.Addr().String() + "/metrics"
	}
	// Requests run under baseCtx, which ends streamGrace after shutdown
	// starts: ordinary requests finish, long-lived ones (log follows) end.
	baseCtx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := newHTTPServer(cfg.HTTP, mux, log)
	srv.BaseContext = func(net.Listener) context.Context { return baseCtx }
	s := &Server{
		Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String(), AdminToken: admin,
		DB: db, Engine: eng, Fleet: fl, Ingress: proc, Sources: sources, Logs: logs, Metrics: met,
		MetricsURL: metricsURL,
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	// The first wave (startgate.go): what ready and the local agents need.
	g.Go(func() error { return eng.Run(gctx) })
	g.Go(func() error { return fl.Run(gctx) })
	g.Go(func() error { return proc.Run(gctx) })
	g.Go(func() error { return logs.Run(gctx) })
	// The second: background work, once the first is done.
	g.Go(func() error { gate.run(gctx, fl.Started(), startSettleMax); return nil })
	g.Go(gate.after(gctx, cl.Run))
	g.Go(gate.after(gctx, sources.Listen))
	g.Go(gate.after(gctx, reporter.Run))
	g.Go(gate.after(gctx, scheduler.Run))
	g.Go(gate.after(gctx, met.Run))
	g.Go(gate.after(gctx, gc.Run))
	if metricsLn != nil {
		g.Go(func() error { return metricsLn.Run(gctx) })
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		t := time.AfterFunc(streamGrace, endRequests)
		defer t.Stop()
		return srv.Shutdown(sctx)
	})
	if scalers != nil {
		scalers.SetServerURL(s.URL)
		g.Go(gate.after(gctx, scalers.Run))
		if opts.Reload != nil && opts.LoadConfig != nil {
			r := &reloader{running: cfg, load: opts.LoadConfig, scalers: scalers, log: log.With("part", "reload")}
			g.Go(func() error { r.run(gctx, opts.Reload); return nil })
		}
	}
	if cfg.LocalAgents > 0 {
		la := &localAgents{db: db, cfg: cfg, url: s.URL, binary: opts.AgentBinary, log: log.With("part", "local-agents")}
		g.Go(func() error { return la.Run(gctx) })
	}
	// Ready means agents are accepted: the fleet has finished its start-up
	// recovery of the previous process's agents and /ws takes connections
	// (B133). A start that fails before then is not announced at all.
	select {
	case <-fl.Started():
		log.Info("kiln server ready", "url", s.URL, "metrics", s.MetricsURL, "data_dir", cfg.DataDir, "database", db.Dialect(),
			"startup", time.Since(started).Round(time.Millisecond))
		fmt.Fprint(opts.Out, cliHint(s.Addr))
		if opts.Ready != nil {
			opts.Ready(s)
		}
	case <-gctx.Done():
	}
	err = g.Wait()
	log.Info("kiln server stopped")
	return err
}

// newHTTPServer is an HTTP server with the configured timeouts: a client
// holds a connection only as long as its headers, body and idle keep-alive
// take (B101); the handlers give each write its own deadline
// (perWriteDeadlines), and the streaming ones (the log follow, /ws) clear
// the read deadline, which would end them.
func newHTTPServer(c HTTPConfig, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: h, ReadHeaderTimeout: c.ReadHeaderTimeout, ReadTimeout: c.ReadTimeout,
		IdleTimeout: c.IdleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB;
// no client of kiln sends more than a few KiB).
const maxHeaderBytes = 64 << 10

// databaseURL is the store's URL: cfg.Database, or SQLite in the data
// directory.
func databaseURL(cfg Config) string {
	if cfg.Database != "" {
		return cfg.Database
	}
	return "sqlite://" + filepath.Join(cfg.DataDir, "kiln.db")
}

func storeConfig(cfg Config, release store.Releaser, clock func() time.Time, log *slog.Logger) store.Config {
	return store.Config{
		URL: databaseURL(cfg), Releaser: release, Clock: clock, Logger: log.With("part", "store"),
		MaxAttempts: cfg.Queue.MaxAttempts, AckTimeout: cfg.Agents.AckTimeout, QueueTimeout: queueTimeout(cfg.Queue.Expiry),
		RecoveryWindow: cfg.Agents.RecoveryWindow, StaleAfter: cfg.Agents.StaleAfter, DedupTTL: cfg.Webhooks.DedupTTL,
	}
}

// queueTimeout maps queue.expiry (0: never) onto the store's convention
// (negative: never).
func queueTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func newLogger(w io.Writer, c LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		opts.ReplaceAttr = durationText
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// durationText writes a duration in the JSON log as text ("735ms") rather
// than as nanoseconds, as the text log does.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
