package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// B126: a step's supervisor kills the step once the lease file's time has
// passed, with nothing from the executor's side: the agent may be frozen.
// A lease in the future leaves the step alone.
func TestSupervisorKillsStepWhenLeaseLapses(t *testing.T) {
	t.Parallel()
	lease := filepath.Join(t.TempDir(), "lease")
	writeFile(t, lease, "")
	setLease := func(d time.Time) {
		if err := os.Chtimes(lease, d, d); err != nil {
			t.Fatal(err)
		}
	}
	setLease(time.Now().Add(time.Hour))
	x := newExecutor(t, func(c *Config) { c.LeaseFile = lease })
	pidFile := filepath.Join(t.TempDir(), "pids")
	rec := &recorder{}
	e := x.Start(context.Background(), &Job{JobID: "j", JobEnv: map[string]string{"PIDS": pidFile}, Steps: []Step{
		{Name: "held", Run: "echo first; test ! -e /proc/self/fd/3 || ls -l /proc/self/fd/3"},
		{Name: "spawner", Run: spawnScript + "sleep 3137"},
	}}, rec)
	waittest.Until(t, 10*time.Second, "the step to be ready", func() bool { return strings.Contains(rec.text(1), "ready") })
	if txt := rec.text(0); strings.Contains(txt, "lease") {
		t.Fatalf("a step can see the lease file: %q", txt)
	}
	setLease(time.Now().Add(-time.Second))
	res := e.Wait()
	if res.Status != kiln.JobFailed {
		t.Fatalf("job = %s (%s), want failed", res.Status, res.Error)
	}
	wantStatuses(t, res, success, failed)
	if !strings.Contains(rec.text(1), "lease ran out") {
		t.Errorf("step log = %q, want the supervisor's reason", rec.text(1))
	}
	pids := readPids(t, pidFile)
	if len(pids) != 6 {
		t.Fatalf("pids = %v", pids)
	}
	waitAllGone(t, pids, spawnMarker)
}
