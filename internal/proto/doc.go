// Package proto is the protocol between the orchestrator and its agents:
// versioned JSON messages over one WebSocket per agent. It is the only
// package both ends import, so it holds the message types, their validation
// and the framing, and nothing else: no orchestrator logic, no agent logic.
//
// Every frame is one JSON object {"type": T, "seq": N, "data": {...}}. Frames
// an agent must not lose (job status, step status, log lines) carry a seq,
// increasing per agent process; the orchestrator answers with an "ack" frame
// once everything up to that seq is durably stored, and the agent keeps the
// frames until then and replays them in order after a reconnect. Receivers
// drop duplicates (log lines by their per-step sequence number; statuses are
// idempotent), so replay never stores a line twice. docs/protocol.md is the
// prose version of this package.
package proto
