// Package bench is `kiln bench`: it measures a real kiln against the
// performance targets of PRODUCT.md, the way an operator would see them.
//
// Each scenario starts the kiln binary as a `kiln server` child process on
// loopback (SQLite in a temporary data directory, or a scratch database
// on the PostgreSQL server the operator names), so memory and CPU belong
// to the server alone. Work arrives as it does in production: signed
// GitHub webhooks and API dispatches, with workflow files served by a small
// GitHub API of the bench's own in this process (github.go: production
// code, since it is linked into the kiln binary). Agents are scripted
// clients in this process that speak the real protocol (auth, register,
// job.ack, job.status, log frames, acknowledgements) and run every job as
// a no-op, so the numbers are the orchestrator's, not a shell's.
//
// Everything is bounded: agent counts, job counts and lines have upper
// limits, and every scenario has a deadline.
package bench
