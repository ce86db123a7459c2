package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// Config configures the metrics.
type Config struct {
	// RefreshInterval is how often the queue gauges are read (default 5s).
	RefreshInterval time.Duration
	// BackpressureThreshold is the number of pending (queued) jobs that,
	// BackpressureTicks refreshes in a row, logs a warning (default 100).
	BackpressureThreshold int
	// MaxQueueLabels bounds the labels kiln_dispatch_queue_depth_by_label
	// reports; jobs of labels first seen past it count under OverflowLabel
	// (default 500).
	MaxQueueLabels int
	Logger         *slog.Logger
}

// Defaults.
const (
	DefaultRefreshInterval       = 5 * time.Second
	DefaultBackpressureThreshold = 100
	DefaultMaxQueueLabels        = 500
	// BackpressureTicks is how many refreshes in a row the pending count
	// must reach the threshold before the warning (B66).
	BackpressureTicks = 2
)

// OverflowLabel is the label value under which jobs of queue labels past
// MaxQueueLabels are counted. It has a space, so no real label (labels are
// printable without spaces) can be mistaken for it.
const OverflowLabel = "(other labels)"

func (c Config) withDefaults() Config {
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultRefreshInterval
	}
	if c.BackpressureThreshold <= 0 {
		c.BackpressureThreshold = DefaultBackpressureThreshold
	}
	if c.MaxQueueLabels <= 0 {
		c.MaxQueueLabels = DefaultMaxQueueLabels
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Deps are what the metrics read. Queue and Runs are required; a nil Fleet
// or Statuses leaves their series out.
type Deps struct {
	Queue    QueueReader
	Runs     RunReader
	Fleet    FleetStats
	Statuses StatusStats
}

// QueueReader counts the dispatch queue (store.DB.Queue()).
type QueueReader interface {
	Depth(ctx context.Context) (store.Depth, error)
}

// RunReader reads a finished run for its duration and steps (store.DB.Runs()).
type RunReader interface {
	Header(ctx context.Context, id string) (store.Run, error)
	StepCounts(ctx context.Context, id string) (map[kiln.StepStatus]int, error)
}

// FleetStats is the fleet's counters (*fleet.Fleet).
type FleetStats interface {
	Stats() fleet.Stats
}

// StatusStats is the commit status reporter's counters.
type StatusStats interface {
	Stats() forge.ReporterStats
}

// Metrics holds every kiln metric. It is safe for concurrent use.
type Metrics struct {
	reg  *prometheus.Registry
	deps Deps
	cfg  Config
	log  *slog.Logger

	// Queue gauges, set by Refresh.
	queueDepth     *prometheus.GaugeVec
	queueByLabel   *prometheus.GaugeVec
	jobs           *prometheus.GaugeVec
	refreshFailure prometheus.Counter

	// Engine events.
	jobsFinished      *prometheus.CounterVec
	executions        *prometheus.CounterVec
	executionDuration prometheus.Histogram
	steps             *prometheus.CounterVec
	unroutable        prometheus.Counter

	// Ingress events.
	webhooksReceived  *prometheus.CounterVec
	webhooksProcessed *prometheus.CounterVec
	webhooksRefused   *prometheus.CounterVec
	dedupHits         prometheus.Counter

	// Scaler events (scaler.go).
	sc  scalerSeries
	ret retentionSeries

	mu        sync.Mutex
	everSeen  map[string]bool // queue labels ever reported (sticky zero)
	highTicks int             // refreshes in a row with pending ≥ threshold
	ended     chan string     // runs that finished, to read once
}

// Descriptions of the series read at scrape time (scrape.go).
var (
	descAgentsActive     = prometheus.NewDesc("kiln_agents_active", "Agents registered on this server (connected and past registration).", nil, nil)
	descAgentConnections = prometheus.NewDesc("kiln_agent_connections", "Open agent WebSocket connections on this server, registered or not.", nil, nil)
	descAgentConnects    = prometheus.NewDesc("kiln_agent_connects_total", "Agent WebSocket connections accepted.", nil, nil)
	descDispatches       = prometheus.NewDesc("kiln_dispatches_total", "job.dispatch frames sent to agents.", nil, nil)
	descDispatchLatency  = prometheus.NewDesc("kiln_dispatch_latency_seconds", "Time from a job entering the dispatch queue to its job.dispatch frame being written to an agent.", nil, nil)
	descClaimLatency     = prometheus.NewDesc("kiln_dispatch_claim_seconds", "Time an agent's claim of queued jobs took to commit, waiting for the group commit included.", nil, nil)
	descAckLatency       = prometheus.NewDesc("kiln_dispatch_ack_latency_seconds", "Time from a job.dispatch frame being written to the agent's job.ack.", nil, nil)
	descLogChunks        = prometheus.NewDesc("kiln_log_chunks_received_total", "Log frames received from agents (source=local: agents connected to this server).", []string{"source"}, nil)
	descLogLines         = prometheus.NewDesc("kiln_log_lines_stored_total", "Log lines stored; lines an agent replays after a reconnect are not counted twice.", []string{"source"}, nil)
	descStaleRefused     = prometheus.NewDesc("kiln_agent_stale_updates_refused_total", "Agent reports refused because they carried a stale lease (the job was reassigned or ended).", nil, nil)
	descRateLimitCloses  = prometheus.NewDesc("kiln_agent_rate_limit_closes_total", "Agent connections closed for exceeding the message or byte rate limit.", nil, nil)
	descUnauthRefused    = prometheus.NewDesc("kiln_agent_unauthenticated_refused_total", "Agent connections refused at the upgrade because too many had not authenticated, in all or from one address.", nil, nil)
	descFrames           = prometheus.NewDesc("kiln_agent_frames_total", "Frames received from agents, by frame type.", []string{"type"}, nil)
	descDisconnects      = prometheus.NewDesc("kiln_agent_disconnects_total", "Agent connections ended, by cause (closed_by_agent, heartbeat_timeout, ack_timeout, rate_limited, shutdown, …).", []string{"cause"}, nil)
	descStoreBatches     = prometheus.NewDesc("kiln_store_batches_total", "Transactions the fleet's group committer ran.", nil, nil)
	descStoreBatchedOps  = prometheus.NewDesc("kiln_store_batched_ops_total", "Store operations committed in the group committer's transactions (ops/batches = batching factor).", nil, nil)
	descStatusUpdates    = prometheus.NewDesc("kiln_commit_status_updates_total", "Commit status updates for forges, by result: posted (the forge accepted it), failed (given up after errors), dropped (evicted from a full queue).", []string{"result"}, nil)
	descStatusQueued     = prometheus.NewDesc("kiln_commit_status_updates_queued", "Commit status updates waiting to be posted or in flight.", nil, nil)
)

// executionBuckets are the run duration buckets docs/metrics.md lists, from
// a second to an hour.
var executionBuckets = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// New declares every metric and registers it, with the Go and process
// collectors, on reg.
func New(reg *prometheus.Registry, deps Deps, cfg Config) (*Metrics, error) {
	if reg == nil || deps.Queue == nil || deps.Runs == nil {
		return nil, fmt.Errorf("metrics: a registry, a queue and a run reader are required")
	}
	cfg = cfg.withDefaults()
	m := &Metrics{
		reg: reg, deps: deps, cfg: cfg, log: cfg.Logger,
		everSeen: map[string]bool{}, ended: make(chan string, 4096),

		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kiln_dispatch_queue_depth",
			Help: "Jobs in the dispatch queue: status=pending are queued jobs waiting for an agent; status=dispatched are jobs an agent holds (dispatched, running, recovering, cancelling). Both series are always present."},
			[]string{"status"}),
		queueByLabel: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kiln_dispatch_queue_depth_by_label",
			Help: "Queued jobs by runs_on label (a job counts once per label). A label once seen reports 0 when its queue drains (sticky zero)."},
			[]string{"status", "label"}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kiln_jobs",
			Help: "Unfinished jobs by status (pending: waiting for needs; queued; dispatched; running; recovering; cancelling)."},
			[]string{"status"}),
		refreshFailure: prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_dispatch_queue_depth_refresh_failures_total",
			Help: "Refreshes of the queue gauges that failed to read the database (the gauges keep their last values)."}),

		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_jobs_finished_total",
			Help: "Jobs that reached a terminal status, by status."}, []string{"status"}),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_executions_total",
			Help: "Workflow runs that finished, by run status (success, failed, cancelled)."}, []string{"status"}),
		executionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kiln_execution_duration_seconds",
			Help: "Duration of finished workflow runs, from creation (queueing included) to the end.", Buckets: executionBuckets}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_steps_total",
			Help: "Steps of finished runs by the status they ended with; steps that never ended (their job never ran) are not counted."},
			[]string{"status"}),
		unroutable: prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_unroutable_fast_failed_total",
			Help: "Queued jobs the unroutable probe failed because no connected or recently seen agent could take them (before their queue timeout)."}),

		webhooksReceived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_webhooks_received_total",
			Help: "Deliveries recorded (verified forge webhooks, kiln trigger pushes, manual dispatches), by source name and event; events kiln does not know are event=other."},
			[]string{"source", "event"}),
		webhooksProcessed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_webhooks_processed_total",
			Help: "Deliveries finished, by outcome: processed (runs created), duplicate, no_match, invalid_workflow, ignored, failed, ping."},
			[]string{"result"}),
		webhooksRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_webhooks_refused_total",
			Help: "Webhook requests refused and not recorded, by error code (not_found: no such source; unauthorized: bad signature; too_large; invalid; unavailable)."},
			[]string{"code"}),
		dedupHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_dedup_hits_total",
			Help: "Webhook redeliveries dropped because their delivery id was already received."}),
	}
	m.sc = newScalerSeries()
	m.ret = newRetentionSeries()
	m.preset()
	cs := []prometheus.Collector{
		m.queueDepth, m.queueByLabel, m.jobs, m.refreshFailure,
		m.jobsFinished, m.executions, m.executionDuration, m.steps, m.unroutable,
		m.webhooksReceived, m.webhooksProcessed, m.webhooksRefused, m.dedupHits,
		m.sc.spawnFailures, m.sc.refusals, m.sc.redispatch, m.sc.scaleUp, m.sc.scaleDown, m.sc.registered, m.sc.cpusUsed, m.sc.memoryUsed,
		m.ret.deleted, m.ret.passes, m.ret.took,
		scrapeCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// preset creates the series whose label values are known, at 0, so they
// exist before the first event (rate() needs the 0, and the queue gauges
// must always have both statuses).
func (m *Metrics) preset() {
	m.queueDepth.WithLabelValues(statusPending).Set(0)
	m.queueDepth.WithLabelValues(statusDispatched).Set(0)
	for _, s := range kiln.JobStatuses {
		if s.Terminal() {
			m.jobsFinished.WithLabelValues(string(s))
		} else {
			m.jobs.WithLabelValues(string(s)).Set(0)
		}
	}
	for _, s := range kiln.RunStatuses {
		if s.Terminal() {
			m.executions.WithLabelValues(string(s))
		}
	}
	for _, s := range kiln.StepStatuses {
		if s.Terminal() {
			m.steps.WithLabelValues(string(s))
		}
	}
	for _, r := range deliveryOutcomes {
		m.webhooksProcessed.WithLabelValues(string(r))
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}
