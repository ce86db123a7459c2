// Package agent is the agent process: it dials the orchestrator's WebSocket,
// authenticates and registers, takes the jobs the orchestrator pushes, runs
// them through a Runner (the executor) and reports what they do. It exists as
// its own package so that an agent binary carries no orchestrator code: it
// imports only proto, the executor and the root vocabulary.
//
// The agent never loses what a job reports. Job statuses, step statuses and
// log lines are durable frames: each gets a sequence number and waits in the
// outbox until the orchestrator acknowledges it, and after a reconnect the
// outbox replays, in order, everything not yet acknowledged. The outbox is
// bounded; when full it drops the oldest log frames (never a status) and the
// next frame of the affected step carries a gap-marker line that says how
// many lines were lost and why.
//
// Lifecycle: Run connects, and reconnects with exponential backoff and jitter
// until the orchestrator refuses the agent for good (a bad token, a protocol
// version it does not speak, a newer connection of the same agent). Closing
// Config.Drain (or an agent.drain frame) drains: running jobs finish, new ones
// are refused, and Run returns once everything is acknowledged. Cancelling
// Run's context is the hard stop: running jobs are force-cancelled, what can
// still be sent is sent, and Run returns.
package agent
