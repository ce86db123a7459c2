package metrics

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
)

// EngineHooks are the engine's hooks (engine.Config.Hooks).
func (m *Metrics) EngineHooks() engine.Hooks {
	return engine.Hooks{Applied: m.Applied, Unroutable: m.UnroutableFailed}
}

// Applied counts what one store operation committed: jobs that finished by
// status, runs that finished by status. A finished run is handed to Run,
// which reads it once for its duration and steps; when Run falls more than
// a few thousand runs behind, those observations are skipped rather than
// slowing the engine.
func (m *Metrics) Applied(eff store.Effects) {
	for _, j := range eff.Finished {
		m.jobsFinished.WithLabelValues(string(j.Status)).Inc()
	}
	for _, rc := range eff.Runs {
		if !rc.Status.Terminal() {
			continue
		}
		m.executions.WithLabelValues(string(rc.Status)).Inc()
		select {
		case m.ended <- rc.ID:
		default:
			m.log.Debug("metrics: behind on finished runs; skipping a duration", "run", rc.Number)
		}
	}
}

// UnroutableFailed counts jobs the engine's unroutable probe failed.
func (m *Metrics) UnroutableFailed(jobs int) {
	m.unroutable.Add(float64(jobs))
}

// observeRun reads a finished run once: its duration, and its steps by the
// status they ended with.
func (m *Metrics) observeRun(ctx context.Context, id string) {
	// The run's row and its steps counted by status: reading every job
	// and step of a 256-job run was 3% of the server's CPU per job.
	run, err := m.deps.Runs.Header(ctx, id)
	var counts map[kiln.StepStatus]int
	if err == nil {
		counts, err = m.deps.Runs.StepCounts(ctx, id)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("metrics: a finished run could not be read; its duration is not observed", "run", id, "err", err)
		}
		return
	}
	if !run.CreatedAt.IsZero() && !run.FinishedAt.IsZero() && !run.FinishedAt.Before(run.CreatedAt) {
		m.executionDuration.Observe(run.FinishedAt.Sub(run.CreatedAt).Seconds())
	}
	for st, n := range counts {
		if st.Terminal() {
			m.steps.WithLabelValues(string(st)).Add(float64(n))
		}
	}
}

// deliveryOutcomes are the values of kiln_webhooks_processed_total's result.
var deliveryOutcomes = []kiln.DeliveryStatus{
	kiln.DeliveryProcessed, kiln.DeliveryDuplicate, kiln.DeliveryNoMatch, kiln.DeliveryInvalidWorkflow,
	kiln.DeliveryIgnored, kiln.DeliveryFailed, kiln.DeliveryPing,
}

// knownEvents are the event label values kept as they are; every other
// event a forge sends (issues, stars, …) is "other", so a sender cannot
// grow the series without bound.
var knownEvents = map[string]bool{
	"push": true, "pull_request": true, "create": true, "delete": true, "ping": true, "dispatch": true,
}

// eventOther is the event label of every event outside knownEvents.
const eventOther = "other"

func eventLabel(event string) string {
	if knownEvents[event] {
		return event
	}
	return eventOther
}

// DeliveryRecorded counts a delivery the ingress recorded (its Recorded
// hook). source is a configured source's name: the ingress records nothing
// for a name it does not know. A duplicate is finished at once.
func (m *Metrics) DeliveryRecorded(source, event string, duplicate bool) {
	m.webhooksReceived.WithLabelValues(source, eventLabel(event)).Inc()
	if duplicate {
		m.dedupHits.Inc()
		m.webhooksProcessed.WithLabelValues(string(kiln.DeliveryDuplicate)).Inc()
	}
}

// DeliveryFinished counts a delivery's outcome (the ingress Finished hook).
func (m *Metrics) DeliveryFinished(status kiln.DeliveryStatus) {
	for _, o := range deliveryOutcomes {
		if o == status {
			m.webhooksProcessed.WithLabelValues(string(status)).Inc()
			return
		}
	}
	m.webhooksProcessed.WithLabelValues(eventOther).Inc()
}

// WebhookRefused counts a webhook request refused before it was recorded
// (the ingress Refused hook), by kiln's error code.
func (m *Metrics) WebhookRefused(code kiln.Code) {
	m.webhooksRefused.WithLabelValues(string(code)).Inc()
}
