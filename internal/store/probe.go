package store

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// prober answers readiness probes on PostgreSQL from a connection of its
// own, beside the pool. Two reasons:
//   - a probe must not queue behind the pool: with every connection busy
//     in a burst, a probe through the pool times out and takes a busy but
//     healthy server out of its load balancer's rotation;
//   - at start-up the server's parts open a dozen new connections at once
//     (each a backend fork and its catalogs, 3–15 ms apiece on two busy
//     cores): a probe given one of those answered /ready 120–150 ms after
//     the server logged ready. The probe's connection is opened while the
//     migrations run, so it is there when the first probe comes.
//
// SQLite needs none of this: its read pool opens connections in-process.
type prober struct {
	db     *sql.DB       // at most one connection; probes queue for it
	warmed chan struct{} // closed once the first connection is open (or failed)
	stop   context.CancelFunc
}

// newProber opens the probe's pool and starts connecting it.
func newProber(ctx context.Context, cfg *pgx.ConnConfig) *prober {
	p := &prober{db: stdlib.OpenDB(*cfg), warmed: make(chan struct{})}
	p.db.SetMaxOpenConns(1)
	p.db.SetMaxIdleConns(1)
	ctx, p.stop = context.WithCancel(ctx)
	go func() {
		defer close(p.warmed)
		_ = p.db.PingContext(ctx) // a failure shows at the first probe
	}()
	return p
}

// probeQuery reads a real table, so a missing schema or an unreadable file
// fails the probe as a dead server would.
const probeQuery = "SELECT count(*) FROM (SELECT 1 FROM runs LIMIT 1) r"

// ProbeRead runs one small read: on PostgreSQL on the probe's own
// connection (on a new one if the database dropped it, as after a database
// restart), on SQLite through the read pool.
func (db *DB) ProbeRead(ctx context.Context) error {
	if db.probe == nil {
		var n int
		return db.read.QueryRowContext(ctx, probeQuery).Scan(&n)
	}
	return db.probe.run(ctx)
}

func (p *prober) run(ctx context.Context) error {
	var n int
	err := p.db.QueryRowContext(ctx, probeQuery).Scan(&n)
	if err == nil || ctx.Err() != nil {
		return err
	}
	// The connection may be what failed (the database restarted, or it was
	// terminated; the pool drops a connection pgx has closed): one more try
	// on a new one says whether the database is what is down.
	return p.db.QueryRowContext(ctx, probeQuery).Scan(&n)
}

func (p *prober) close() error {
	p.stop() // a connection still being opened is given up
	<-p.warmed
	return p.db.Close()
}
