//go:build linux

package executor

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// spawnScript starts every kind of process a step can leave behind and
// records their pids in $PIDS: a background job, nohup, a process that
// ignores SIGTERM, a double fork whose middle process exits, and setsid'd
// processes (one of them in a new session that forks again). Each sleeps
// for a marker duration so a recycled pid is not mistaken for it.
const spawnScript = `
sleep 3131 & echo $! >> "$PIDS"
nohup sleep 3132 >/dev/null 2>&1 & echo $! >> "$PIDS"
sh -c 'trap "" TERM; echo $$ >> "$PIDS"; exec sleep 3133' &
(sh -c 'sleep 3134 & echo $! >> "$PIDS"' &)
setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 3135' &
setsid sh -c 'sleep 3136 & echo $! >> "$PIDS"; wait' &
while [ "$(wc -l < "$PIDS")" -lt 6 ]; do sleep 0.01; done
echo ready
`

const spawnMarker = "sleep 313"

// Proves B56 (docs/behaviours.md).
func TestStepEndKillsEveryLeftoverProcess(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	res, _ := runJob(t, x, &Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{
		{Run: spawnScript},
		{Run: "echo next step"},
	}})
	wantStatuses(t, res, success, success)
	pids := readPids(t, pidFile)
	if len(pids) != 6 {
		t.Fatalf("pids = %v", pids)
	}
	waitAllGone(t, pids, spawnMarker)
}

func TestCancelKillsStepAndAllItsChildren(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		name := map[bool]string{false: "graceful", true: "forced"}[force]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newExecutor(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			rec := &recorder{}
			e := x.Start(context.Background(), &Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{
				{Name: "spawner", Run: spawnScript + "sleep 3137"},
				{Name: "after", Run: "echo must not run"},
				{Name: "cleanup", If: "always()", Run: "echo cleanup ran"},
			}}, rec)
			waittest.Until(t, 10*time.Second, "the step to be ready", func() bool { return strings.Contains(rec.text(0), "ready") })
			e.Cancel(force)
			res := e.Wait()
			if res.Status != kiln.JobCancelled {
				t.Fatalf("job = %s (%s)", res.Status, res.Error)
			}
			if force {
				wantStatuses(t, res, cancelled, skipped, skipped)
			} else {
				wantStatuses(t, res, cancelled, skipped, success)
				if !strings.Contains(rec.text(2), "cleanup ran") {
					t.Errorf("always() step log = %q", rec.text(2))
				}
			}
			pids := readPids(t, pidFile)
			if len(pids) != 6 {
				t.Fatalf("pids = %v", pids)
			}
			waitAllGone(t, pids, spawnMarker)
		})
	}
}

func TestGracefulCancelLetsTrapRun(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = time.Minute })
	rec := &recorder{}
	e := x.Start(context.Background(), &Job{JobID: "j", Steps: []Step{{
		Run: "trap 'echo trapped; sleep 0.2; echo trap done; exit 7' TERM\necho ready\nsleep 60 & wait",
	}}}, rec)
	waittest.Until(t, 10*time.Second, "ready", func() bool { return strings.Contains(rec.text(0), "ready") })
	start := time.Now()
	e.Cancel(false)
	res := e.Wait()
	wantStatuses(t, res, cancelled)
	if !strings.Contains(rec.text(0), "trapped\ntrap done\n") {
		t.Errorf("log = %q", rec.text(0))
	}
	if res.Steps[0].ExitCode != 7 {
		t.Errorf("exit code = %d, want the trap's 7", res.Steps[0].ExitCode)
	}
	// The step ended on its own, long before the one-minute grace.
	if time.Since(start) > 30*time.Second {
		t.Errorf("graceful cancel waited for the grace period")
	}
}

