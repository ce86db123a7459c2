package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/jsonwire"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite runs with one writer connection (every write transaction is BEGIN
// IMMEDIATE on it, so writers never race and a claim needs no row locks) and
// a separate read-only pool, so API reads never queue behind the writer: in
// WAL mode readers see the last commit and do not block it.
type sqliteDialect struct{}

func (sqliteDialect) name() string       { return "sqlite" }
func (sqliteDialect) dollarParams() bool { return false }

// retryable: the single writer never deadlocks; only another process
// holding the database's write lock past busy_timeout makes a transaction
// worth rerunning.
func (sqliteDialect) retryable(err error) bool { return isSQLiteBusy(err) }

func (sqliteDialect) wrap(err error) error { return err }

// lockRuns is a no-op: the transaction already holds the only write lock.
func (sqliteDialect) lockRuns(context.Context, *txn, []string) error       { return nil }
func (sqliteDialect) lockRunsOfJobs(context.Context, *txn, []string) error { return nil }
func (sqliteDialect) runsLockedFirst([]string) (string, []any)             { return "", nil }

// nextRunNumber: the single writer makes MAX+1 race-free; runs_number is a
// unique index, so this reads one index entry.
func (sqliteDialect) nextRunNumber() string {
	return "(SELECT COALESCE(MAX(number), 0) + 1 FROM runs)"
}

func (sqliteDialect) writesInWith() bool { return false }

func (sqliteDialect) lateral() bool { return false }

// oneOf and pairOf hand SQLite their values as one JSON array, read back
// by json_each: the statement's text is the same for any number of values,
// so it is compiled once and cached (prepareWanted) instead of on every
// call, and the planner still probes the column's index for each value.
func (sqliteDialect) oneOf(col string, vals []string) (string, []any) {
	return col + " IN (SELECT value FROM json_each(?))", []any{jsonStrings(vals)}
}

// jsonStrings is vals as a JSON array, for json_each.
func jsonStrings(vals []string) string {
	buf := make([]byte, 0, 2+len(vals)*40)
	buf = append(buf, '[')
	for i, v := range vals {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = jsonwire.AppendString(buf, v)
	}
	return string(append(buf, ']'))
}

func (sqliteDialect) pairOf(a, b string, as []string, bs []int64) (string, []any) {
	buf := make([]byte, 0, 2+len(as)*48)
	buf = append(buf, '[')
	for i := range as {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		buf = jsonwire.AppendString(buf, as[i])
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, bs[i], 10)
		buf = append(buf, ']')
	}
	buf = append(buf, ']')
	return "(" + a + ", " + b + ") IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))", []any{string(buf)}
}

func isPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// sqlitePath turns "sqlite:///abs/path", "sqlite://rel/path", "file:…" or a
// plain path into a file path.
func sqlitePath(u string) (string, error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		u = strings.TrimPrefix(u, "sqlite://")
	case strings.HasPrefix(u, "sqlite:"):
		u = strings.TrimPrefix(u, "sqlite:")
	case strings.HasPrefix(u, "file:"):
		u = strings.TrimPrefix(u, "file:")
	}
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	if u == "" || u == ":memory:" {
		return "", errors.New("store: SQLite needs a file path (an in-memory database cannot have a separate read pool)")
	}
	return filepath.Abs(u)
}

func sqliteDSN(path string, params ...string) string {
	v := url.URL{Scheme: "file", Path: path, RawQuery: strings.Join(params, "&")}
	return v.String()
}

func openSQLite(ctx context.Context, c *DB) error {
	path, err := sqlitePath(c.cfg.URL)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("store: create the database directory: %w", err)
	}
	c.dialect = sqliteDialect{}
	sync := strings.ToUpper(c.cfg.SQLiteSynchronous)
	// busy_timeout first: the pragmas run in this order on every new
	// connection, and switching a fresh file to WAL while another opener
	// holds it must wait rather than fail at once with SQLITE_BUSY.
	w, err := sql.Open("sqlite", sqliteDSN(path,
		"_pragma=busy_timeout(5000)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous("+sync+")",
		"_pragma=foreign_keys(1)",
		// The combiner runs every operation under a SAVEPOINT, so each
		// page an operation changes goes to the statement journal first;
		// on disk, past 64 KiB, that was a write(2) per page and 11% of
		// the server's CPU at 100 busy agents. The statement journal only
		// serves a rollback inside a live transaction, never recovery, so
		// memory loses nothing a crash needs.
		"_pragma=temp_store(MEMORY)",
		// The writer's page cache holds 32 MiB instead of 2: with 20,000
		// jobs in a fresh database it re-read evicted pages at about two
		// pread(2) a job (strace -c in kiln bench: 22,000 → 17,700 for
		// 10,240 jobs). The writer checkpoints only as a backstop: the
		// checkpointer does it (checkpoint.go).
		"_pragma=cache_size(-32768)",
		"_pragma=wal_autocheckpoint("+strconv.Itoa(writerCheckpointPages)+")",
		"_txlock=immediate"))
	if err != nil {
		return fmt.Errorf("store: open SQLite: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := pingSQLite(ctx, w); err != nil {
		_ = w.Close()
		return fmt.Errorf("store: open SQLite %s: %w", path, err)
	}
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		_ = w.Close()
		return fmt.Errorf("store: SQLite %s is not in WAL mode (journal_mode=%q): %v", path, mode, err)
	}
	r, err := sql.Open("sqlite", sqliteDSN(path,
		"mode=ro",
		"_pragma=busy_timeout(5000)",
		"_pragma=query_only(1)"))
	if err != nil {
		_ = w.Close()
		return fmt.Errorf("store: open SQLite read pool: %w", err)
	}
	r.SetMaxOpenConns(c.cfg.ReadConns)
	r.SetMaxIdleConns(c.cfg.ReadConns)
	ckpt, err := startCheckpointer(path, c.log)
	if err != nil {
		_, _ = r.Close(), w.Close()
		return fmt.Errorf("store: open SQLite checkpointer: %w", err)
	}
	c.write, c.read, c.ckpt = w, r, ckpt
	return nil
}

// pingSQLite opens the first connection. Turning a new file to WAL while
// another opener does the same can fail with SQLITE_BUSY without waiting
// for busy_timeout (SQLite does not wait where waiting could deadlock), so
// that is retried for a while.
func pingSQLite(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := db.PingContext(ctx)
		if err == nil || !isSQLiteBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isSQLiteBusy reports a lock held past busy_timeout by another process.
func isSQLiteBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	}
	return false
}
