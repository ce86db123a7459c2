package server

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// A stop that comes before the server is ready ends the start without
// failing it (exit status 0 for `kiln server`): a supervisor restarting a
// server that had just started must not see it fail.
func TestAStopDuringStartUpIsNoFailure(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			cfg := backendConfig(t, b)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var logged lockedLog
			err := Run(ctx, cfg, Options{Out: &lockedLog{}, Logger: slog.New(slog.NewTextHandler(&logged, nil)),
				Ready: func(*Server) { t.Error("a server stopped before it started was announced ready") }})
			if err != nil {
				t.Fatalf("Run stopped during start-up: %v", err)
			}
			if !strings.Contains(logged.String(), "the stop interrupted") {
				t.Fatalf("the stop was not logged:\n%s", logged.String())
			}
		})
	}
}

// A server waiting for another coordinator's migration lock (PostgreSQL)
// gives up the wait when it is stopped, and returns nil.
func TestAStopWhileWaitingForTheMigrationLock(t *testing.T) {
	url := storetest.PostgresURL(t)
	other, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const migrationLock = 0x6b696c6e // store's migrationLockKey, "kiln"
	if _, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.LocalAgents, cfg.Database = t.TempDir(), "127.0.0.1:0", 0, url
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Out: &lockedLog{}, Logger: slog.New(slog.DiscardHandler)})
	}()
	waittest.UntilState(t, 30*time.Second, "the server to wait for the migration lock", func() (bool, string) {
		var waiting int
		err := other.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = $1
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, migrationLock).Scan(&waiting)
		return err == nil && waiting > 0, "no waiter yet"
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run stopped while waiting for the migration lock: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its stop")
	}
}
