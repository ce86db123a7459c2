// Package runrules decides how a run moves forward once something happened
// to one of its jobs: which dependents a finished group releases, skips or
// cancels (needs and their `when` result sets), how many children of a
// max_parallel group may run, whom fail_fast stops, what a run rolls up to,
// and what becomes of a job whose agent rejected it, did not acknowledge it,
// was lost, came back, or went quiet.
//
// It exists so these rules can be read in one place and tested without a
// database. Every function here is pure: state in, a decision out — no SQL,
// no clock, no I/O. The store (internal/store) owns the other half: it loads
// the state a rule reads with the queries it already runs, calls the rule
// inside the transaction of the change that caused it, and applies the
// decision with its compare-and-set moves, so a decision and its effects
// commit together or not at all.
//
// The job and run statuses and their legal transitions are the root package's
// (kiln.CanTransition, kiln.RollUp); this package decides which legal move a
// situation calls for. It imports only the root package.
package runrules
