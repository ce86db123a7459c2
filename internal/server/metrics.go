package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/metrics"
	"github.com/kilnci/kiln/internal/store"
)

// newMetrics declares the metrics on a registry of their own. They read the
// queue, finished runs, the fleet's and the status poster's counters; their
// hooks go to engine.New and ingress.New.
func newMetrics(cfg Config, db *store.DB, fl *fleet.Fleet, statuses *forge.StatusReporter, log *slog.Logger) (*metrics.Metrics, error) {
	return metrics.New(prometheus.NewRegistry(), metrics.Deps{
		Queue: db.Queue(), Runs: db.Runs(), Fleet: fl, Statuses: statuses,
	}, metrics.Config{
		RefreshInterval: cfg.Metrics.RefreshInterval, BackpressureThreshold: cfg.Metrics.BackpressureThreshold,
		Logger: log,
	})
}

// metricsOnMain is /metrics on the main listener (metrics.listen empty).
// That listener often faces the internet for webhooks, and the metrics name
// sources, repositories and workflows: it needs an admin or read-only token.
func metricsOnMain(db *store.DB, m *metrics.Metrics, log *slog.Logger) http.Handler {
	return api.RequireToken(db, log.With("part", "metrics"), m.Handler())
}

// metricsListener serves /metrics alone on metrics.listen, when set: the
// main listener often faces forges on the internet, the scraper does not.
// There it needs no token; bind it to a private address.
type metricsListener struct {
	ln  net.Listener
	srv *http.Server
}

func listenMetrics(ln net.Listener, hc HTTPConfig, m *metrics.Metrics, log *slog.Logger) *metricsListener {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", perWriteDeadlines(m.Handler(), hc.WriteTimeout))
	return &metricsListener{ln: ln, srv: newHTTPServer(hc, mux, log)}
}

// Run serves until ctx ends.
func (l *metricsListener) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		done <- l.srv.Shutdown(sctx)
	}()
	if err := l.srv.Serve(l.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return <-done
}
