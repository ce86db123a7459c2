package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// endAs drives a queued job to a terminal status with the given result.
func endAs(t *testing.T, db *store.DB, id string, r kiln.Result) {
	t.Helper()
	switch r {
	case kiln.ResultSuccess:
		runJob(t, db, id, kiln.JobSuccess)
	case kiln.ResultFailure:
		runJob(t, db, id, kiln.JobFailed)
	case kiln.ResultCancelled:
		runJob(t, db, id, kiln.JobCancelled)
	default:
		t.Fatalf("endAs %s", r)
	}
}

// TestNeedsResultSets checks each edge's accepted result set against each
// upstream result.
// Proves B13 (docs/behaviours.md).
func TestNeedsResultSets(t *testing.T) {
	always := []kiln.Result{kiln.ResultSuccess, kiln.ResultFailure, kiln.ResultCancelled, kiln.ResultSkipped}
	cases := []struct {
		accept   []kiln.Result
		upstream kiln.Result
		released bool
	}{
		{nil, kiln.ResultSuccess, true}, // default: success
		{nil, kiln.ResultFailure, false},
		{nil, kiln.ResultCancelled, false},
		{[]kiln.Result{kiln.ResultFailure}, kiln.ResultFailure, true},
		{[]kiln.Result{kiln.ResultFailure}, kiln.ResultSuccess, false},
		{always, kiln.ResultSuccess, true},
		{always, kiln.ResultFailure, true},
		{always, kiln.ResultCancelled, true},
		{[]kiln.Result{kiln.ResultSuccess, kiln.ResultCancelled}, kiln.ResultCancelled, true},
		{[]kiln.Result{kiln.ResultSuccess, kiln.ResultCancelled}, kiln.ResultFailure, false},
	}
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		for i, c := range cases {
			cr := mustCreate(t, db, newRun(job("up"), job("down", need("up", c.accept...))))
			endAs(t, db, cr.Jobs["up"], c.upstream)
			want := kiln.JobSkipped
			if c.released {
				want = kiln.JobQueued
			}
			j := wantStatus(t, db, cr.Jobs["down"], want)
			if !c.released && !strings.Contains(j.Error, "needs not met: up is "+string(c.upstream)) {
				t.Errorf("case %d: skip reason %q", i, j.Error)
			}
			if c.released {
				runJob(t, db, cr.Jobs["down"], kiln.JobSuccess)
			}
			r := mustRun(t, db, cr.ID)
			if !r.Status.Terminal() {
				t.Errorf("case %d: run still %s", i, r.Status)
			}
		}
	})
}

// A need on a matrix base waits for every child; `failure` is met when one
// child failed, `success` only when all succeeded.
// Proves B13 (docs/behaviours.md).
func TestNeedsMatrixGroup(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		child := func(v string) store.NewJob {
			j := job("test (" + v + ")")
			j.Base = "test"
			j.Matrix = json.RawMessage(`{"go":"` + v + `"}`)
			return j
		}
		cr := mustCreate(t, db, newRun(child("1.25"), child("1.26"),
			job("report", need("test", kiln.ResultFailure)), job("deploy", need("test"))))
		runJob(t, db, cr.Jobs["test (1.25)"], kiln.JobFailed)
		// One child still runs: nothing is decided yet.
		wantStatus(t, db, cr.Jobs["report"], kiln.JobPending)
		wantStatus(t, db, cr.Jobs["deploy"], kiln.JobPending)
		runJob(t, db, cr.Jobs["test (1.26)"], kiln.JobSuccess)
		wantStatus(t, db, cr.Jobs["report"], kiln.JobQueued)
		j := wantStatus(t, db, cr.Jobs["deploy"], kiln.JobSkipped)
		if !strings.Contains(j.Error, "test (1.25) is failure") || strings.Contains(j.Error, "1.26") {
			t.Fatalf("skip reason %q", j.Error)
		}
	})
}

// Skipping cascades: a dependent of a skipped job is skipped too unless it
// accepts skipped, and then it runs.
// Proves B14 (docs/behaviours.md).
func TestSkipCascade(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(
			job("a"),
			job("b", need("a")),
			job("c", need("b")),
			job("d", need("c")),
			job("e", need("c", kiln.ResultSuccess, kiln.ResultSkipped)),
		))
		eff := runJob(t, db, cr.Jobs["a"], kiln.JobFailed)
		for _, n := range []string{"b", "c", "d"} {
			wantStatus(t, db, cr.Jobs[n], kiln.JobSkipped)
		}
		wantStatus(t, db, cr.Jobs["e"], kiln.JobQueued)
		finished := map[string]kiln.JobStatus{}
		for _, f := range eff.Finished {
			finished[f.Name] = f.Status
		}
		if finished["a"] != kiln.JobFailed || finished["d"] != kiln.JobSkipped || len(eff.Queued) != 1 || eff.Queued[0].Name != "e" {
			t.Fatalf("effects: finished %v queued %v", finished, eff.Queued)
		}
		runJob(t, db, cr.Jobs["e"], kiln.JobSuccess)
		wantRunStatus(t, db, cr.ID, kiln.RunFailed)
	})
}

