package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migrations are embedded, numbered (migrations/<dialect>/NNNN_name.sql),
// up-only and few: one per release that changes the schema, never one per
// column. The files a start applies run in one transaction, each with its
// row in schema_migrations, so a crash mid-upgrade leaves the database at
// the version it had; and a first start, which applies them all, commits
// (and waits for the disk) once rather than once a file.

//go:embed migrations
var migrationFiles embed.FS

// migrationLockKey is the PostgreSQL advisory lock coordinators take while
// migrating ("kiln" in ASCII).
const migrationLockKey = 0x6b696c6e

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: the name must start with a positive number and _", name)
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// migrate applies the migrations the database has not seen. On PostgreSQL
// it holds an advisory lock so coordinators starting together do not race;
// on SQLite every migration transaction is BEGIN IMMEDIATE, which serializes
// processes sharing the file.
func migrate(ctx context.Context, c *DB) error {
	all, err := loadMigrations(c.dialect.name())
	if err != nil {
		return err
	}
	conn, err := c.write.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer conn.Close()
	run := func() error { return applyMigrations(ctx, c, conn, all) }
	if c.dialect.name() == "postgres" {
		err = pgAdvisoryLock(ctx, conn, migrationLockKey, run)
	} else {
		err = run()
	}
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return nil
}

func applyMigrations(ctx context.Context, c *DB, conn *sql.Conn, all []migration) error {
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at BIGINT NOT NULL)`); err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	latest := 0
	for _, m := range all {
		latest = max(latest, m.version)
	}
	for v := range applied {
		if v > latest {
			return fmt.Errorf("the database is at schema version %d, newer than this kiln knows (%d); run a newer kiln", v, latest)
		}
	}
	var pending []migration
	for _, m := range all {
		if !applied[m.version] {
			pending = append(pending, m)
		}
	}
	done, err := applyPending(ctx, c, conn, pending)
	if err != nil {
		return err
	}
	// One line, not one per migration: a first start applies them all.
	switch {
	case len(done) == 0:
	case len(applied) == 0:
		c.log.Info("store: created the database schema", "dialect", c.dialect.name(), "migrations", len(done), "version", done[len(done)-1])
	default:
		c.log.Info("store: applied migrations", "dialect", c.dialect.name(), "migrations", strings.Join(done, ","))
	}
	return nil
}

// applyPending applies the migrations in one transaction and returns the
// names of those it applied (another process may have applied some while
// this one waited to begin).
func applyPending(ctx context.Context, c *DB, conn *sql.Conn, pending []migration) ([]string, error) {
	if len(pending) == 0 {
		return nil, nil
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	// Read again inside the transaction: on SQLite its BEGIN IMMEDIATE is
	// what serializes the processes migrating one file.
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, m := range pending {
		if applied[m.version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, c.bind("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"),
			m.version, m.name, ms(c.now())); err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		c.log.Debug("store: applying migration", "migration", m.name, "dialect", c.dialect.name())
		done = append(done, strings.TrimSuffix(m.name, ".sql"))
	}
	return done, tx.Commit()
}

// appliedVersions reads the versions schema_migrations records.
func appliedVersions(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}