func TestForcedCancelKillsTermTrapper(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = time.Minute })
	rec := &recorder{}
	e := x.Start(context.Background(), &Job{JobID: "j", Steps: []Step{{
		Run: "trap 'echo trapped; sleep 60' TERM\necho ready\nwhile :; do sleep 0.05; done",
	}}}, rec)
	waittest.Until(t, 10*time.Second, "ready", func() bool { return strings.Contains(rec.text(0), "ready") })
	start := time.Now()
	e.Cancel(true)
	res := e.Wait()
	wantStatuses(t, res, cancelled)
	if strings.Contains(rec.text(0), "trapped") {
		t.Errorf("a forced cancel sent SIGTERM: %q", rec.text(0))
	}
	if res.Steps[0].ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code = %d", res.Steps[0].ExitCode)
	}
	if time.Since(start) > 30*time.Second {
		t.Errorf("forced cancel waited for the grace period")
	}
}

func TestGracefulThenForcedCancel(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = time.Minute })
	rec := &recorder{}
	e := x.Start(context.Background(), &Job{JobID: "j", Steps: []Step{{
		Run: "trap 'echo trapped' TERM\necho ready\nwhile :; do sleep 0.05; done",
	}}}, rec)
	waittest.Until(t, 10*time.Second, "ready", func() bool { return strings.Contains(rec.text(0), "ready") })
	e.Cancel(false)
	waittest.Until(t, 10*time.Second, "the trap", func() bool { return strings.Contains(rec.text(0), "trapped") })
	e.Cancel(true)
	res := e.Wait()
	wantStatuses(t, res, cancelled)
}

func TestContextCancelIsForced(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	e := x.Start(ctx, &Job{JobID: "j", Steps: []Step{
		{Run: "trap '' TERM; echo ready; sleep 60"},
		{If: "always()", Run: "echo no"},
	}}, rec)
	waittest.Until(t, 10*time.Second, "ready", func() bool { return strings.Contains(rec.text(0), "ready") })
	cancel()
	res := e.Wait()
	wantStatuses(t, res, cancelled, skipped)
	if res.Status != kiln.JobCancelled {
		t.Errorf("job = %s", res.Status)
	}
}

func TestCancelBetweenStepsRunsOnlyCancelAwareSteps(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	rec := &recorder{}
	gate := filepath.Join(t.TempDir(), "gate")
	e := x.Start(context.Background(), &Job{JobID: "j", JobEnv: map[string]string{"GATE": gate}, Steps: []Step{
		{Run: `echo ready; while [ ! -e "$GATE" ]; do sleep 0.01; done`},
		{Run: "echo default"},
		{If: "cancelled()", Run: "echo on cancel"},
		{If: "failure()", Run: "echo on failure"},
		{If: "always()", Run: "echo always"},
		{If: "success()", Run: "echo on success"},
	}}, rec)
	waittest.Until(t, 10*time.Second, "ready", func() bool { return strings.Contains(rec.text(0), "ready") })
	e.Cancel(false)
	res := e.Wait()
	wantStatuses(t, res, cancelled, skipped, success, skipped, success, skipped)
}

// Proves B19 (docs/behaviours.md).
func TestStepTimeout(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = 100 * time.Millisecond })
	pidFile := filepath.Join(t.TempDir(), "pids")
	res, _ := runJob(t, x, &Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{
		{Name: "slow", Timeout: 300 * time.Millisecond, Run: "trap '' TERM\nsleep 3138 & echo $! >> \"$PIDS\"\nsleep 3139"},
		{Name: "next", Run: "true"},
		{Name: "cleanup", If: "always()", Run: "true"},
	}})
	wantStatuses(t, res, failed, skipped, success)
	if res.Steps[0].Error != "step timed out after 300ms" {
		t.Errorf("error = %q", res.Steps[0].Error)
	}
	if res.Status != kiln.JobFailed || !strings.Contains(res.Error, "step timed out after 300ms") {
		t.Errorf("job = %s %q", res.Status, res.Error)
	}
	waitAllGone(t, readPids(t, pidFile), spawnMarker)
}

func TestStepTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = 100 * time.Millisecond })
	res, _ := runJob(t, x, &Job{JobID: "j", Steps: []Step{{
		Timeout: 1500 * time.Millisecond, // long enough for the second attempt on a loaded machine
		Retry:   Retry{MaxAttempts: 2},
		Run:     `if [ -e "$KILN_TEMP/second" ]; then exit 0; fi; touch "$KILN_TEMP/second"; sleep 60`,
	}}})
	wantStatuses(t, res, success)
	if res.Steps[0].Attempt != 2 {
		t.Errorf("attempt = %d", res.Steps[0].Attempt)
	}
}

