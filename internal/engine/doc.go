// Package engine turns matched workflows into runs and keeps them moving: it
// builds each job's spec (internal/jobspec) from the workflow plan,
// evaluates the expressions the orchestrator owns (job `if:`, `runs_on`,
// `env`, matrix values) when a job's needs are met, applies what every store
// operation committed (wake agents for queued jobs, cancel jobs on agents,
// report run status), and runs the sweeps that end runs past their deadline
// and jobs nothing can run.
//
// Every decision goes through the store in one transaction: the store is
// opened with the engine's Release as its Releaser and calls it inside the
// transaction that made a job ready, so creating a run or finishing a job
// commits all of its consequences at once. Release is pure; all it keeps is
// a bounded cache of parsed expressions, which creating a run fills with
// what workflow.Parse produced, so releasing a job parses nothing again.
//
// The engine takes the fleet as its Dispatcher at construction, and the
// fleet needs no engine: it reports what its own store operations commit on
// its Effects channel, which Run applies as the engine applies its own. So
// every store Effects passes through Apply, and the composition root builds
// the fleet, then the engine.
//
// The engine keeps nothing a restart could lose. What its sweeps count
// from is in the database: when a run's graceful cancel was asked
// (runs.cancel_requested_at, written with the cancel; the cancel is forced
// a cancel grace later) and since when no known agent accepts a queue
// key (lost_queue_keys, written by the sweep that first finds it so; a job
// of the key fails unroutable a grace after that, or after it was queued,
// whichever is later). A restarted server, or another one, goes on from
// where the last one was. In memory are only the expression cache and the
// subscribers of Watch.
package engine
