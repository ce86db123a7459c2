// Package engine turns matched workflows into runs and keeps them moving: it
// builds each job's spec from the workflow plan, evaluates the expressions
// the orchestrator owns (job `if:`, `runs_on`, `env`, matrix values) when a
// job's needs are met, applies what every store operation committed (wake
// agents for queued jobs, cancel jobs on agents, report run status), and runs
// the sweeps that end runs past their deadline and jobs nothing can run.
//
// Every decision goes through the store in one transaction: the engine hands
// the store a Releaser, which the store calls inside the transaction that
// made a job ready, so creating a run or finishing a job commits all of its
// consequences at once. The engine itself keeps no state a restart could lose.
package engine
