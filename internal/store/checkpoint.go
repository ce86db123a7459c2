package store

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// SQLite in WAL mode appends every commit to the log and copies the log's
// pages back into the database file at a checkpoint. By default the
// connection whose commit takes the log past a threshold runs the
// checkpoint inside that commit: with one writer, every write queued behind
// it waited too (kiln bench, 1,000 agents at half load: claim p99 79–98 ms,
// 13 ms with no checkpoints at all).
//
// The checkpointer copies the log on a connection of its own instead, in
// PASSIVE mode, which takes no lock a writer needs, so the writer goes on
// appending meanwhile. That alone never lets the log start over: the writer
// restarts it from its top only once a checkpoint has copied all of it, and
// a checkpoint that runs beside the writer always ends behind it. So each
// round copies in passes, each taking in what was appended during the last,
// and once the log is past restartPages the checkpointer asks the writer to
// finish: between two transactions, the writer runs a checkpoint of what the
// last pass left (a few milliseconds of commits), after which its next
// transaction restarts the log. The writer's own automatic checkpoint stays,
// at a far higher threshold, for a checkpointer that cannot keep up.

const (
	// checkpointEvery is the least time between two rounds: each copies
	// the pages changed since the last, so a page written many times in
	// between is copied once, while a round stays short.
	checkpointEvery = 100 * time.Millisecond
	// checkpointPasses bounds the passes of a round, and a pass that
	// finds fewer than settledPages appended since the last one ends it.
	checkpointPasses = 3
	settledPages     = 64
	// restartPages is the log's size, in pages (4 KiB each), past which
	// the writer is asked to finish a round, so the log starts over.
	restartPages = 4096
	// writerCheckpointPages is the writer's own threshold: the backstop.
	writerCheckpointPages = 32_000
)

type checkpointer struct {
	conn *sql.DB
	log  *slog.Logger
	// finish asks the writer to end a round (the combiner serves it).
	finish chan struct{}
	wake   chan struct{}
	quit   chan struct{}
	exit   chan struct{}
}

// startCheckpointer opens the checkpointer's connection to the database at
// path and starts it.
func startCheckpointer(path string, log *slog.Logger) (*checkpointer, error) {
	conn, err := sql.Open("sqlite", sqliteDSN(path, "_pragma=busy_timeout(5000)"))
	if err != nil {
		return nil, err
	}
	conn.SetMaxOpenConns(1)
	conn.SetMaxIdleConns(1)
	conn.SetConnMaxIdleTime(0)
	c := &checkpointer{conn: conn, log: log, finish: make(chan struct{}, 1),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), exit: make(chan struct{})}
	go c.run()
	return c, nil
}

// stop waits for a round under way and closes the connection.
func (c *checkpointer) stop() error {
	close(c.quit)
	<-c.exit
	return c.conn.Close()
}

// poke tells the checkpointer the log grew; it never blocks a writer.
func (c *checkpointer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.exit)
	failing := false
	for {
		select {
		case <-c.wake:
		case <-c.quit:
			return
		}
		err := c.round()
		switch {
		case err != nil && !failing:
			c.log.Warn("store: SQLite checkpoint failed; the writer checkpoints itself once the log reaches its limit", "err", err)
		case err == nil && failing:
			c.log.Info("store: SQLite checkpoints work again")
		}
		failing = err != nil
		select {
		case <-time.After(checkpointEvery):
		case <-c.quit:
			return
		}
	}
}

// round copies the log in passes until one finds little appended during
// the last, then, when the log is long, asks the writer to finish.
func (c *checkpointer) round() error {
	last := walState{pages: -1}
	for range checkpointPasses {
		st, err := checkpoint(c.conn)
		if err != nil || st.pages < 0 { // < 0: the database is not in WAL mode
			return err
		}
		appended := st.pages - last.pages
		last = st
		if appended < settledPages {
			break
		}
	}
	if last.pages >= restartPages {
		select {
		case c.finish <- struct{}{}:
		default: // asked already
		}
	}
	return nil
}

// finishCheckpoint ends a round on the writer, between two transactions:
// with nothing appended meanwhile, it copies the rest of the log, and the
// writer's next transaction starts the log over.
func (db *DB) finishCheckpoint() {
	if _, err := checkpoint(db.write); err != nil {
		db.log.Debug("store: the writer's checkpoint failed", "err", err)
	}
}

// walState is what a checkpoint reports: the log's length and how much of
// it is in the database file, in pages.
type walState struct{ pages, copied int }

// checkpoint copies what it can of the log into the database file without
// waiting for any reader or writer.
func checkpoint(conn *sql.DB) (walState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var busy int
	var st walState
	err := conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &st.pages, &st.copied)
	return st, err
}
