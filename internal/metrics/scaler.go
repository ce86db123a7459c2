package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/scaler"
)

// scalerSeries are the scaler's series (docs/metrics.md), fed by its hooks.
type scalerSeries struct {
	spawnFailures *prometheus.CounterVec
	refusals      prometheus.Counter
	redispatch    *prometheus.CounterVec
	scaleUp       *prometheus.CounterVec
	scaleDown     *prometheus.CounterVec
	registered    *prometheus.HistogramVec
	cpusUsed      *prometheus.GaugeVec
	memoryUsed    *prometheus.GaugeVec
}

// Bound values of kiln_scaler_spawn_failures_total (B176): a spawn for a
// job, or one for the warm pool.
const (
	SpawnBound   = "true"
	SpawnUnbound = "false"
)

// spawnBuckets are the spawn → registered buckets, 10 ms to 10 min.
var spawnBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

func newScalerSeries() scalerSeries {
	return scalerSeries{
		spawnFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_scaler_spawn_failures_total",
			Help: "Agent spawns that failed (scaler.failed), by backend type (process, docker, …, unknown) and bound (true: started for a job; false: warm pool)."},
			[]string{"backend", "bound"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "kiln_scaler_spawn_refusals_total",
			Help: "Spawns not started because a count or resource cap was reached."}),
		redispatch: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_scaler_redispatch_total",
			Help: "Agents started for jobs already waiting, by trigger (sweep: the manager's pass)."}, []string{"trigger"}),
		scaleUp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_scaler_scale_up_emitted_total",
			Help: "Agents a scaler started, by scaler."}, []string{"scaler"}),
		scaleDown: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_scaler_scale_down_emitted_total",
			Help: "Agents a scaler removed, by scaler and reason (job-complete, spawn-failed, heartbeat-timeout, shutdown, …)."},
			[]string{"scaler", "reason"}),
		registered: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kiln_scaler_spawn_to_registered_seconds",
			Help: "Time from a spawn's start to its agent's registration, by backend type.", Buckets: spawnBuckets},
			[]string{"backend"}),
		cpusUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kiln_scaler_cpus_used",
			Help: "CPUs reserved by the agents this server started, by scaler (__global__: all scalers) and scaler type."},
			[]string{"scaler", "scaler_type"}),
		memoryUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kiln_scaler_memory_bytes_used",
			Help: "Memory reserved by the agents this server started, in bytes, by scaler (__global__: all scalers) and scaler type."},
			[]string{"scaler", "scaler_type"}),
	}
}

// ScalerHooks feed the scaler's series.
func (m *Metrics) ScalerHooks() scaler.Hooks {
	if m == nil {
		return scaler.Hooks{}
	}
	s := m.sc
	return scaler.Hooks{
		SpawnFailed: func(backend string, bound bool) {
			b := SpawnUnbound
			if bound {
				b = SpawnBound
			}
			s.spawnFailures.WithLabelValues(backend, b).Inc()
		},
		Refused: func() { s.refusals.Inc() },
		Registered: func(backend string, took time.Duration) {
			s.registered.WithLabelValues(backend).Observe(took.Seconds())
		},
		ScaleUp:    func(name string) { s.scaleUp.WithLabelValues(name).Inc() },
		ScaleDown:  func(name, reason string) { s.scaleDown.WithLabelValues(name, reason).Inc() },
		Redispatch: func(trigger string, n int) { s.redispatch.WithLabelValues(trigger).Add(float64(n)) },
		Reserved: func(name, typ string, r kiln.Resources) {
			s.cpusUsed.WithLabelValues(name, typ).Set(float64(r.MilliCPUs) / 1000)
			s.memoryUsed.WithLabelValues(name, typ).Set(float64(r.Memory))
		},
	}
}
