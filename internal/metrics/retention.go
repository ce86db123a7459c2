package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnci/kiln/internal/retention"
)

// retentionSeries are the garbage collector's series (docs/metrics.md).
type retentionSeries struct {
	deleted *prometheus.CounterVec
	passes  *prometheus.CounterVec
	took    prometheus.Histogram
}

func newRetentionSeries() retentionSeries {
	s := retentionSeries{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_retention_deleted_total",
			Help: "What the retention garbage collector deleted, by kind (runs, artifacts, caches, deliveries, dedup, uploads; local_logs: run log directories this server removed from its own data_dir/logs)."},
			[]string{"kind"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kiln_retention_passes_total",
			Help: "Passes of the retention garbage collector (on the leader only), by result (ok, error)."}, []string{"result"}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kiln_retention_pass_seconds",
			Help: "Duration of a retention pass.", Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60}}),
	}
	for _, k := range []string{retention.KindRuns, retention.KindArtifacts, retention.KindCaches, retention.KindDeliveries,
		retention.KindDedup, retention.KindUploads, retention.KindLocalLogs} {
		s.deleted.WithLabelValues(k)
	}
	s.passes.WithLabelValues("ok")
	s.passes.WithLabelValues("error")
	return s
}

// RetentionHooks feed the garbage collector's series.
func (m *Metrics) RetentionHooks() retention.Hooks {
	if m == nil {
		return retention.Hooks{}
	}
	s := m.ret
	return retention.Hooks{
		Deleted: func(kind string, n int) { s.deleted.WithLabelValues(kind).Add(float64(n)) },
		Pass: func(took time.Duration, err error) {
			result := "ok"
			if err != nil {
				result = "error"
			}
			s.passes.WithLabelValues(result).Inc()
			s.took.Observe(took.Seconds())
		},
	}
}
