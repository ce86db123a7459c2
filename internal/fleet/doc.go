// Package fleet is the orchestrator's side of the agent protocol: the /ws
// endpoint agents connect to, the registry of connected agents, push
// dispatch, and the monitors that notice lost agents, late acknowledgements
// and stale jobs. It exists so that the promises kiln makes about agents —
// nothing lost, nothing run twice, every waiting job says why it waits —
// are kept in one place, on top of the store's lease-guarded operations.
//
// How it is put together:
//
//   - One goroutine per connection (conn.go) reads frames and handles them
//     in order; writes from any goroutine go straight to the WebSocket with
//     a timeout. An idle agent costs that goroutine and a few hundred bytes
//     of state besides the socket.
//   - Every write the fleet makes to the store about jobs — claims, reports,
//     losses, buffered heartbeats and acks, and the monitor's sweeps — goes
//     through the committer (committer.go), one goroutine that commits the
//     operations of many connections in one transaction (group commit) and
//     reports the effects in commit order on Effects, which the engine reads
//     and applies (waking this fleet for the jobs they queued, among others):
//     the fleet needs no engine, the engine takes the fleet as its
//     Dispatcher. The fleet's operations about one agent are therefore
//     ordered: a claim for an agent and the loss of that agent never race.
//     (The engine and the ingress write jobs in their own transactions;
//     every write is a compare-and-set, so none undoes another.)
//   - The dispatcher (dispatch.go), one goroutine, turns wake-ups (jobs
//     entered the queue, an agent freed a slot) into claims for idle agents,
//     sends the job.dispatch frames, and keeps each waiting job's pending
//     reason current. A frame embeds the job's stored spec as it is
//     (internal/jobspec, proto.EncodeDispatch) with the checkout the
//     CloneCredentials given to New make for it, asked per job.
//   - The monitor (monitor.go), one goroutine, runs the heartbeat monitor,
//     has the committer write the buffered job heartbeats and acks and run
//     the store's sweeps (ack deadlines, recovery windows, stale jobs), and
//     offers the queue to idle agents again now and then.
//   - Every way a connection ends goes through one function, disconnect
//     (disconnect.go), which hands the agent's jobs to the store's recovery
//     first, then releases everything waiting on the agent, unregisters it,
//     and only then closes the socket.
//
// docs/protocol.md describes the protocol; internal/proto holds its messages.
package fleet
