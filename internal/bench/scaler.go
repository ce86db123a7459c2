package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

// scalerConfig is the bench server's scalers: a process scaler for the
// label the scaler workflow asks for.
const scalerConfig = `scalers:
  - name: bench
    type: process
    labels: [bench-scaled]
    max_agents: 4
    spawn_timeout: 1m
`

// scalerWorkflows: a push runs one job no agent but the scaler's takes.
var scalerWorkflows = map[string]string{
	".kiln/workflows/push.yml": `name: push
on: push
jobs:
  noop:
    runs_on: [bench-scaled]
    steps:
      - run: "true"
`,
}

// scaler measures, cfg.Spawns times with a server without local agents and
// a process scaler: a push webhook → its job running on an agent the
// scaler started for it (a real kiln agent process), and the spawn's start
// → the agent registered and sent its job (the run's timeline and the
// job's dispatch time, both stamped by the server). Each spawn waits for
// the previous agent to be gone, so every agent is fresh. Then the same
// with a docker and a microvm scaler, where this machine can run them.
func (b *bench) scaler(ctx context.Context) error {
	toSent, toRunning, err := b.timeSpawns(ctx, "process", scalerConfig, scalerWorkflows, b.cfg.Spawns)
	if err != nil {
		return err
	}
	b.add(ScenarioScaler, "process: spawn → agent registered and sent its job, p50", ms(percentile(toSent, 0.5)), "ms", atMost(100))
	b.add(ScenarioScaler, "process: spawn → agent registered and sent its job, p99", ms(percentile(toSent, 0.99)), "ms", nil)
	b.add(ScenarioScaler, "webhook → job running on a freshly spawned process agent, p50", ms(percentile(toRunning, 0.5)), "ms", nil)
	b.add(ScenarioScaler, "webhook → job running on a freshly spawned process agent, p99", ms(percentile(toRunning, 0.99)), "ms", nil)
	if err := b.scalerDocker(ctx); err != nil {
		return err
	}
	return b.scalerMicroVM(ctx)
}

// timeSpawns starts a server with the scaler config and the workflows
// (one job on the scaler's label), sends n pushes one at a time and times
// each: the spawn's start → its agent registered and sent the job, and
// webhook sent → the job running.
func (b *bench) timeSpawns(ctx context.Context, kind, config string, workflows map[string]string, n int) (toSent, toRunning []time.Duration, err error) {
	s, err := b.startServer(ctx, serverOptions{config: config})
	if err != nil {
		return nil, nil, err
	}
	defer s.stop()
	gh, err := newBenchGitHub(workflows)
	if err != nil {
		return nil, nil, err
	}
	defer gh.Close()
	if _, err := setUpSource(ctx, s, gh.URL); err != nil {
		return nil, nil, err
	}
	for i := range n {
		t0 := time.Now()
		if err := deliver(ctx, webhookClient, s, fmt.Sprintf("bench-%s-%d-%s", kind, i, randomHex(4)), pushPayload(commitSHA(i))); err != nil {
			return nil, nil, err
		}
		job, err := waitScaledJob(ctx, s, i+1)
		if err != nil {
			return nil, nil, err
		}
		toRunning = append(toRunning, time.Since(t0))
		tl, err := s.client.Timeline(ctx, job.runID)
		if err != nil {
			return nil, nil, err
		}
		spawned, ok := spawnStart(tl)
		if !ok || job.dispatched == nil {
			return nil, nil, fmt.Errorf("run %d: no scaler event on its timeline, or no dispatch time", i+1)
		}
		toSent = append(toSent, job.dispatched.Sub(spawned))
		if err := waitNoScaledAgent(ctx, s); err != nil {
			return nil, nil, err
		}
		b.progress("   %s spawn %d: webhook → job running %.0f ms, spawn → registered and sent its job %.0f ms", kind, i+1, ms(toRunning[i]), ms(toSent[i]))
	}
	return toSent, toRunning, nil
}

// spawnStart is when the spawn of a run's agent started: its first scaler
// event (the timeline starts with the delivery, the trigger decision and
// the job's release).
func spawnStart(tl api.Timeline) (time.Time, bool) {
	for _, ev := range tl.Events {
		if strings.HasPrefix(ev.Type, "scaler.") {
			return ev.At, true
		}
	}
	return time.Time{}, false
}

type scaledJob struct {
	runID      string
	dispatched *time.Time
}

// waitScaledJob polls run n every 2 ms until its job runs (or ran) on a
// spawned agent.
func waitScaledJob(ctx context.Context, s *serverProc, n int) (scaledJob, error) {
	ref := fmt.Sprint(n)
	for {
		r, err := s.client.GetRun(ctx, ref)
		if err == nil && len(r.Jobs) == 1 {
			j := r.Jobs[0]
			if j.StartedAt != nil || j.Status.Terminal() {
				if !strings.HasPrefix(j.AgentID, "scaler-") {
					return scaledJob{}, fmt.Errorf("run %d ran on %q, not on a spawned agent (%s: %s)", n, j.AgentID, j.Status, j.Error)
				}
				return scaledJob{runID: r.ID, dispatched: j.DispatchedAt}, nil
			}
		} else if err != nil && kiln.ErrorCode(err) != kiln.CodeNotFound {
			return scaledJob{}, err
		}
		select {
		case <-ctx.Done():
			return scaledJob{}, fmt.Errorf("run %d: its job did not start: %w\n%s", n, ctx.Err(), s.logTail())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitNoScaledAgent waits until no spawned agent is connected.
func waitNoScaledAgent(ctx context.Context, s *serverProc) error {
	for {
		scs, err := s.client.Scalers(ctx)
		if err != nil {
			return err
		}
		if len(scs) == 1 && scs[0].ActiveAgents == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the spawned agent was not removed: %w\n%s", ctx.Err(), s.logTail())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
