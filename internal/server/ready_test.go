package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/store/storetest"
)

// "Ready" means agents are accepted: when Options.Ready is called, and
// when the "kiln server ready" line is logged, the fleet has finished its
// start-up recovery and takes agent connections — /ws does not answer 503
// (a plain GET is refused for not being a WebSocket upgrade instead) — and
// /ready answers 200. Before the fix both came before the fleet started
// accepting.
//
// B133.
func TestReadyMeansAgentsAreAccepted(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			cfg := backendConfig(t, b)
			var logged lockedLog
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var accepting bool
			wsCode, readyCode := 0, 0
			var logAtReady string
			err := Run(ctx, cfg, Options{Out: &lockedLog{}, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Ready: func(s *Server) {
				defer cancel()
				accepting = s.Fleet.Accepting()
				logAtReady = logged.String()
				wsCode = get(t, s.URL+"/ws")
				readyCode = get(t, s.URL+"/ready")
			}})
			if err != nil {
				t.Fatal(err)
			}
			if !accepting || wsCode == http.StatusServiceUnavailable || readyCode != http.StatusOK {
				t.Fatalf("at Ready: fleet accepting %v, /ws answered %d, /ready %d", accepting, wsCode, readyCode)
			}
			if !strings.Contains(logAtReady, "kiln server ready") {
				t.Fatalf("Ready was called before the ready line was logged:\n%s", logAtReady)
			}
		})
	}
}

// backendConfig is a server on b with a data directory of the test's, a
// free port and no local agents.
func backendConfig(t *testing.T, b storetest.Backend) Config {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.LocalAgents = t.TempDir(), "127.0.0.1:0", 0
	if b.Name != "sqlite" {
		cfg.Database = b.URL(t)
	}
	return cfg
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
