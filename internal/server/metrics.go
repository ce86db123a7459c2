package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/metrics"
)

// newMetrics declares the metrics on a registry of their own and installs
// the engine's hooks; the ingress hooks are given to ingress.New.
func newMetrics(cfg Config, eng *engine.Engine, fl *fleet.Fleet, statuses *forge.StatusReporter, log *slog.Logger) (*metrics.Metrics, error) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.Deps{
		Queue: eng.DB().Queue(), Runs: eng.DB().Runs(), Fleet: fl, Statuses: statuses,
	}, metrics.Config{
		RefreshInterval: cfg.Metrics.RefreshInterval, BackpressureThreshold: cfg.Metrics.BackpressureThreshold,
		Logger: log,
	})
	if err != nil {
		return nil, err
	}
	eng.SetHooks(m.EngineHooks())
	return m, nil
}

// metricsListener serves /metrics alone on metrics.listen, when set: the
// main listener often faces forges on the internet, the scraper does not.
type metricsListener struct {
	ln  net.Listener
	srv *http.Server
}

func listenMetrics(addr string, m *metrics.Metrics, log *slog.Logger) (*metricsListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return &metricsListener{ln: ln, srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}, nil
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
