// Package kiln is the domain vocabulary every part of kiln shares: the
// statuses of runs, jobs and steps and their legal transitions, the results
// users see, labels and how agents match them, the normalized forge event,
// the kinds of sources and the outcomes of their deliveries, and the error
// type with its stable codes, their HTTP statuses and JSON body.
//
// It imports only the standard library and does no I/O, so that the pure
// packages (workflow, expr, trigger), the store, the orchestrator and the
// agent can all speak of the same things without importing each other.
package kiln
