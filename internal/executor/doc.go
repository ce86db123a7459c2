// Package executor runs one job's steps on the host it lives on: it makes a
// fresh workspace, checks the repository out, runs each step's script in its
// own shell under a small supervisor process, streams masked, batched,
// capped log lines and step status events to a Sink, honours step and job
// timeouts, retries and cancel, and returns the job's result and outputs.
//
// It exists apart from the agent so that the part of kiln that runs users'
// code can be tested on its own with real shells and real git repositories,
// and so that `kiln agent` (jobs received over the network) and `kiln run`
// (jobs from a local working tree) share it. It never imports the workflow,
// store, engine, fleet, server or api packages: callers map their own
// representation of a job onto Job.
//
// Process supervision is Linux-only: every step runs under a "shim" (this
// same binary re-executed with a hidden first argument, see MaybeRunShim)
// that is a child subreaper, so no process a step starts — background jobs,
// nohup, setsid, double forks — outlives the step, and every step dies with
// the agent. With Config.Isolation the shim also keeps the step away from
// the host: its own PID, mount and user namespaces, with the agent's state
// and any other hidden path covered (docs/security.md).
// docs/execution.md describes the behaviour users see.
package executor