// When the run is being cancelled, dependents become cancelled, not skipped,
// even those that accept any result.
func TestCancelledRunCancelsDependents(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		always := []kiln.Result{kiln.ResultSuccess, kiln.ResultFailure, kiln.ResultCancelled, kiln.ResultSkipped}
		cr := mustCreate(t, db, newRun(job("a"), job("b", need("a")), job("cleanup", need("a", always...))))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		if err := db.Jobs().Start(ctx, lease(c)); err != nil {
			t.Fatal(err)
		}
		res, err := db.Runs().Cancel(ctx, cr.ID, "user", false)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Cancelling) != 1 || res.Cancelling[0].JobID != c.JobID || res.Cancelling[0].AgentID != "agent-1" || res.Cancelling[0].Epoch != c.Epoch {
			t.Fatalf("cancelling %+v", res.Cancelling)
		}
		if len(res.Cancelled) != 2 {
			t.Fatalf("cancelled at once: %+v", res.Cancelled)
		}
		wantRunStatus(t, db, cr.ID, kiln.RunCancelling)
		for _, n := range []string{"b", "cleanup"} {
			j := wantStatus(t, db, cr.Jobs[n], kiln.JobCancelled)
			if !j.Stopped {
				t.Errorf("%s has no stop mark", n)
			}
		}
		// The agent reports the job cancelled; the run ends cancelled.
		complete(t, db, c, kiln.JobCancelled)
		r := wantRunStatus(t, db, cr.ID, kiln.RunCancelled)
		if r.CancelReason != "user" || r.FinishedAt.IsZero() {
			t.Fatalf("run %+v", r)
		}
	})
}

// A dependent released while its run is cancelling (its upstream ended
// after the cancel) is cancelled.
func TestDependentOfCancellingRunIsCancelled(t *testing.T) {
	var mu sync.Mutex
	released := 0
	count := func(store.ReadyJob) store.Release { mu.Lock(); released++; mu.Unlock(); return store.Release{} }
	suite(t, func(t *testing.T, rdb *store.DB, clock *storetest.Clock) {
		mu.Lock()
		released = 0
		mu.Unlock()
		cr := mustCreate(t, rdb, newRun(job("a"), job("b", need("a", kiln.ResultSuccess, kiln.ResultCancelled))))
		c := claimJob(t, rdb, "agent-1", cr.Jobs["a"])
		if _, err := rdb.Runs().Cancel(ctx, cr.ID, "user", false); err != nil {
			t.Fatal(err)
		}
		// b was cancelled by the cancel itself (it was pending).
		wantStatus(t, rdb, cr.Jobs["b"], kiln.JobCancelled)
		complete(t, rdb, c, kiln.JobSuccess)
		wantRunStatus(t, rdb, cr.ID, kiln.RunCancelled)
		if released != 1 {
			t.Fatalf("releaser called %d times, want 1 (only the root)", released)
		}
	}, storetest.ReleaseWith(count))
}

