// Package metrics exposes kiln's Prometheus metrics at /metrics (B62): the
// names operators of the orchestrator kiln re-implements know, under the
// kiln_ prefix, and kiln's own for what that one does not have (jobs by
// status, the agent protocol, the store's group commit). docs/metrics.md
// lists every series.
//
// Every metric is declared in metrics.go and registered on a registry the
// caller gives (no process-global state), so tests and several servers in
// one process never share counters. Three kinds of source feed them:
//
//   - Events, never database polls, for counters: the engine's Hooks (jobs
//     finished, runs finished, unroutable jobs failed) and the ingress
//     processor's hooks (deliveries recorded, finished, refused).
//   - One query every refresh interval for the queue gauges
//     (store.Queue.Depth), with the sticky-zero rule for the per-label
//     gauge (B63, B64) and the backpressure warning (B66).
//   - Snapshots read at scrape time for what the fleet and the commit
//     status reporter already count (fleet.Stats, forge.ReporterStats).
//
// Label values are bounded: statuses, outcomes, frame types and disconnect
// causes come from fixed sets; webhook events outside the known ones are
// "other"; source names are the configured sources; queue labels are capped
// (Config.MaxQueueLabels). No run, job or delivery id is ever a label.
package metrics
