package server

import (
	"github.com/kilnci/kiln/internal/artifacts"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/cluster"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/web"
)

// fleetConfig maps the agents section of the configuration onto the fleet.
func fleetConfig(cfg Config, cl *cluster.Cluster, clock func() time.Time, log *slog.Logger) fleet.Config {
	a := cfg.Agents
	return fleet.Config{
		AuthTimeout: a.AuthTimeout, RegisterTimeout: a.RegisterTimeout,
		HeartbeatInterval: a.HeartbeatInterval, JobHeartbeatInterval: a.JobHeartbeatInterval,
		UnhealthyAfter: a.UnhealthyAfter, DropAfter: a.DropAfter,
		RecoveryWindow: a.RecoveryWindow, LeaseMargin: a.LeaseMargin,
		SweepInterval: cfg.Queue.SweepInterval, RedriveInterval: cfg.Queue.RedriveInterval,
		MaxMessageBytes:    int64(a.MaxMessageBytes),
		MaxUnauthenticated: a.MaxUnauthenticated, MaxUnauthenticatedPerAddress: a.MaxUnauthPerAddress,
		MessagesPerSecond: float64(a.MessagesPerSecond), BytesPerSecond: float64(a.BytesPerSecond),
		Cluster: cl, Clock: clock, Logger: log.With("part", "fleet"),
	}
}

// advertiseURL is where agents reach this server: cluster.advertise_url,
// else public_url, else (public_url naming port 0) the address it listens
// on.
func advertiseURL(cfg Config, ln net.Listener) string {
	if cfg.Cluster.AdvertiseURL != "" {
		return cfg.Cluster.AdvertiseURL
	}
	if strings.HasSuffix(cfg.PublicURL, ":0") {
		return "http://" + ln.Addr().String()
	}
	return cfg.PublicURL
}

type apiDeps struct {
	db      *store.DB
	eng     *engine.Engine
	fleet   *fleet.Fleet
	proc    *ingress.Processor
	sources *ingress.Sources
	logs    *logstore.Store
	arts    *artifacts.Service
	log     *slog.Logger
	scalers *scaler.Manager
	// coordinator is this server's id in the cluster.
	coordinator string
	// writeTimeout is http.write_timeout, taken per write by log follows.
	writeTimeout time.Duration
	// publicURL (https makes the dashboard's cookie Secure) and sessionTTL
	// configure the dashboard.
	publicURL  string
	sessionTTL time.Duration
}

// mountAPI puts the REST API, /health and /ready on mux.
func mountAPI(mux *http.ServeMux, wrap func(http.Handler) http.Handler, d apiDeps) error {
	h, err := api.New(api.Deps{
		DB: d.db, Engine: d.eng, Ingress: d.proc, Logs: d.logs, Fleet: fleetView{d.fleet}, Scalers: scalersView(d.scalers),
		Artifacts: d.arts, Coordinator: d.coordinator, Accepting: d.fleet.Accepting,
	}, api.Config{Logger: d.log.With("part", "api"), LogWriteTimeout: d.writeTimeout})
	if err != nil {
		return err
	}
	for _, p := range []string{"/api/", "/health", "/ready"} {
		mux.Handle(p, wrap(h))
	}
	dash, err := web.New(web.Deps{DB: d.db, API: h}, web.Config{
		PublicURL: d.publicURL, SessionTTL: d.sessionTTL, Logger: d.log.With("part", "web"),
	})
	if err != nil {
		return err
	}
	mux.Handle("/", wrap(dash))
	return nil
}

// fleetView adapts the fleet to what the API shows of agents.
type fleetView struct{ f *fleet.Fleet }

func (v fleetView) Agents() []api.AgentView {
	as := v.f.Agents()
	out := make([]api.AgentView, len(as))
	for i, a := range as {
		out[i] = api.AgentView{
			ID: a.ID, Labels: a.Labels, Mandatory: a.Mandatory, MaxJobs: a.MaxJobs, ActiveJobs: a.ActiveJobs,
			Draining: a.Draining, Healthy: a.Healthy, ConnectedAt: a.ConnectedAt, LastHeartbeat: a.LastHeartbeat,
			Version: a.Version, Hostname: a.Hostname,
		}
	}
	return out
}

func (v fleetView) Drain(id string) error          { return v.f.Drain(id) }
func (v fleetView) DisconnectToken(tokenID string) { v.f.DisconnectToken(tokenID) }

// scalersView adapts the scaler manager to what the API shows (nil: none).
func scalersView(m *scaler.Manager) api.Scalers {
	if m == nil {
		return nil
	}
	return scalerView{m}
}

type scalerView struct{ m *scaler.Manager }

func (v scalerView) Statuses() []api.ScalerView {
	ss := v.m.Statuses()
	out := make([]api.ScalerView, len(ss))
	for i, s := range ss {
		out[i] = api.ScalerView{Name: s.Name, Type: s.Type, Labels: s.Labels, Mandatory: s.Mandatory, Active: s.Active,
			Spawning: s.Spawning, MaxAgents: s.MaxAgents, WarmReady: s.WarmReady, WarmTarget: s.WarmTarget,
			ConsecutiveFailures: s.ConsecutiveFailures, LastError: s.LastError, LastErrorAt: s.LastErrorAt,
			RetryAt: s.RetryAt, Retiring: s.Retiring}
	}
	return out
}
