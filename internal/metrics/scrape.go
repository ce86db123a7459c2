package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/proto"
)

// scrapeCollector reports, at scrape time, what the fleet and the commit
// status reporter already count: one Stats snapshot each per scrape, no
// copies kept here.
type scrapeCollector struct{ m *Metrics }

func (c scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descAgentsActive, descAgentConnections, descAgentConnects, descDispatches, descDispatchLatency,
		descAckLatency, descClaimLatency, descLogChunks, descLogLines, descStaleRefused, descRateLimitCloses, descUnauthRefused, descFrames,
		descDisconnects, descStoreBatches, descStoreBatchedOps, descStatusUpdates, descStatusQueued,
	} {
		ch <- d
	}
}

// agentFrameTypes are the frames agents send; each has a series, 0 until
// the first one arrives.
var agentFrameTypes = []string{proto.TypeAuth, proto.TypeRegister, proto.TypeHeartbeat, proto.TypeAgentStatus,
	proto.TypeJobAck, proto.TypeJobReject, proto.TypeJobStatus, proto.TypeStepStatus, proto.TypeLog, proto.TypeJobHeartbeat}

// logSource is the source label of the log counters: logs this server's
// agents sent (a cluster would add peer, for logs relayed by other servers).
const logSource = "local"

func (c scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	if f := c.m.deps.Fleet; f != nil {
		collectFleet(ch, f.Stats())
	}
	if r := c.m.deps.Statuses; r != nil {
		s := r.Stats()
		ch <- constMetric(descStatusUpdates, prometheus.CounterValue, float64(s.Posted), "posted")
		ch <- constMetric(descStatusUpdates, prometheus.CounterValue, float64(s.Failed), "failed")
		ch <- constMetric(descStatusUpdates, prometheus.CounterValue, float64(s.Dropped), "dropped")
		ch <- constMetric(descStatusQueued, prometheus.GaugeValue, float64(s.Queued))
	}
}

func collectFleet(ch chan<- prometheus.Metric, s fleet.Stats) {
	ch <- constMetric(descAgentsActive, prometheus.GaugeValue, float64(s.Agents))
	ch <- constMetric(descAgentConnections, prometheus.GaugeValue, float64(s.Connections))
	ch <- constMetric(descAgentConnects, prometheus.CounterValue, float64(s.Connects))
	ch <- constMetric(descDispatches, prometheus.CounterValue, float64(s.Dispatched))
	ch <- constHistogram(descDispatchLatency, s.DispatchLatency)
	ch <- constHistogram(descAckLatency, s.AckLatency)
	ch <- constHistogram(descClaimLatency, s.ClaimLatency)
	ch <- constMetric(descLogChunks, prometheus.CounterValue, float64(s.Frames[proto.TypeLog]), logSource)
	ch <- constMetric(descLogLines, prometheus.CounterValue, float64(s.LogLines), logSource)
	ch <- constMetric(descStaleRefused, prometheus.CounterValue, float64(s.StaleRefused))
	ch <- constMetric(descRateLimitCloses, prometheus.CounterValue, float64(s.RateLimitCloses))
	ch <- constMetric(descUnauthRefused, prometheus.CounterValue, float64(s.UnauthenticatedRefused))
	for _, t := range agentFrameTypes {
		ch <- constMetric(descFrames, prometheus.CounterValue, float64(s.Frames[t]), t)
	}
	for cause, n := range s.Disconnects {
		ch <- constMetric(descDisconnects, prometheus.CounterValue, float64(n), cause)
	}
	ch <- constMetric(descStoreBatches, prometheus.CounterValue, float64(s.Batches))
	ch <- constMetric(descStoreBatchedOps, prometheus.CounterValue, float64(s.BatchedOps))
}

// constMetric builds a scrape-time sample; an error (a label count that
// does not match, a bug) is reported to the scraper instead of panicking.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// constHistogram turns a fleet latency histogram (a count per bucket, the
// last bucket the overflow) into Prometheus's cumulative buckets, with
// fleet.LatencyBuckets as the upper bounds.
func constHistogram(d *prometheus.Desc, l fleet.Latency) prometheus.Metric {
	buckets := make(map[float64]uint64, len(fleet.LatencyBuckets))
	var cum uint64
	for i, ub := range fleet.LatencyBuckets {
		if i < len(l.Buckets) {
			cum += l.Buckets[i]
		}
		buckets[ub.Seconds()] = cum
	}
	m, err := prometheus.NewConstHistogram(d, l.Count, l.Sum.Seconds(), buckets)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
