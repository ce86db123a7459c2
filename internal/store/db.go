package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Config.
const (
	DefaultMaxAttempts    = 5
	DefaultAckTimeout     = 10 * time.Second
	DefaultQueueTimeout   = time.Hour
	DefaultRecoveryWindow = 120 * time.Second
	DefaultStaleAfter     = 120 * time.Second
	DefaultDedupTTL       = 24 * time.Hour
	DefaultMaxConns       = 16
	DefaultReadConns      = 4
)

// Config configures Open. URL and Releaser are required.
type Config struct {
	// URL is "sqlite:///abs/path/kiln.db", a plain file path (SQLite), or
	// "postgres://…" / "postgresql://…".
	URL string
	// Releaser decides what happens to a job whose needs are met; the store
	// calls it inside the transaction that made the job ready (creating a
	// run, for its root jobs). kiln's is engine.Release; tests of the store
	// alone use storetest.QueueAsCreated.
	Releaser Releaser
	// Clock returns the current time; every timestamp the store writes comes
	// from it. Default time.Now.
	Clock func() time.Time
	// Logger receives migration and retry notes. Default: discard.
	Logger *slog.Logger

	// MaxAttempts bounds dispatch attempts: a job requeued after its
	// MaxAttempts-th dispatch (reject, ack timeout, lost before starting)
	// fails instead. Default 5.
	MaxAttempts int
	// AckTimeout is how long a claimed job may stay dispatched before the
	// ack sweep requeues it. Default 10s.
	AckTimeout time.Duration
	// QueueTimeout is how long a queued job waits for an agent before expiry,
	// unless the Releaser set its own. Negative: never. Default 1h.
	QueueTimeout time.Duration
	// RecoveryWindow is how long the jobs of a lost agent wait for it to
	// reconnect. Default 120s.
	RecoveryWindow time.Duration
	// StaleAfter is how old a running job's last heartbeat may be before the
	// stale detector ends it as timed_out_stale. Default 120s.
	StaleAfter time.Duration
	// DedupTTL is how long a webhook delivery id is remembered. Default 24h.
	DedupTTL time.Duration

	// MaxConns bounds the PostgreSQL pool. Default 16. Readiness probes
	// (ProbeRead) have one connection more, of their own.
	MaxConns int
	// ReadConns bounds SQLite's read-only pool. Default 4.
	ReadConns int
	// SQLiteSynchronous is SQLite's synchronous pragma: "NORMAL" (default;
	// survives a process crash, may lose the last commits on power loss) or
	// "FULL" (an fsync per commit).
	SQLiteSynchronous string
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = DefaultQueueTimeout
	}
	if c.RecoveryWindow <= 0 {
		c.RecoveryWindow = DefaultRecoveryWindow
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.DedupTTL <= 0 {
		c.DedupTTL = DefaultDedupTTL
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.ReadConns <= 0 {
		c.ReadConns = DefaultReadConns
	}
	if c.SQLiteSynchronous == "" {
		c.SQLiteSynchronous = "NORMAL"
	}
	return c
}

func (c Config) validate() error {
	if strings.TrimSpace(c.URL) == "" {
		return errors.New("store: the database URL is empty; give a SQLite path or a postgres:// URL")
	}
	if c.Releaser == nil {
		return errors.New("store: Config.Releaser is required: it decides what happens to a job whose needs are met (engine.Release)")
	}
	switch strings.ToUpper(c.SQLiteSynchronous) {
	case "NORMAL", "FULL":
	default:
		return fmt.Errorf("store: SQLite synchronous mode %q is not NORMAL or FULL", c.SQLiteSynchronous)
	}
	return nil
}

// DB is an open store. It is safe for concurrent use. The focused accessors
// (Runs, Jobs, Queue, Ingress, Auth, Sources, Logs, Cluster) each run one
// transaction per call; Update runs several operations in one transaction.
type DB struct {
	cfg     Config
	dialect dialect
	write   *sql.DB // SQLite: the one writer connection; PostgreSQL: the pool
	read    *sql.DB // SQLite: a read-only pool; PostgreSQL: the same pool
	log     *slog.Logger

	comb      *combiner     // SQLite: group commit of concurrent writes
	ckpt      *checkpointer // SQLite: checkpoints off the writer
	claimer   *pgClaimer    // PostgreSQL: combined claims
	probe     *prober       // PostgreSQL: readiness probes' own connection
	keys      keyCache      // the distinct queued keys, for claims
	rebound   sync.Map      // SQL with ? → SQL for this dialect
	stmts     sync.Map      // SQLite: SQL → statement prepared on the writer
	nstmts    atomic.Int32
	health    writeHealth // best-effort writes that failed (B131)
	closeOnce sync.Once
	closeErr  error

	// sourceWatch are the callbacks of WatchSources.
	sourceWatch sourceWatchers
}

// Open connects to the database named by cfg.URL, applies the embedded
// migrations it has not seen yet, and returns the store.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &DB{cfg: cfg, log: cfg.Logger}
	var err error
	if isPostgresURL(cfg.URL) {
		err = openPostgres(ctx, c)
	} else {
		err = openSQLite(ctx, c)
	}
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, c); err != nil {
		_ = c.Close()
		return nil, err
	}
	if c.dialect.name() == "sqlite" {
		c.startCombiner()
	} else {
		c.startClaimer()
	}
	return c, nil
}

// Close closes the connections.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.stopCombiner()
		if db.claimer != nil {
			db.claimer.stop()
		}
		var errs []error
		if db.probe != nil {
			errs = append(errs, db.probe.close())
		}
		if db.ckpt != nil {
			errs = append(errs, db.ckpt.stop())
		}
		db.stmts.Range(func(_, v any) bool {
			errs = append(errs, v.(*sql.Stmt).Close())
			return true
		})
		if db.read != nil && db.read != db.write {
			errs = append(errs, db.read.Close())
		}
		if db.write != nil {
			errs = append(errs, db.write.Close())
		}
		db.closeErr = errors.Join(errs...)
	})
	return db.closeErr
}

// Dialect names the database behind the store: "sqlite" or "postgres".
func (db *DB) Dialect() string { return db.dialect.name() }

// SQL returns the underlying pool for tests and benchmarks that need a
// baseline on the same database. Nothing in kiln outside this package may
// use it for anything else.
func (db *DB) SQL() *sql.DB { return db.write }

// Runs is the accessor for runs: creation, reads, cancel, deadlines.
func (db *DB) Runs() Runs { return Runs{h: handle{db: db}} }

// Jobs is the accessor for the lease-guarded reports of an agent about its
// jobs: start, heartbeat, steps, completion.
func (db *DB) Jobs() Jobs { return Jobs{h: handle{db: db}} }

// Queue is the accessor for the dispatch queue: claims, requeues, sweeps,
// pending reasons and depth.
func (db *DB) Queue() Queue { return Queue{h: handle{db: db}} }

// Ingress is the accessor for webhook deliveries: dedup and the event log.
func (db *DB) Ingress() Ingress { return Ingress{h: handle{db: db}} }

// Auth is the accessor for agent and admin tokens and the agents table.
func (db *DB) Auth() Auth { return Auth{h: handle{db: db}} }

// Sources is the accessor for configured forge sources.
func (db *DB) Sources() Sources { return Sources{h: handle{db: db}} }

// Logs is the accessor for the log chunk index.
func (db *DB) Logs() Logs { return Logs{h: handle{db: db}} }

// Cluster is the accessor for leader leases and cron fire times.
func (db *DB) Cluster() Cluster { return Cluster{h: handle{db: db}} }

func (db *DB) now() time.Time { return db.cfg.Clock() }