// Proves B19 (docs/behaviours.md).
func TestJobTimeout(t *testing.T) {
	t.Parallel()
	x := newExecutor(t, func(c *Config) { c.GracePeriod = 100 * time.Millisecond })
	res, _ := runJob(t, x, &Job{JobID: "j", Timeout: 1500 * time.Millisecond, Steps: []Step{
		{Run: "true"},
		{Run: "sleep 60"},
		{If: "always()", Run: "true"},
	}})
	wantStatuses(t, res, success, failed, skipped)
	if res.Status != kiln.JobFailed || res.Error != "job timed out after 1.5s" || res.Steps[1].Error != "job timed out after 1.5s" {
		t.Fatalf("job = %s %q, step %q", res.Status, res.Error, res.Steps[1].Error)
	}
}

func TestJobTimeoutDuringRetryWait(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	start := time.Now()
	// The timeout leaves the first attempt time to fail even on a loaded
	// machine, so it fires during the minute-long retry wait.
	res, rec := runJob(t, x, &Job{JobID: "j", Timeout: 3 * time.Second, Steps: []Step{
		{Run: "exit 1", Retry: Retry{MaxAttempts: 5, Delay: time.Minute}},
		{Run: "true"},
	}})
	wantStatuses(t, res, failed, skipped)
	if res.Error != "job timed out after 3s" || res.Steps[0].Attempt != 1 {
		t.Fatalf("job %q, step %+v", res.Error, res.Steps[0])
	}
	if !strings.Contains(rec.text(0), "retrying in 1m0s") {
		t.Errorf("log = %q", rec.text(0))
	}
	if time.Since(start) > 30*time.Second {
		t.Error("the job waited out the retry delay")
	}
}

func TestCancelDuringRetryWait(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	rec := &recorder{}
	e := x.Start(context.Background(), &Job{JobID: "j", Steps: []Step{
		{Run: "exit 1", Retry: Retry{MaxAttempts: 3, Delay: time.Minute}},
	}}, rec)
	waittest.Until(t, 10*time.Second, "the retry notice", func() bool { return strings.Contains(rec.text(0), "retrying") })
	e.Cancel(false)
	res := e.Wait()
	wantStatuses(t, res, cancelled)
}

// TestAgentDeathKillsSteps kills a stand-in agent process (this test binary
// running a job) with SIGKILL and checks that the step's processes die too.
// Proves B56 (docs/behaviours.md).
func TestAgentDeathKillsSteps(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	job := Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{{Run: spawnScript + "echo done > \"$PIDS.ready\"; sleep 3137"}}}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.json")
	if err := os.WriteFile(jobFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), agentHelperEnv+"="+jobFile, raceEnv)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 20*time.Second, "the step to be ready", func() bool {
		_, err := os.Stat(pidFile + ".ready")
		return err == nil
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	pids := readPids(t, pidFile)
	if len(pids) != 6 {
		t.Fatalf("pids = %v", pids)
	}
	waitAllGone(t, pids, spawnMarker)
}

// TestStepKillingItsSupervisor: a step that kills its own shim (its
// parent) orphans its processes to init; the executor still finds and
// kills them.
func TestStepKillingItsSupervisor(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	res, _ := runJob(t, x, &Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{
		{Run: `sleep 3141 & echo $! >> "$PIDS"
setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 3142' &
echo $$ >> "$PIDS"
while [ "$(wc -l < "$PIDS")" -lt 3 ]; do sleep 0.01; done
kill -9 $PPID
exec sleep 3143`},
		{If: "always()", Run: "true"},
	}})
	wantStatuses(t, res, failed, success)
	if res.Steps[0].Error != "the step's supervisor process was killed" {
		t.Errorf("error = %q", res.Steps[0].Error)
	}
	pids := readPids(t, pidFile)
	if len(pids) != 3 {
		t.Fatalf("pids = %v", pids)
	}
	waitAllGone(t, pids, "sleep 314")
}
