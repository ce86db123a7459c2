// Package store is kiln's durable core and the only package that speaks SQL.
//
// Everything kiln promises — nothing lost, nothing run twice, every waiting
// job explains itself — rests on the rows kept here: runs and their jobs,
// steps and needs edges, the dispatch queue (which is the jobs table itself),
// webhook deliveries, agents and tokens, log chunk indexes, and the leader
// lease and cron state of a cluster. It runs on SQLite (the embedded default:
// one writer connection, WAL, synchronous=NORMAL) and on PostgreSQL (several
// coordinators sharing one database, claims with FOR UPDATE SKIP LOCKED).
//
// Every state change is a compare-and-set inside one transaction per logical
// operation: `UPDATE … WHERE id IN (…) AND status IN (…) [AND lease_epoch = ?]`
// with the rows it really moved read back. The legal moves are exactly those
// of kiln.CanTransition (moves.go lists every one the store makes). When a job
// ends, the same transaction evaluates its dependents (needs result sets, skip
// cascades, max_parallel waves, fail_fast) and rolls the run up, so a crash
// never leaves a run half-decided. What each of those — and each requeue,
// recovery, stale or expiry — decides is internal/runrules': the store loads
// the state a rule reads, calls it, and applies the decision. Jobs whose
// needs are met are handed to the Releaser given in Config (the engine's)
// inside the transaction; it decides queue, skip or fail without doing I/O.
// A run's root jobs are released before their rows are written, so they are
// written once, already queued. Job specs are opaque text here: the engine
// writes them (internal/jobspec) and the fleet reads them.
//
// Times come from an injected clock and are stored as unix milliseconds;
// JSON payloads are TEXT; labels are canonical keys (kiln.Requirement.Key).
// docs/store.md describes the tables and indexes; docs/states.md draws the
// state machines.
package store
