package store

import (
	"context"
	"database/sql"
	"fmt"
)

// prober answers readiness probes on PostgreSQL from a connection of its
// own, held beside the pool (the pool opens MaxConns+1 connections, one of
// them this). Two reasons:
//   - a probe must not queue behind the pool: with every connection busy
//     in a burst, a probe through the pool times out and takes a busy but
//     healthy server out of its load balancer's rotation;
//   - at start-up the connection that ran the migrations is warm, while the
//     server's parts open a dozen new ones at once (each a backend fork and
//     its catalogs, 3–15 ms apiece on two busy cores): a probe given a new
//     one of those answered /ready 120–150 ms after the server logged ready.
//
// SQLite needs none of this: its read pool opens connections in-process.
type prober struct {
	sem  chan struct{} // one probe at a time; a channel so a waiter honours its context
	conn *sql.Conn     // nil until the first probe after a failure
}

func newProber(conn *sql.Conn) *prober {
	return &prober{sem: make(chan struct{}, 1), conn: conn}
}

// probeQuery reads a real table, so a missing schema or an unreadable file
// fails the probe as a dead server would.
const probeQuery = "SELECT count(*) FROM (SELECT 1 FROM runs LIMIT 1) r"

// ProbeRead runs one small read: on PostgreSQL on the probe's own
// connection (reconnecting once if the database dropped it, as after a
// database restart), on SQLite through the read pool.
func (db *DB) ProbeRead(ctx context.Context) error {
	if db.probe == nil {
		var n int
		return db.read.QueryRowContext(ctx, probeQuery).Scan(&n)
	}
	return db.probe.run(ctx, db.write)
}

func (p *prober) run(ctx context.Context, pool *sql.DB) error {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the probe connection: %w", ctx.Err())
	}
	defer func() { <-p.sem }()
	if p.conn != nil {
		err := p.query(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		// The connection may be what failed (the database restarted, or it
		// was terminated): one more try on a new one says whether the
		// database is what is down.
	}
	c, err := pool.Conn(ctx)
	if err != nil {
		return err
	}
	p.conn = c
	return p.query(ctx)
}

// query runs the probe on the held connection, dropping it on failure so
// the next probe starts from a new one.
func (p *prober) query(ctx context.Context) error {
	var n int
	err := p.conn.QueryRowContext(ctx, probeQuery).Scan(&n)
	if err != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
	return err
}

// close returns the held connection to the pool, before the pool closes.
func (p *prober) close() error {
	p.sem <- struct{}{}
	defer func() { <-p.sem }()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	return err
}
