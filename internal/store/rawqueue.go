package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, as kiln's own pool uses
)

// The raw queue is the baseline `kiln bench --database` measures kiln's
// dispatch against: the smallest job queue PostgreSQL allows, a table of
// rows claimed with FOR UPDATE SKIP LOCKED one at a time and marked done,
// each claim and each completion its own commit — what a worker pool over a
// bare table does, without agents, leases, runs, logs or a network hop. It
// lives here, next to kiln's own SQL, so both run through the same driver.

const (
	rawCreateSQL = `CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'queued',
		payload text NOT NULL, claimed_at timestamptz, done_at timestamptz)`
	rawIndexSQL = `CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE status = 'queued'`
	rawFillSQL  = `INSERT INTO raw_jobs (payload) SELECT '{"steps":[]}' FROM generate_series(1, $1)`
	// RawClaimSQL claims the oldest queued job.
	RawClaimSQL = `UPDATE raw_jobs SET status = 'running', claimed_at = now() WHERE id = (
		SELECT id FROM raw_jobs WHERE status = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
		RETURNING id, payload`
	// RawCompleteSQL marks a claimed job done.
	RawCompleteSQL = `UPDATE raw_jobs SET status = 'done', done_at = now() WHERE id = $1 AND status = 'running'`
)

// RawQueueResult is what one raw loop measured.
type RawQueueResult struct {
	Jobs    int
	Elapsed time.Duration
}

// RunRawQueue fills a fresh raw_jobs table in the PostgreSQL database at
// url with jobs rows, then drains it with workers goroutines, each claiming
// one job per statement and completing it in another, and times the drain.
// The database should be a scratch one: the table is created there.
func RunRawQueue(ctx context.Context, url string, jobs, workers int) (RawQueueResult, error) {
	if jobs <= 0 || workers <= 0 {
		return RawQueueResult{}, errors.New("raw queue: jobs and workers must be positive")
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		return RawQueueResult{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	for _, q := range []string{rawCreateSQL, rawIndexSQL} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return RawQueueResult{}, fmt.Errorf("raw queue: %w", err)
		}
	}
	if _, err := db.ExecContext(ctx, rawFillSQL, jobs); err != nil {
		return RawQueueResult{}, fmt.Errorf("raw queue: fill: %w", err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE raw_jobs"); err != nil {
		return RawQueueResult{}, fmt.Errorf("raw queue: %w", err)
	}
	// Warm the pool so the timing starts with every worker connected.
	conns := make([]*sql.Conn, workers)
	for i := range conns {
		if conns[i], err = db.Conn(ctx); err != nil {
			return RawQueueResult{}, err
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var id int64
				var payload string
				err := db.QueryRowContext(ctx, RawClaimSQL).Scan(&id, &payload)
				if errors.Is(err, sql.ErrNoRows) {
					return // drained
				}
				if err != nil {
					errs[w] = err
					return
				}
				if _, err := db.ExecContext(ctx, RawCompleteSQL, id); err != nil {
					errs[w] = err
					return
				}
				done.Add(1)
			}
			errs[w] = ctx.Err()
		}()
	}
	wg.Wait()
	res := RawQueueResult{Jobs: int(done.Load()), Elapsed: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("raw queue: %w", err)
	}
	if res.Jobs != jobs {
		return res, fmt.Errorf("raw queue: %d of %d jobs done", res.Jobs, jobs)
	}
	return res, nil
}
