package server

import (
	"context"
	"database/sql"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// The gate counts only the server's own local agents, each once, and
// opens after ready once all of them registered.
func TestStartGateWaitsForEveryLocalAgent(t *testing.T) {
	g := newStartGate(2)
	g.registered("local-1")
	g.registered("local-1")
	g.registered("somebody-else")
	if isClosed(g.all) {
		t.Fatal("the gate counted local-1 twice or another agent as a local one")
	}
	g.registered("local-2")
	if !isClosed(g.all) {
		t.Fatal("both local agents registered, and the gate still waits for one")
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { g.run(context.Background(), ready, time.Hour); close(done) }()
	close(ready)
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		t.Fatal("ready, every local agent registered, and the gate stayed shut")
	}
	<-done
}

// Local agents that never register hold the second wave back for
// startSettleMax at most; a stop opens the gate at once; a server without
// local agents opens it at ready.
func TestStartGateOpensWithoutTheLocalAgents(t *testing.T) {
	t.Run("bounded", func(t *testing.T) {
		g := newStartGate(1)
		ready := make(chan struct{})
		close(ready)
		go g.run(context.Background(), ready, 10*time.Millisecond)
		waitOpen(t, g)
	})
	t.Run("stopped", func(t *testing.T) {
		g := newStartGate(1)
		ctx, cancel := context.WithCancel(context.Background())
		go g.run(ctx, make(chan struct{}), time.Hour)
		cancel()
		waitOpen(t, g)
	})
	t.Run("none", func(t *testing.T) {
		g := newStartGate(0)
		ready := make(chan struct{})
		close(ready)
		go g.run(context.Background(), ready, time.Hour)
		waitOpen(t, g)
	})
}

func waitOpen(t *testing.T, g *startGate) {
	t.Helper()
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
		t.Fatal("the gate stayed shut")
	}
}

// On PostgreSQL the cluster's heartbeat and leader lease are second-wave
// work: with a local agent that never registers, no lease is taken in the
// server's first 700 ms after ready (the gate opens startSettleMax after
// it; the first wave would take it within ~100 ms), and it is taken after.
func TestBackgroundWorkWaitsForTheLocalAgents(t *testing.T) {
	url := storetest.PostgresURL(t)
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.LocalAgents, cfg.Database = t.TempDir(), "127.0.0.1:0", 1, url
	silent := filepath.Join(t.TempDir(), "silent-agent")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	leases := func() int {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM leases").Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{Out: &lockedLog{}, Logger: slog.New(slog.DiscardHandler), AgentBinary: silent,
			Ready: func(*Server) { ready <- time.Now() }})
	}()
	var readyAt time.Time
	select {
	case readyAt = <-ready:
	case err := <-done:
		t.Fatalf("the server stopped before it was ready: %v", err)
	}
	const window = 700 * time.Millisecond
	if startSettleMax-window < 200*time.Millisecond {
		t.Fatalf("startSettleMax %s leaves this test no margin", startSettleMax)
	}
	for time.Since(readyAt) < window {
		if n := leases(); n > 0 && time.Since(readyAt) < window {
			t.Fatalf("the cluster took its lease %s after ready, before the local agent registered or startSettleMax passed",
				time.Since(readyAt).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // polling the database, not waiting for the server
	}
	waittest.UntilState(t, 30*time.Second, "the leader lease to be taken", func() (bool, string) {
		return leases() > 0, "no lease yet"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