// The Releaser sees upstream results and outputs and decides: queue with a
// new requirement and spec, skip, or fail.
func TestReleaser(t *testing.T) {
	var seen []store.ReadyJob
	decide := func(rj store.ReadyJob) store.Release {
		seen = append(seen, rj)
		switch rj.Name {
		case "skipme":
			return store.Release{Skip: true, SkipReason: "if: event.branch == 'main' was false"}
		case "failme":
			return store.Release{Fail: "runs_on: unknown expression"}
		case "deploy":
			v, err := rj.Needs()["build"].Output("version")
			if err != nil {
				return store.Release{Fail: err.Error()}
			}
			req := kiln.Requirement{RunsOn: kiln.NewLabels("linux", "deploy")}
			return store.Release{Requirement: &req, Spec: json.RawMessage(`{"version":"` + v + `"}`)}
		}
		return store.Release{}
	}
	suite(t, func(t *testing.T, rdb *store.DB, clock *storetest.Clock) {
		seen = nil
		cr := mustCreate(t, rdb, newRun(job("build"), job("skipme"), job("failme"), job("deploy", need("build"))))
		wantStatus(t, rdb, cr.Jobs["skipme"], kiln.JobSkipped)
		j := wantStatus(t, rdb, cr.Jobs["failme"], kiln.JobFailed)
		if j.Error != "runs_on: unknown expression" {
			t.Fatalf("fail message %q", j.Error)
		}
		c := claimJob(t, rdb, "agent-1", cr.Jobs["build"])
		if _, err := rdb.Jobs().Complete(ctx, store.Completion{Lease: lease(c), Status: kiln.JobSuccess,
			Outputs: map[string]string{"version": "1.2.3"}}); err != nil {
			t.Fatal(err)
		}
		d := wantStatus(t, rdb, cr.Jobs["deploy"], kiln.JobQueued)
		if d.Requirement.Key() != "deploy,linux" || string(d.Spec) != `{"version":"1.2.3"}` {
			t.Fatalf("deploy released with %q %s", d.Requirement.Key(), d.Spec)
		}
		last := seen[len(seen)-1]
		if last.Name != "deploy" || len(last.Upstream) != 1 || last.Upstream[0].Result != kiln.ResultSuccess ||
			last.Upstream[0].Outputs["version"] != "1.2.3" {
			t.Fatalf("ready job %+v", last)
		}
		// The plain linux agent no longer matches deploy.
		if cs, _ := rdb.Queue().Claim(ctx, "agent-1", linux, 1); len(cs) != 0 {
			t.Fatalf("claimed %+v", cs)
		}
		deployer := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "deploy")}
		if cs, _ := rdb.Queue().Claim(ctx, "agent-2", deployer, 1); len(cs) != 1 || string(cs[0].Spec) != `{"version":"1.2.3"}` {
			t.Fatalf("claimed %+v", cs)
		}
	}, storetest.ReleaseWith(decide))
}

// Outputs over a matrix group: a key every setter agrees on is defined; a
// key they disagree on fails the dependent that reads it, naming the
// children.
// Proves B25 (docs/behaviours.md).
func TestOutputsAgreement(t *testing.T) {
	decide := func(rj store.ReadyJob) store.Release {
		if rj.Base != "use" {
			return store.Release{}
		}
		n := rj.Needs()["build"]
		for _, k := range []string{"image", "arch"} {
			if _, err := n.Output(k); err != nil {
				return store.Release{Fail: err.Error()}
			}
		}
		return store.Release{}
	}
	suite(t, func(t *testing.T, rdb *store.DB, clock *storetest.Clock) {
		child := func(v string) store.NewJob {
			j := job("build (" + v + ")")
			j.Base = "build"
			return j
		}
		cr := mustCreate(t, rdb, newRun(child("amd64"), child("arm64"), child("riscv"), job("use", need("build"))))
		outputs := map[string]map[string]string{
			"build (amd64)": {"image": "app:1", "arch": "amd64"},
			"build (arm64)": {"image": "app:1", "arch": "arm64"},
			"build (riscv)": {}, // sets nothing: does not take part
		}
		for _, name := range []string{"build (amd64)", "build (arm64)", "build (riscv)"} {
			c := claimJob(t, rdb, "agent-1", cr.Jobs[name])
			if _, err := rdb.Jobs().Complete(ctx, store.Completion{Lease: lease(c), Status: kiln.JobSuccess, Outputs: outputs[name]}); err != nil {
				t.Fatal(err)
			}
		}
		j := wantStatus(t, rdb, cr.Jobs["use"], kiln.JobFailed)
		for _, want := range []string{"needs.build.outputs.arch", `"build (amd64)" set "amd64"`, `"build (arm64)" set "arm64"`} {
			if !strings.Contains(j.Error, want) {
				t.Fatalf("error %q lacks %q", j.Error, want)
			}
		}
		if !errors.Is(mergeErr(t), store.ErrInvalid) {
			t.Fatal("a disagreement is not ErrInvalid")
		}
	}, storetest.ReleaseWith(decide))
}

func mergeErr(t *testing.T) error {
	rj := store.ReadyJob{Upstream: []store.UpstreamJob{
		{Name: "b (1)", Base: "b", Result: kiln.ResultSuccess, Outputs: map[string]string{"k": "1", "same": "x"}},
		{Name: "b (2)", Base: "b", Result: kiln.ResultFailure, Outputs: map[string]string{"k": "2", "same": "x"}},
	}}
	n := rj.Needs()
	if n["b"].Result != kiln.ResultFailure || n["b (1)"].Result != kiln.ResultSuccess || n["b (2)"].Outputs["k"] != "2" {
		t.Fatalf("needs %+v", n)
	}
	if v, err := n["b"].Output("same"); v != "x" || err != nil {
		t.Fatalf("agreed key: %q %v", v, err)
	}
	if v, err := n["b"].Output("unset"); v != "" || err != nil {
		t.Fatalf("unset key: %q %v", v, err)
	}
	_, err := n["b"].Output("k")
	return err
}

