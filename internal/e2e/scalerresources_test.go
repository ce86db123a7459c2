package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/server"
)

// A push's job with resources: a process scaler within its budget starts
// an agent for it and the job runs; a job asking for more than the scaler
// can ever give says so while it waits, and — no persistent agent serving
// it — fails unroutable with that sentence.
// Proves B199 (docs/behaviours.md).
func TestJobTooBigForEveryScalerSaysSoAndFailsUnroutable(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) {
		c.Queue.UnroutableGrace = 3 * time.Second
		c.Scalers = []scaler.Config{{Name: "small", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 2,
			SpawnTimeout: time.Minute, ResourceCap: scaler.Resources{CPUs: 2, Memory: "2g"}}}
	})
	localRun(t, s, map[string]string{"ci": `on: push
jobs:
  fits:
    runs_on: [scaled]
    checkout: false
    resources: {cpus: 1, memory: 512m}
    steps:
      - run: echo fits
  huge:
    runs_on: [scaled]
    checkout: false
    resources: {cpus: 4}
    steps:
      - run: echo never
`})
	run := triggerOne(t, s.Client, "app")
	const why = "no scaler can start an agent with 4 CPUs (small: at most 2 CPUs (resource_cap.cpus))"
	waitJob(t, s.Client, run.ID, "huge", time.Minute, "the reason why it waits", func(j api.Job) bool {
		return j.Status == kiln.JobQueued && j.PendingReason == why
	})
	run = waitRun(t, s.Client, run.ID, 2*time.Minute)
	if fits := mustJob(t, run, "fits"); fits.Status != kiln.JobSuccess || !strings.HasPrefix(fits.AgentID, "scaler-process-") {
		t.Fatalf("%s", describeRun(run))
	}
	if huge := mustJob(t, run, "huge"); huge.Status != kiln.JobUnroutable || !strings.Contains(huge.Error, "; "+why) {
		t.Fatalf("huge: %s %q", huge.Status, huge.Error)
	}
}
