package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
)

// stubbornStep records its pid as name in pids, notes a SIGTERM in
// pids/name.term and keeps running: only SIGKILL ends it.
func stubbornStep(pids, name string) string {
	return fmt.Sprintf(`echo `+selfPid+` > %[1]s/%[2]s.pid
          trap 'echo got TERM; touch %[1]s/%[2]s.term' TERM
          echo ready
          while true; do sleep 0.05 || true; done`, pids, name)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Cancelling a run: the first cancel is graceful — jobs still waiting are
// cancelled at once and never start, the running step gets SIGTERM and
// may go on; the second cancel forces it — the step is killed and the run
// ends cancelled.
// Proves B22 (docs/behaviours.md).
func TestCancelIsGracefulThenForced(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	pids := t.TempDir()
	killLeftovers(t, pids)
	localRun(t, s, map[string]string{"long": `on: push
jobs:
  one:
    runs_on: [cancel]
    steps:
      - run: |
          ` + stubbornStep(pids, "one") + `
  two:
    runs_on: [cancel]
    steps:
      - run: |
          ` + stubbornStep(pids, "two") + `
  later:
    needs: [one, two]
    steps:
      - run: echo ` + selfPid + ` > ` + pids + `/later.pid
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "single", labels: "cancel", maxJobs: 1})
	run := triggerOne(t, s.Client, "app")
	// One of one and two runs; the other waits for the agent.
	var running, waiting string
	waittest.UntilState(t, 30*time.Second, "one job to run its step", func() (bool, string) {
		p := readPids(t, pids)
		for _, name := range []string{"one", "two"} {
			if p[name] != 0 {
				running, waiting = name, map[string]string{"one": "two", "two": "one"}[name]
				return true, ""
			}
		}
		return false, describeRun(getRun(t, s.Client, run.ID))
	})
	if j := mustJob(t, getRun(t, s.Client, run.ID), waiting); j.Status != kiln.JobQueued {
		t.Fatalf("%s is %s, want queued", waiting, j.Status)
	}

	res, err := s.Client.CancelRun(bg, run.ID, "wrong branch")
	if err != nil || res.Forced || res.Run.Status != kiln.RunCancelling {
		t.Fatalf("first cancel: %+v %v", res, err)
	}
	waittest.UntilState(t, 10*time.Second, "the running step to get SIGTERM", func() (bool, string) {
		return exists(filepath.Join(pids, running+".term")), ""
	})
	r := getRun(t, s.Client, run.ID)
	if j := mustJob(t, r, waiting); j.Status != kiln.JobCancelled || j.AgentID != "" {
		t.Fatalf("the waiting job after a graceful cancel: %s", describeRun(r))
	}
	if j := mustJob(t, r, running); j.Status.Terminal() || !alive(readPids(t, pids)[running]) {
		t.Fatalf("the graceful cancel ended the stubborn step: %s", describeRun(r))
	}

	res, err = s.Client.CancelRun(bg, run.ID, "")
	if err != nil || !res.Forced {
		t.Fatalf("second cancel: %+v %v", res, err)
	}
	waittest.UntilState(t, 10*time.Second, "the stubborn step to be killed", func() (bool, string) {
		return !alive(readPids(t, pids)[running]), ""
	})
	run = waitRun(t, s.Client, run.ID, 30*time.Second)
	if run.Status != kiln.RunCancelled || !strings.Contains(run.CancelReason, "wrong branch") {
		t.Fatalf("%s (reason %q)", describeRun(run), run.CancelReason)
	}
	for _, name := range []string{"one", "two", "later"} {
		if j := mustJob(t, run, name); j.Result != kiln.ResultCancelled && j.Result != kiln.ResultSkipped {
			t.Fatalf("%s ended %s (%s)", name, j.Status, j.Result)
		}
	}
	// The waiting jobs never started, even now that the agent is free.
	startAgent(t, s.URL, secret, agentOpts{id: "another", labels: "cancel"})
	waitConnected(t, s.Client, "another")
	if p := readPids(t, pids); p[waiting] != 0 || p["later"] != 0 {
		t.Fatalf("a job of the cancelled run started: %v", p)
	}
	if q, err := s.Client.Queue(bg, 0); err != nil || len(q.Waiting) != 0 {
		t.Fatalf("queue after the cancel: %+v %v", q, err)
	}
}

// Rerunning a failed run's failed jobs runs only them and their
// dependents (the passing job keeps its result, and is not dispatched
// again); rerunning the whole run runs everything. Each new run names the
// run it reruns.
// Proves B24 (docs/behaviours.md).
func TestRerunOfFailedJobsAndOfTheWholeRunKeepsLineage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	fixed, marks := filepath.Join(dir, "fixed"), filepath.Join(dir, "marks")
	localRun(t, s, map[string]string{"ci": fmt.Sprintf(`on: push
jobs:
  build:
    steps:
      - run: echo build >> %[2]s
  flaky:
    steps:
      - run: echo flaky >> %[2]s; test -f %[1]s
  report:
    needs: [build, flaky]
    steps:
      - run: echo report >> %[2]s
`, fixed, marks)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "box", maxJobs: 2})
	first := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, time.Minute)
	if first.Status != kiln.RunFailed || mustJob(t, first, "report").Status != kiln.JobSkipped {
		t.Fatalf("first run: %s", describeRun(first))
	}
	if err := os.WriteFile(fixed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(marks, 0); err != nil {
		t.Fatal(err)
	}

	failedOnly, err := s.Client.RerunRun(bg, first.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	failedOnly = waitRun(t, s.Client, failedOnly.ID, time.Minute)
	if failedOnly.Status != kiln.RunSuccess || failedOnly.RerunOf != first.ID || failedOnly.SHA != first.SHA {
		t.Fatalf("failed-only rerun: %s, reruns %q (want %q)", describeRun(failedOnly), failedOnly.RerunOf, first.ID)
	}
	if got := markLines(t, marks); !slices.Equal(got, []string{"flaky", "report"}) {
		t.Fatalf("the failed-only rerun ran %q, want flaky and report", got)
	}
	if b := mustJob(t, failedOnly, "build"); b.Status != kiln.JobSuccess || b.Dispatches != 0 {
		t.Fatalf("the passing job was not kept: %+v", b)
	}

	if err := os.Truncate(marks, 0); err != nil {
		t.Fatal(err)
	}
	whole, err := s.Client.RerunRun(bg, first.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	whole = waitRun(t, s.Client, whole.ID, time.Minute)
	if whole.Status != kiln.RunSuccess || whole.RerunOf != first.ID || whole.Number <= failedOnly.Number {
		t.Fatalf("whole rerun: %s, reruns %q", describeRun(whole), whole.RerunOf)
	}
	got := markLines(t, marks)
	slices.Sort(got)
	if !slices.Equal(got, []string{"build", "flaky", "report"}) {
		t.Fatalf("the whole rerun ran %q", got)
	}
	// An unknown run cannot be rerun.
	if _, err := s.Client.RerunRun(bg, "999", false); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Fatalf("rerun of an unknown run: %v", err)
	}
}

func markLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// A run's logs are readable while it runs: the lines so far, and a
// follower that receives new lines as they are written and ends when the
// job does.
// Proves B57 (docs/behaviours.md).
func TestLogsAreReadableWhileTheRunIsLive(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	gate := filepath.Join(t.TempDir(), "gate")
	localRun(t, s, map[string]string{"live": fmt.Sprintf(`on: push
jobs:
  live:
    steps:
      - name: talk
        run: |
          for i in 1 2 3; do echo "before $i"; done
          while [ ! -f %s ]; do sleep 0.02; done
          for i in 1 2 3; do echo "after $i"; done
`, gate)})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "talker"})
	run := triggerOne(t, s.Client, "app")
	waittest.UntilState(t, 30*time.Second, "the first lines while the step runs", func() (bool, string) {
		got := texts(logLines(t, s.Client, run.ID, "live", intp(0)))
		return slices.Equal(got, []string{"before 1", "before 2", "before 3"}), fmt.Sprint(got)
	})
	if r := getRun(t, s.Client, run.ID); r.Status != kiln.RunRunning {
		t.Fatalf("the run is %s", r.Status)
	}

	lines := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.Client.FollowLogs(bg, run.ID, "live", func(l api.LogLine) error {
			if l.Step == 0 {
				lines <- l.Text
			}
			return nil
		})
	}()
	for _, want := range []string{"before 1", "before 2", "before 3"} {
		if got := recvLine(t, lines); got != want {
			t.Fatalf("follow: %q, want %q", got, want)
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"after 1", "after 2", "after 3"} {
		if got := recvLine(t, lines); got != want {
			t.Fatalf("follow: %q, want %q", got, want)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end when the job finished")
	}
	if r := getRun(t, s.Client, run.ID); r.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(r))
	}
}

func recvLine(t testing.TB, c <-chan string) string {
	t.Helper()
	select {
	case l := <-c:
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no log line within 30s")
		return ""
	}
}

// A manual dispatch with typed inputs: the values the step sees are the
// declared types' (defaults filled in), and a value outside a choice
// starts nothing and says why.
// Proves B6 (docs/behaviours.md).
func TestDispatchWithTypedInputs(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	localRun(t, s, map[string]string{"deploy": `on:
  dispatch:
    inputs:
      target: {type: choice, options: [staging, production], default: staging}
      dry_run: {type: boolean, default: true}
      replicas: {type: number, default: 1}
      note: {type: string, default: none}
jobs:
  deploy:
    steps:
      - run: echo "target=${{ inputs.target }} dry_run=${{ inputs.dry_run }} replicas=${{ inputs.replicas }} note=${{ inputs.note }} event=${{ event.name }}"
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "deployer"})

	d, err := s.Client.Dispatch(bg, api.DispatchRequest{Source: "app", Workflow: "deploy.yml",
		Inputs: map[string]any{"target": "production", "dry_run": "false", "replicas": 3}}, true)
	if err != nil || d.Status != kiln.DeliveryProcessed || len(d.Runs) != 1 {
		t.Fatalf("dispatch: %s %v", describeDelivery(d), err)
	}
	run := waitRun(t, s.Client, d.Runs[0].ID, time.Minute)
	if run.Status != kiln.RunSuccess || run.Trigger != kiln.EventDispatch {
		t.Fatalf("%s", describeRun(run))
	}
	said := texts(logLines(t, s.Client, run.ID, "deploy", intp(0)))
	if want := "target=production dry_run=false replicas=3 note=none event=dispatch"; len(said) != 1 || said[0] != want {
		t.Fatalf("the step said %q, want %q", said, want)
	}

	runs := runCount(t, s.Client)
	for _, bad := range []map[string]any{{"target": "moon"}, {"replicas": "many"}, {"colour": "red"}} {
		d, err := s.Client.Dispatch(bg, api.DispatchRequest{Source: "app", Workflow: "deploy.yml", Inputs: bad}, true)
		if err != nil {
			t.Fatalf("dispatch %v: %v", bad, err)
		}
		if d.Status != kiln.DeliveryFailed || len(d.Runs) != 0 || d.Message == "" {
			t.Fatalf("dispatch %v: %s", bad, describeDelivery(d))
		}
		for k := range bad {
			if !strings.Contains(d.Message, k) {
				t.Fatalf("dispatch %v: the message %q does not name %s", bad, d.Message, k)
			}
		}
	}
	if n := runCount(t, s.Client); n != runs {
		t.Fatalf("bad dispatches started runs: %d, was %d", n, runs)
	}
}

// A job no agent could ever take (the fleet has no agent with its labels)
// fails as unroutable once the grace has passed, with a reason naming the
// labels, while a job of the same run that can run does.
// Proves B33 (docs/behaviours.md).
func TestUnroutableJobFailsAfterTheGraceWithAClearReason(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.Queue.UnroutableGrace = 2 * time.Second })
	localRun(t, s, map[string]string{"gpu": `on: push
jobs:
  train:
    runs_on: [gpu, linux]
    steps:
      - run: echo never
  lint:
    steps:
      - run: echo linted
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "cpu-only"})
	waitConnected(t, s.Client, "cpu-only")
	run := triggerOne(t, s.Client, "app")
	created := time.Now()
	// While it waits, it says why.
	var reasons []string
	waittest.UntilState(t, 30*time.Second, "train to wait saying which labels no agent has", func() (bool, string) {
		j := mustJob(t, getRun(t, s.Client, run.ID), "train")
		if j.PendingReason != "" && !slices.Contains(reasons, j.PendingReason) {
			reasons = append(reasons, j.PendingReason)
		}
		return j.Status == kiln.JobQueued && strings.Contains(j.PendingReason, "gpu"), fmt.Sprintf("%s %q", j.Status, reasons)
	})
	run = waitRun(t, s.Client, run.ID, time.Minute)
	train := mustJob(t, run, "train")
	if train.Status != kiln.JobUnroutable || !strings.Contains(train.Error, "gpu") || time.Since(created) < 2*time.Second {
		t.Fatalf("%s after %s", describeRun(run), time.Since(created))
	}
	t.Logf("reasons while waiting %q; error %q", reasons, train.Error)
	if lint := mustJob(t, run, "lint"); lint.Status != kiln.JobSuccess || run.Status != kiln.RunFailed {
		t.Fatalf("%s", describeRun(run))
	}
}

// A workflow's timeout is enforced by the orchestrator: past it the run
// is cancelled and its step's processes are stopped.
// Proves B19 (docs/behaviours.md).
func TestWorkflowTimeoutStopsTheRun(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *server.Config) { c.Runs.CancelGrace = 2 * time.Second })
	pids := t.TempDir()
	killLeftovers(t, pids)
	localRun(t, s, map[string]string{"slow": `on: push
timeout: 6s
jobs:
  slow:
    checkout: false
    steps:
      - run: echo ` + selfPid + ` > ` + pids + `/slow.pid; sleep 600
  after:
    needs: [slow]
    steps:
      - run: echo ` + selfPid + ` > ` + pids + `/after.pid
`})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{})
	startAgent(t, s.URL, secret, agentOpts{id: "patient"})
	run := triggerOne(t, s.Client, "app")
	waittest.UntilState(t, 30*time.Second, "the slow step to start", func() (bool, string) {
		return readPids(t, pids)["slow"] != 0, describeRun(getRun(t, s.Client, run.ID))
	})
	run = waitRun(t, s.Client, run.ID, time.Minute)
	if run.Status != kiln.RunCancelled || !strings.Contains(run.CancelReason, "timeout of 6s") {
		t.Fatalf("%s: reason %q does not say the workflow timed out", describeRun(run), run.CancelReason)
	}
	if run.FinishedAt.Sub(*run.StartedAt) > 30*time.Second {
		t.Fatalf("the run took %s", run.FinishedAt.Sub(*run.StartedAt))
	}
	waittest.UntilState(t, 30*time.Second, "the slow step to be stopped", func() (bool, string) {
		return !alive(readPids(t, pids)["slow"]), ""
	})
	if readPids(t, pids)["after"] != 0 {
		t.Fatal("the job after the timed-out one started")
	}
}