// max_parallel: at most N children of a group are past pending and not
// finished; the next is released, in creation order, when one ends.
// Proves B17 (docs/behaviours.md).
func TestMaxParallelWaves(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		var jobs []store.NewJob
		for i := 1; i <= 5; i++ {
			j := job(fmt.Sprintf("test (%d)", i))
			j.Base, j.MaxParallel = "test", 2
			jobs = append(jobs, j)
		}
		cr := mustCreate(t, db, newRun(jobs...))
		status := func() string {
			var b strings.Builder
			for i := 1; i <= 5; i++ {
				b.WriteString(string(mustJob(t, db, cr.Jobs[fmt.Sprintf("test (%d)", i)]).Status)[:1])
			}
			return b.String()
		}
		if s := status(); s != "qqppp" {
			t.Fatalf("after creation: %s", s)
		}
		p := mustJob(t, db, cr.Jobs["test (3)"])
		if p.PendingReason != "waiting for a max_parallel slot" {
			t.Fatalf("pending reason %q", p.PendingReason)
		}
		c1 := claimJob(t, db, "a1", cr.Jobs["test (1)"])
		claimJob(t, db, "a2", cr.Jobs["test (2)"])
		complete(t, db, c1, kiln.JobFailed) // no fail_fast: the wave goes on
		if s := status(); s != "fdqpp" {
			t.Fatalf("after one ended: %s", s)
		}
		c3 := claimJob(t, db, "a1", cr.Jobs["test (3)"])
		if cs, _ := db.Queue().Claim(ctx, "a3", linux, 5); len(cs) != 0 {
			t.Fatalf("claimed past max_parallel: %+v", cs)
		}
		if s := status(); s != "fddpp" {
			t.Fatalf("two in flight: %s", s)
		}
		complete(t, db, c3, kiln.JobSuccess)
		if s := status(); s != "fdsqp" {
			t.Fatalf("after the third ended: %s", s)
		}
		runJob(t, db, cr.Jobs["test (4)"], kiln.JobSuccess)
		if s := status(); s != "fdssq" {
			t.Fatalf("after the fourth ended: %s", s)
		}
		wantRunStatus(t, db, cr.ID, kiln.RunRunning)
	})
}

// fail_fast: when a child fails, waiting siblings are cancelled and those on
// agents move to cancelling and come back for the caller to cancel.
// Proves B18 (docs/behaviours.md).
func TestFailFast(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		var jobs []store.NewJob
		for i := 1; i <= 4; i++ {
			j := job(fmt.Sprintf("test (%d)", i))
			j.Base, j.MaxParallel, j.FailFast = "test", 3, true
			jobs = append(jobs, j)
		}
		jobs = append(jobs, job("after", need("test")))
		cr := mustCreate(t, db, newRun(jobs...))
		c1 := claimJob(t, db, "a1", cr.Jobs["test (1)"])
		c2 := claimJob(t, db, "a2", cr.Jobs["test (2)"])
		if err := db.Jobs().Start(ctx, lease(c2)); err != nil {
			t.Fatal(err)
		}
		// test (3) queued, test (4) pending (wave), after pending.
		eff := complete(t, db, c1, kiln.JobFailed)
		if len(eff.Cancel) != 1 || eff.Cancel[0].JobID != c2.JobID || eff.Cancel[0].AgentID != "a2" || eff.Cancel[0].Epoch != c2.Epoch {
			t.Fatalf("cancel targets %+v", eff.Cancel)
		}
		wantStatus(t, db, cr.Jobs["test (2)"], kiln.JobCancelling)
		for _, n := range []string{"test (3)", "test (4)"} {
			j := wantStatus(t, db, cr.Jobs[n], kiln.JobCancelled)
			if !strings.Contains(j.Error, "fail_fast: test (1) failed") || !j.Stopped {
				t.Fatalf("%s: %q stopped=%v", n, j.Error, j.Stopped)
			}
		}
		wantStatus(t, db, cr.Jobs["after"], kiln.JobPending)
		complete(t, db, c2, kiln.JobCancelled)
		wantStatus(t, db, cr.Jobs["after"], kiln.JobSkipped)
		wantRunStatus(t, db, cr.ID, kiln.RunFailed)
	})
}
