package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

// ClaimBranchPostgres is the claim's per-key query on PostgreSQL, for the
// plan test in package store_test.
const ClaimBranchPostgres = claimBranchPostgres

// ClaimSQLPostgres is a whole claim's statement for nkeys keys on
// PostgreSQL, for the plan test in package store_test.
func ClaimSQLPostgres(nkeys int) string { return claimSQLPostgres("", "", nkeys, "") }

// StartRunsSQLPostgres is the start of the runs a batch of starts left
// pending (CompleteBatch), on PostgreSQL, for the plan test.
func StartRunsSQLPostgres() string {
	in, _ := postgresDialect{}.oneOf("id", nil)
	return startRunsSQL(in)
}

// ExpirySweep is the expiry sweep's read, for the plan test.
const ExpirySweep = expirySweep

// AgentHoldsSQL is the read of the jobs an agent holds (Queue.AgentLost),
// for the plan test in package store_test.
func AgentHoldsSQL() string { return "SELECT " + candidateCols + " FROM jobs WHERE " + agentHolds }

// SetQueryOnly makes SQLite's writer connection refuse writes (PRAGMA
// query_only), as a database on a full or read-only disk does.
func SetQueryOnly(db *DB, on bool) error {
	v := "OFF"
	if on {
		v = "ON"
	}
	_, err := db.write.Exec("PRAGMA query_only = " + v)
	return err
}

// BackendPID is the PostgreSQL connection tx runs on.
func BackendPID(tx *Tx) (int, error) {
	var pid int
	err := tx.t.queryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// ExecIn runs q (with ? placeholders) in tx.
func ExecIn(tx *Tx, q string, args ...any) error {
	_, err := tx.t.exec(context.Background(), q, args...)
	return err
}

// QueryRowIn runs q (with ? placeholders) in tx.
func QueryRowIn(tx *Tx, q string, args ...any) *sql.Row {
	return tx.t.queryRow(context.Background(), q, args...)
}

// AgeOpen makes the transaction h's last commit began look older than
// staleOpen.
func AgeOpen(h *Held) { h.openedAt = h.openedAt.Add(-2 * staleOpen) }

// KeysReadAt is when db last read the queue's keys for its claims.
func KeysReadAt(db *DB) time.Time {
	db.keys.mu.Lock()
	defer db.keys.mu.Unlock()
	return db.keys.at
}

// ExpireKeys makes db's next claim read the queued keys afresh, and on
// PostgreSQL the jobs table's size with them.
func ExpireKeys(db *DB) {
	db.keys.mu.Lock()
	defer db.keys.mu.Unlock()
	db.keys.at = time.Time{}
	if db.keys.plans != nil {
		db.keys.plans.checked.Store(0)
	}
}

// TrustKeys makes db's claims trust the keys they last read for an hour,
// whatever the machine's speed, and returns when they were "read".
func TrustKeys(db *DB) time.Time {
	db.keys.mu.Lock()
	defer db.keys.mu.Unlock()
	db.keys.at = time.Now().Add(time.Hour)
	return db.keys.at
}

// StartSQLPostgres is a batch's start on PostgreSQL, for the plan test.
func StartSQLPostgres() string {
	in, _ := postgresDialect{}.oneOf("id", nil)
	leased, _ := postgresDialect{}.pairOf("id", "lease_epoch", nil, nil)
	return startSQL(in + " AND " + leased)
}

// WALGeneration reads the checkpoint sequence number in the header of the
// SQLite database's WAL (sqlite://path or a plain path): SQLite adds one
// each time the log starts over from its top. 0 before the log is written.
func WALGeneration(url string) uint32 {
	path, err := sqlitePath(url)
	if err != nil {
		return 0
	}
	f, err := os.Open(path + "-wal")
	if err != nil {
		return 0
	}
	defer f.Close()
	var hdr [16]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return 0
	}
	return binary.BigEndian.Uint32(hdr[12:16])
}

// ApplyMigrationSQL applies bodies as migrations numbered from 1001, the
// way a start applies the files it finds pending: in one transaction.
func ApplyMigrationSQL(ctx context.Context, db *DB, bodies ...string) error {
	conn, err := db.write.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var ms []migration
	for i, b := range bodies {
		v := 1001 + i
		ms = append(ms, migration{version: v, name: fmt.Sprintf("%04d_test.sql", v), sql: b})
	}
	_, err = applyPending(ctx, db, conn, ms)
	return err
}

// OpenAtVersion opens cfg's database migrated only up to version, as an
// older kiln left it, for a test to fill through SQL() before a real Open
// upgrades it. Nothing else of the store runs on it.
func OpenAtVersion(ctx context.Context, cfg Config, version int) (*DB, error) {
	cfg = cfg.withDefaults()
	c := &DB{cfg: cfg, log: cfg.Logger}
	open := openSQLite
	if isPostgresURL(cfg.URL) {
		open = openPostgres
	}
	if err := open(ctx, c); err != nil {
		return nil, err
	}
	all, err := loadMigrations(c.dialect.name())
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	var upTo []migration
	for _, m := range all {
		if m.version <= version {
			upTo = append(upTo, m)
		}
	}
	conn, err := c.write.Conn(ctx)
	if err == nil {
		err = applyMigrations(ctx, c, conn, upTo)
		_ = conn.Close()
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}
