package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/waittest"
)

// scalerStates lists the scalers a server shows, each as name or
// "name (retiring)".
func scalerStates(t testing.TB, c *api.Client) string {
	t.Helper()
	list, err := c.Scalers(bg)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, s := range list {
		name := s.Name
		if s.Retiring {
			name += " (retiring)"
		}
		out = append(out, name)
	}
	return strings.Join(out, ", ")
}

// A real `kiln server` sent SIGHUP reads its configuration file again: an
// added scaler serves at once; a removed one retires — its agent finishes
// its job, it starts nothing for new jobs, it is listed as retiring until
// that agent is gone, then no more; a changed one applies to the agents it
// starts next; a change to another section is logged as needing a
// restart; a file that does not validate is refused with its error logged,
// and the running scalers stay.
// Proves B227, B228, B229 (docs/behaviours.md).
func TestSIGHUPReloadsTheScalers(t *testing.T) {
	t.Parallel()
	dir := scratchDir(t)
	gate := filepath.Join(dir, "gate")
	cfgPath := filepath.Join(dir, "kiln.yml")
	write := func(yml string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	scalerYAML := func(name, label, extra string) string {
		return fmt.Sprintf("  - name: %s\n    type: process\n    labels: [%s]\n    max_agents: 2\n    spawn_timeout: 1m\n%s", name, label, extra)
	}
	write("scalers:\n" + scalerYAML("old", "old", ""))
	s := startServerProc(t, filepath.Join(dir, "data"), 0, "--config", cfgPath)
	t.Cleanup(func() {
		// A graceful stop removes the agents its scalers started.
		s.proc.signal(t, syscall.SIGTERM)
		s.proc.wait(t, time.Minute)
	})
	c := procClient(t, s)
	olds := newRepo(t, map[string]string{workflow("ci"): fmt.Sprintf(`on: push
jobs:
  one:
    runs_on: [old]
    checkout: false
    steps:
      - run: while [ ! -f %q ]; do sleep 0.1; done; echo "finished on $KILN_AGENT_ID"
`, gate)})
	addLocalSource(t, c, "olds", olds.dir)
	news := newRepo(t, map[string]string{workflow("ci"): `on: push
jobs:
  one:
    runs_on: [new]
    checkout: false
    steps:
      - run: echo "greeting=$GREETING on $KILN_AGENT_ID"
`})
	addLocalSource(t, c, "news", news.dir)
	hup := func() {
		t.Helper()
		s.proc.signal(t, syscall.SIGHUP)
	}
	waitLog := func(what, text string) {
		t.Helper()
		waittest.UntilState(t, time.Minute, what, func() (bool, string) {
			return strings.Contains(s.proc.log.String(), text), tail(s.proc.log.String(), 5)
		})
	}
	greeting := func(want string) {
		t.Helper()
		run := waitRun(t, c, triggerOne(t, c, "news").ID, 2*time.Minute)
		j := mustJob(t, run, "one")
		if run.Status != kiln.RunSuccess || !strings.HasPrefix(j.AgentID, "scaler-process-") {
			t.Fatalf("%s", describeRun(run))
		}
		if out := strings.Join(texts(logLines(t, c, run.ID, "one", nil)), "\n"); !strings.Contains(out, "greeting="+want+" ") {
			t.Fatalf("the job on the new scaler's agent printed %q, want greeting=%s", out, want)
		}
	}

	first := triggerOne(t, c, "olds")
	busy := waitJob(t, c, first.ID, "one", 2*time.Minute, "running on the old scaler's agent", func(j api.Job) bool {
		return j.Status == kiln.JobRunning && strings.HasPrefix(j.AgentID, "scaler-process-")
	})

	// Remove old, add new.
	write("scalers:\n" + scalerYAML("new", "new", "    env: {GREETING: hello}\n"))
	hup()
	waittest.UntilState(t, time.Minute, "new serving and old retiring", func() (bool, string) {
		got := scalerStates(t, c)
		return got == "new, old (retiring)", got
	})
	greeting("hello")
	// The retiring scaler starts nothing for a new job of its labels.
	late := triggerOne(t, c, "olds")
	if j := mustJob(t, getRun(t, c, late.ID), "one"); j.Status != kiln.JobQueued || strings.Contains(j.PendingReason, "scaler old") {
		t.Fatalf("a job for the retiring scaler: %s <%s>", j.Status, j.PendingReason)
	}
	// Its agent finishes its job, is removed, and the scaler with it.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run := waitRun(t, c, first.ID, time.Minute)
	if j := mustJob(t, run, "one"); run.Status != kiln.RunSuccess || j.AgentID != busy.AgentID {
		t.Fatalf("the retiring scaler's job: %s", describeRun(run))
	}
	waittest.UntilState(t, time.Minute, "old forgotten once its agent is gone", func() (bool, string) {
		got := scalerStates(t, c)
		return got == "new", got
	})
	if j := mustJob(t, getRun(t, c, late.ID), "one"); j.Status != kiln.JobQueued || j.AgentID != "" {
		t.Fatalf("a job for the retired scaler got an agent: %s on %q", j.Status, j.AgentID)
	}

	// A changed scaler applies to its next agents; another section
	// changed needs a restart, and says so.
	write("scalers:\n" + scalerYAML("new", "new", "    env: {GREETING: changed}\n") + "queue:\n  expiry: 3h\n")
	hup()
	waitLog("the restart warning", "take effect only after a restart")
	if log := s.proc.log.String(); !strings.Contains(log, "queue.expiry") {
		t.Fatalf("the restart warning does not name queue.expiry:\n%s", tail(log, 10))
	}
	greeting("changed")

	// A broken file is refused, the error logged, the scalers kept.
	write("scalers:\n  - name: new\n    type: process\n    labelz: [new]\n    max_agents: 2\n")
	hup()
	waitLog("the refusal", "reload refused")
	if log := s.proc.log.String(); !strings.Contains(log, `labelz`) {
		t.Fatalf("the refusal does not name the key:\n%s", tail(log, 10))
	}
	if got := scalerStates(t, c); got != "new" {
		t.Fatalf("after a refused reload: %q", got)
	}
	greeting("changed")
}
