package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

const scaledWorkflow = `on: push
jobs:
  one:
    runs_on: [scaled]
    steps:
      - run: test -f README && echo "on $KILN_AGENT_ID"
  two:
    runs_on: [scaled]
    steps:
      - run: echo two
`

// A server without local agents and with a process scaler runs a push's
// jobs on agents it starts for them, each agent one job (its own), each
// removed once its job ended: no agent and no spawn is left.
// Proves B170, B180 (docs/behaviours.md).
func TestProcessScalerRunsEachJobOnAFreshAgent(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Scalers = []scaler.Config{{Name: "builders", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 4,
			SpawnTimeout: time.Minute}}
	})
	localRun(t, s, map[string]string{"ci": scaledWorkflow})
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 2*time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(run))
	}
	one, two := mustJob(t, run, "one"), mustJob(t, run, "two")
	for _, j := range []string{one.AgentID, two.AgentID} {
		if !strings.HasPrefix(j, "scaler-process-") {
			t.Fatalf("a job ran on %q, not on a spawned agent", j)
		}
	}
	if one.AgentID == two.AgentID {
		t.Fatalf("both jobs ran on %s: a spawned agent takes one job", one.AgentID)
	}
	waittest.UntilState(t, time.Minute, "the spawned agents to be removed", func() (bool, string) {
		spawns, err := s.DB.Scalers().List(bg, "")
		if err != nil {
			return false, err.Error()
		}
		recs, err := s.DB.Auth().ListAgents(bg)
		if err != nil {
			return false, err.Error()
		}
		agents := 0
		for _, a := range recs {
			if strings.HasPrefix(a.ID, "scaler-") {
				agents++
			}
		}
		return len(spawns) == 0 && agents == 0, fmt.Sprintf("%d spawns, %d spawned agents listed", len(spawns), agents)
	})
	tl, err := s.DB.Runs().Timeline(bg, run.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, ev := range tl {
		types[ev.Type] = true
	}
	for _, want := range []string{scaler.EventProvisioning, scaler.EventReady, scaler.EventConnecting} {
		if !types[want] {
			t.Errorf("the run's timeline has no %s: %+v", want, tl)
		}
	}
}

// A scaler whose agent dies before it registers: the failure, with the
// last lines the agent printed, is the waiting job's provisioning error and
// pending reason and on the run's timeline; the job stays queued (the
// scaler backs off) until the queue expiry ends it with that error, never a
// generic timeout, and the run fails for it.
// Proves B169, B172, B173, B177 (docs/behaviours.md).
func TestBrokenScalerFailureShowsOnTheJobAndEndsItAtExpiry(t *testing.T) {
	t.Parallel()
	broken := filepath.Join(t.TempDir(), "kiln-broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho starting\necho 'boom: no such runtime' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, func(c *server.Config) {
		c.Queue.Expiry = 6 * time.Second
		c.Queue.UnroutableGrace = time.Second
		c.Scalers = []scaler.Config{{Name: "broken", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 2,
			Binary: broken, SpawnTimeout: time.Minute}}
	})
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  one:
    runs_on: [scaled]
    steps:
      - run: echo never
  gpu:
    runs_on: [gpu]
    steps:
      - run: echo never
`})
	run := triggerOne(t, s.Client, "app")
	var job api.Job
	waittest.UntilState(t, time.Minute, "the spawn failure on the queued job", func() (bool, string) {
		r := getRun(t, s.Client, run.ID)
		job = mustJob(t, r, "one")
		return job.Status == kiln.JobQueued && job.LastProvisioningError != "", describeRun(r)
	})
	for _, want := range []string{"exited before it registered", "--- captured output (last 50 lines) ---\nstarting\nboom: no such runtime"} {
		if !strings.Contains(job.LastProvisioningError, want) {
			t.Fatalf("provisioning error %q lacks %q", job.LastProvisioningError, want)
		}
	}
	if !strings.HasPrefix(job.PendingReason, "provisioning failed: ") {
		t.Fatalf("pending reason %q", job.PendingReason)
	}
	run = waitRun(t, s.Client, run.ID, time.Minute)
	job = mustJob(t, run, "one")
	if run.Status != kiln.RunFailed || job.Status != kiln.JobTimedOutStale || job.Error != job.LastProvisioningError && !strings.Contains(job.Error, "boom: no such runtime") {
		t.Fatalf("%s\njob error %q", describeRun(run), job.Error)
	}
	if !strings.Contains(run.FailureReason, "boom: no such runtime") {
		t.Fatalf("run failure reason %q", run.FailureReason)
	}
	// A job the scaler serves waited for it past the unroutable grace; one
	// nothing serves failed unroutable, the message naming the scalers.
	if gpu := mustJob(t, run, "gpu"); gpu.Status != kiln.JobUnroutable || !strings.Contains(gpu.Error, "no scaler serves it (considered: broken)") {
		t.Fatalf("gpu job %s: %q", gpu.Status, gpu.Error)
	}
	tl, err := s.DB.Runs().Timeline(bg, run.ID, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, ev := range tl {
		if ev.Type == scaler.EventFailed {
			failed++
		}
	}
	if failed != 1 {
		t.Fatalf("%d scaler.failed events on the timeline, want 1 (the scaler backs off): %+v", failed, tl)
	}
}

// A scaler with a warm pool keeps that many idle agents ready before any
// job asks: a job runs on one at once, and the pool is refilled with a new
// agent once that one, used, is removed.
// Proves B181 (docs/behaviours.md).
func TestWarmPoolAgentTakesTheJobAndIsReplaced(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Scalers = []scaler.Config{{Name: "warm", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 2,
			SpawnTimeout: time.Minute, WarmPool: scaler.WarmPool{Size: 1}}}
	})
	warmAgent := func() string {
		for _, a := range s.Fleet.Agents() {
			if strings.HasPrefix(a.ID, "scaler-") && a.ActiveJobs == 0 {
				return a.ID
			}
		}
		return ""
	}
	var first string
	waittest.Until(t, time.Minute, "a warm agent before any job", func() bool { first = warmAgent(); return first != "" })
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  one:
    runs_on: [scaled]
    steps:
      - run: echo warm
`})
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 2*time.Minute)
	if j := mustJob(t, run, "one"); run.Status != kiln.RunSuccess || j.AgentID != first {
		t.Fatalf("the job ran on %q, not the warm agent %s: %s", j.AgentID, first, describeRun(run))
	}
	waittest.UntilState(t, time.Minute, "a new warm agent", func() (bool, string) {
		id := warmAgent()
		return id != "" && id != first, "warm agent " + id
	})
}
