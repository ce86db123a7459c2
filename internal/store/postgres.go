package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL goes through database/sql with pgx's stdlib driver, so every
// operation shares one code path with SQLite; pgx caches each connection's
// prepared statements, which is where a native pgxpool would win, so the
// hot path loses nothing measurable (see docs/store.md for the numbers).
// Several coordinators may share the database: claims use FOR UPDATE SKIP
// LOCKED, and job changes in a run first take the run's advisory lock.
type postgresDialect struct{}

func (postgresDialect) name() string       { return "postgres" }
func (postgresDialect) dollarParams() bool { return true }

// retryable: deadlock victims (40P01) and serialization failures (40001)
// are rerun by Update.
func (postgresDialect) retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001"
	}
	return false
}

func (postgresDialect) wrap(err error) error { return err }

// lockRuns serializes job changes per run with transaction-scoped advisory
// locks keyed by the run id's hash, taken in key order so two transactions
// locking overlapping sets cannot deadlock. Advisory locks live in memory:
// unlike SELECT … FOR UPDATE they write nothing to the run's row (no WAL,
// no dirtied page) and never conflict with plain updates of runs.
func (postgresDialect) lockRuns(ctx context.Context, t *txn, ids []string) error {
	var need []string
	for _, id := range ids {
		if !t.locked[id] {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	return pgLock(ctx, t, "SELECT id, hashtextextended(id, 0) AS k FROM runs WHERE id = ANY(?::text[])", need)
}

// runsOfJobs are the (id, k) rows of the runs of some jobs, for pgLock.
const runsOfJobs = "SELECT DISTINCT run_id, hashtextextended(run_id, 0) AS k FROM jobs WHERE id = ANY(?::text[])"

// lockRunsOfJobs locks the runs of jobs in one round trip.
func (postgresDialect) lockRunsOfJobs(ctx context.Context, t *txn, jobIDs []string) error {
	return pgLock(ctx, t, runsOfJobs, jobIDs)
}

// runsLockedFirst is an uncorrelated subquery, which PostgreSQL runs once
// as an InitPlan and tests as the One-Time Filter gating the statement's
// scan: the locks are taken, in k order, before the statement reads (and
// so locks) any job row, the order every transaction takes them in. The
// statement's snapshot is older than the locks, but a job row changed
// meanwhile is rechecked as it is now (READ COMMITTED's recheck of an
// updated row), and the statements after it take new snapshots.
func (postgresDialect) runsLockedFirst(jobIDs []string) (string, []any) {
	return "(SELECT count(*) FROM " + pgLockRows(runsOfJobs) + ") >= 0", []any{jobIDs}
}

// pgLockRows is the FROM item taking the advisory locks of the (id, k) rows
// inner selects, in k order.
func pgLockRows(inner string) string {
	return "(SELECT * FROM (" + inner + ") r(id, k) ORDER BY k OFFSET 0) s CROSS JOIN LATERAL (SELECT pg_advisory_xact_lock(s.k)) l"
}

// pgLock takes the advisory locks of the (id, k) rows inner selects (its
// one argument, ids), in k order, and records the ids as locked.
func pgLock(ctx context.Context, t *txn, inner string, ids []string) error {
	rows, err := t.query(ctx, "SELECT s.id FROM "+pgLockRows(inner), ids)
	if err != nil {
		return fmt.Errorf("lock runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		t.locked[id] = true
	}
	return rows.Err()
}

func (postgresDialect) nextRunNumber() string { return "nextval('run_numbers')" }

func (postgresDialect) writesInWith() bool { return true }

func (postgresDialect) lateral() bool { return true }

func (postgresDialect) oneOf(col string, vals []string) (string, []any) {
	return col + " = ANY(?::text[])", []any{vals}
}

func (postgresDialect) pairOf(a, b string, as []string, bs []int64) (string, []any) {
	return "(" + a + ", " + b + ") IN (SELECT * FROM unnest(?::text[], ?::bigint[]))", []any{as, bs}
}

func openPostgres(ctx context.Context, c *DB) error {
	cfg, err := pgx.ParseConfig(c.cfg.URL)
	if err != nil {
		return fmt.Errorf("store: parse the PostgreSQL URL: %w", err)
	}
	c.dialect = postgresDialect{}
	c.keys.plans = &queuePlans{}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(c.cfg.MaxConns)
	db.SetMaxIdleConns(c.cfg.MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return fmt.Errorf("store: connect to PostgreSQL %s@%s/%s: %w", cfg.User, cfg.Host, cfg.Database, err)
	}
	c.write, c.read = db, db
	c.probe = newProber(ctx, cfg)
	return nil
}

// pgAdvisoryLock holds PostgreSQL's session advisory lock on conn while fn
// runs, so coordinators starting together migrate one at a time.
func pgAdvisoryLock(ctx context.Context, conn *sql.Conn, key int64, fn func() error) error {
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key)
	}()
	return fn()
}
