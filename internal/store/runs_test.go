package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestRollUpTable ends the jobs of a run as the table says and checks the
// run's final status against kiln.RollUp and the expected value; the run
// stays unfinished until its last job ends.
// Proves B26 (docs/behaviours.md).
func TestRollUpTable(t *testing.T) {
	cases := []struct {
		ends []kiln.JobStatus
		want kiln.RunStatus
	}{
		{[]kiln.JobStatus{kiln.JobSuccess}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobSkipped}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSkipped}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobFailed}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobCancelled, kiln.JobFailed}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobCancelled}, kiln.RunCancelled},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobTimedOutStale}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobCancelled, kiln.JobUnroutable}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobSkipped, kiln.JobAgentLost}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobSkipped, kiln.JobCancelled}, kiln.RunCancelled},
	}
	suite(t, func(t *testing.T, rdb *store.DB, clock *storetest.Clock) {
		for n, c := range cases {
			if got, ok := kiln.RollUp(c.ends); !ok || got != c.want {
				t.Fatalf("kiln.RollUp(%v) = %s, the table says %s", c.ends, got, c.want)
			}
			// Each job asks for a label of its own so claims reach it.
			label := func(i int) string { return fmt.Sprintf("rollup-%d-%d", n, i) }
			var jobs []store.NewJob
			for i, s := range c.ends {
				j := store.NewJob{Name: fmt.Sprintf("j%d", i), Requirement: kiln.Requirement{RunsOn: kiln.NewLabels(label(i))}}
				switch s {
				case kiln.JobAgentLost:
					j.OnAgentLost = store.AgentLostFail
				case kiln.JobTimedOutStale:
					j.Spec = []byte(`{"queue_timeout_ms": 500}`)
				case kiln.JobSkipped:
					j.Spec = []byte(`{"skip": true}`)
				}
				jobs = append(jobs, j)
			}
			cr := mustCreate(t, rdb, newRun(jobs...))
			for i, s := range c.ends {
				if r := mustRun(t, rdb, cr.ID); r.Status.Terminal() && !allSkipped(c.ends[i:]) {
					t.Fatalf("%v: run ended %s before job %d", c.ends, r.Status, i)
				}
				id := cr.Jobs[fmt.Sprintf("j%d", i)]
				switch s {
				case kiln.JobSkipped: // skipped at creation
				case kiln.JobUnroutable:
					if _, err := rdb.Queue().MarkUnroutable(ctx, "", id); err != nil {
						t.Fatal(err)
					}
				case kiln.JobTimedOutStale:
					clock.Advance(time.Second)
					if _, err := rdb.Queue().Expire(ctx, nil); err != nil {
						t.Fatal(err)
					}
				default:
					cs, err := rdb.Queue().Claim(ctx, "agent", kiln.AgentLabels{Labels: kiln.NewLabels(label(i))}, 1)
					if err != nil || len(cs) != 1 {
						t.Fatalf("claim %v %v", cs, err)
					}
					if err := rdb.Jobs().Start(ctx, lease(cs[0])); err != nil {
						t.Fatal(err)
					}
					if s == kiln.JobAgentLost {
						if _, err := rdb.Queue().AgentLost(ctx, "agent"); err != nil {
							t.Fatal(err)
						}
						clock.Advance(store.DefaultRecoveryWindow + time.Second)
						if _, err := rdb.Queue().SweepRecovery(ctx); err != nil {
							t.Fatal(err)
						}
						break
					}
					if _, err := rdb.Jobs().Complete(ctx, store.Completion{Lease: lease(cs[0]), Status: s}); err != nil {
						t.Fatal(err)
					}
				}
				wantStatus(t, rdb, id, s)
			}
			r := mustRun(t, rdb, cr.ID)
			if r.Status != c.want || r.FinishedAt.IsZero() {
				t.Errorf("%v: run %s (finished %v), want %s", c.ends, r.Status, r.FinishedAt, c.want)
			}
		}
	}, storetest.ReleaseWith(specReleaser))
}

func allSkipped(ss []kiln.JobStatus) bool {
	for _, s := range ss {
		if s != kiln.JobSkipped {
			return false
		}
	}
	return true
}

// Skipped jobs in the roll-up: a run whose jobs are all skipped by their
// `if:` ends success at creation.
func TestRollUpSkippedAtCreation(t *testing.T) {
	suite(t, func(t *testing.T, skip *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, skip, newRun(job("a"), job("b", need("a", kiln.ResultSkipped))))
		if len(cr.Runs) != 1 || cr.Runs[0].Status != kiln.RunSuccess || cr.Runs[0].Number != cr.Number {
			t.Fatalf("effects %+v", cr.Effects)
		}
		r := wantRunStatus(t, skip, cr.ID, kiln.RunSuccess)
		if r.Jobs[1].Error != "if: condition was false" {
			t.Fatalf("b: %q", r.Jobs[1].Error)
		}
		// An empty run is done at once.
		cr = mustCreate(t, skip, newRun())
		wantRunStatus(t, skip, cr.ID, kiln.RunSuccess)
	}, storetest.ReleaseWith(func(store.ReadyJob) store.Release { return store.Release{Skip: true} }))
}

// Creating a run hands each root job to the Releaser once, with the run's
// number, before its row is written: the job is written queued with the
// Releaser's requirement, spec and queue timeout, or ended with its
// reason and its steps skipped. Jobs with needs and max_parallel groups
// wait for their turn.
func TestRootsAreReleasedAsTheyAreWritten(t *testing.T) {
	var seen []store.ReadyJob
	decide := func(rj store.ReadyJob) store.Release {
		seen = append(seen, rj)
		switch rj.Name {
		case "never":
			return store.Release{Skip: true, SkipReason: "if: false"}
		case "broken":
			return store.Release{Fail: "env.X: bad expression"}
		}
		req := kiln.Requirement{RunsOn: kiln.NewLabels("linux", "big")}
		return store.Release{Requirement: &req, QueueTimeout: time.Minute,
			Spec: json.RawMessage(fmt.Sprintf(`{"run":%d,"was":%s}`, rj.RunNumber, rj.Spec))}
	}
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		seen = nil
		root := job("root")
		root.Spec = json.RawMessage(`{"v":1}`)
		wave := job("wave")
		wave.MaxParallel = 1
		cr := mustCreate(t, db, newRun(root, job("never"), job("broken"), wave, job("after", need("root"))))
		var names []string
		for _, rj := range seen {
			names = append(names, rj.Name)
			if rj.RunNumber != cr.Number || rj.RunID != cr.ID || rj.ID != cr.Jobs[rj.Name] {
				t.Fatalf("ready job %+v of run #%d %s", rj, cr.Number, cr.ID)
			}
		}
		if strings.Join(names, ",") != "root,never,broken,wave" {
			t.Fatalf("released %v, want root, never, broken, then the wave", names)
		}
		j := wantStatus(t, db, cr.Jobs["root"], kiln.JobQueued)
		want := fmt.Sprintf(`{"run":%d,"was":{"v":1}}`, cr.Number)
		if string(j.Spec) != want || j.Requirement.Key() != "big,linux" || j.PendingReason != store.ReasonWaiting ||
			!j.QueuedAt.Equal(clock.Now()) || !j.ExpiresAt.Equal(clock.Now().Add(time.Minute)) {
			t.Fatalf("root: spec %s key %q reason %q queued %v expires %v", j.Spec, j.Requirement.Key(), j.PendingReason, j.QueuedAt, j.ExpiresAt)
		}
		for name, msg := range map[string]string{"never": "if: false", "broken": "env.X: bad expression"} {
			j := mustJob(t, db, cr.Jobs[name])
			if !j.Status.Terminal() || j.Error != msg || j.FinishedAt.IsZero() {
				t.Fatalf("%s: %s %q", name, j.Status, j.Error)
			}
			for _, st := range j.Steps {
				if st.Status != kiln.StepSkipped {
					t.Fatalf("%s: step %s is %s, want skipped", name, st.Name, st.Status)
				}
			}
		}
		wantStatus(t, db, cr.Jobs["wave"], kiln.JobQueued)
		wantStatus(t, db, cr.Jobs["after"], kiln.JobPending)
		var queued, finished []string
		for _, r := range cr.Queued {
			queued = append(queued, r.Name)
		}
		for _, r := range cr.Finished {
			finished = append(finished, r.Name)
		}
		sort.Strings(queued)
		sort.Strings(finished)
		if strings.Join(queued, ",") != "root,wave" || strings.Join(finished, ",") != "broken,never" {
			t.Fatalf("effects: queued %v finished %v", queued, finished)
		}
	}, storetest.ReleaseWith(decide))
}

// Run status over its life: pending, running at the first claim, success.
func TestRunLifecycle(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		wantRunStatus(t, db, cr.ID, kiln.RunPending)
		clock.Advance(sec(3))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		if !c.RunStarted {
			t.Fatal("the first claim did not report the run started")
		}
		r := wantRunStatus(t, db, cr.ID, kiln.RunRunning)
		if !r.StartedAt.Equal(clock.Now()) {
			t.Fatalf("started at %v, want %v", r.StartedAt, clock.Now())
		}
		c2 := claimJob(t, db, "agent-2", cr.Jobs["b"])
		if c2.RunStarted {
			t.Fatal("the second claim reported the run started again")
		}
		complete(t, db, c, kiln.JobSuccess)
		wantRunStatus(t, db, cr.ID, kiln.RunRunning)
		clock.Advance(sec(5))
		eff := complete(t, db, c2, kiln.JobSuccess)
		if len(eff.Runs) != 1 || eff.Runs[0].Status != kiln.RunSuccess {
			t.Fatalf("effects %+v", eff)
		}
		r = wantRunStatus(t, db, cr.ID, kiln.RunSuccess)
		if !r.FinishedAt.Equal(clock.Now()) {
			t.Fatalf("finished at %v", r.FinishedAt)
		}
	})
}

func TestCreateRunRejectsBadInput(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		bad := map[string]store.NewRun{
			"no workflow":    {Jobs: []store.NewJob{job("a")}},
			"unnamed job":    newRun(store.NewJob{}),
			"duplicate name": newRun(job("a"), job("a")),
			"unknown need":   newRun(job("a", need("nope"))),
			"self need":      newRun(job("a", need("a"))),
			"twice":          newRun(job("a"), job("b", need("a"), need("a"))),
			"cycle":          newRun(job("a", need("c")), job("b", need("a")), job("c", need("b"))),
			"bad result":     newRun(job("a"), job("b", need("a", "maybe"))),
			"bad on_lost":    newRun(store.NewJob{Name: "a", OnAgentLost: "pray"}),
			"bad parallel":   newRun(store.NewJob{Name: "a", MaxParallel: -1}),
		}
		for name, nr := range bad {
			_, err := db.Runs().Create(ctx, nr)
			if !errors.Is(err, store.ErrInvalid) || kiln.ErrorCode(err) != kiln.CodeInvalid {
				t.Errorf("%s: err %v, want ErrInvalid", name, err)
			}
		}
		if runs, _ := db.Runs().List(ctx, store.RunFilter{}); len(runs) != 0 {
			t.Fatalf("a rejected run was stored: %+v", runs)
		}
		_, err := db.Runs().Create(ctx, newRun(job("a", need("c")), job("b", need("a")), job("c", need("b"))))
		if !strings.Contains(kiln.ErrorMessage(err), "a → c → b → a") {
			t.Fatalf("cycle message %q", kiln.ErrorMessage(err))
		}
	})
}

func TestRunReads(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		var ids []string
		for i := 0; i < 5; i++ {
			nr := newRun(job("a"))
			if i%2 == 1 {
				nr.Workflow, nr.Repository = "release", "acme/other"
			}
			nr.WorkflowHash, nr.WorkflowContent = "h1", []byte("name: ci\n")
			nr.Timeout = time.Duration(i+1) * time.Minute
			cr := mustCreate(t, db, nr)
			if cr.Number != int64(i+1) {
				t.Fatalf("run %d got number %d", i, cr.Number)
			}
			ids = append(ids, cr.ID)
		}
		r, err := db.Runs().GetByNumber(ctx, 3)
		if err != nil || r.ID != ids[2] || len(r.Jobs) != 1 || len(r.Jobs[0].Steps) != 2 || r.Jobs[0].Steps[1].Name != "build" {
			t.Fatalf("get by number: %+v %v", r, err)
		}
		if string(r.Event) != `{"name":"push"}` || r.Ref != "refs/heads/main" || r.Deadline != clock.Now().Add(3*time.Minute) {
			t.Fatalf("run fields %+v", r)
		}
		if _, err := db.Runs().GetByNumber(ctx, 99); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing run: %v", err)
		}
		all, _ := db.Runs().List(ctx, store.RunFilter{})
		if len(all) != 5 || all[0].Number != 5 || all[4].Number != 1 {
			t.Fatalf("list order %+v", all)
		}
		page, _ := db.Runs().List(ctx, store.RunFilter{Before: 4, Limit: 2})
		if len(page) != 2 || page[0].Number != 3 || page[1].Number != 2 {
			t.Fatalf("page %+v", page)
		}
		rel, _ := db.Runs().List(ctx, store.RunFilter{Workflow: "release"})
		other, _ := db.Runs().List(ctx, store.RunFilter{Repository: "acme/other", Status: kiln.RunPending})
		if len(rel) != 2 || len(other) != 2 {
			t.Fatalf("filters: %d %d", len(rel), len(other))
		}
		content, err := db.Runs().WorkflowDefinition(ctx, "h1")
		if err != nil || string(content) != "name: ci\n" {
			t.Fatalf("definition %q %v", content, err)
		}
		clock.Advance(150 * time.Second)
		over, err := db.Runs().Overdue(ctx, 0)
		if err != nil || len(over) != 2 || over[0].ID != ids[0] || over[1].ID != ids[1] {
			t.Fatalf("overdue %+v %v", over, err)
		}
		if _, err := db.Runs().Cancel(ctx, ids[0], "workflow timeout", false); err != nil {
			t.Fatal(err)
		}
		over, _ = db.Runs().Overdue(ctx, 0)
		if len(over) != 1 || over[0].ID != ids[1] {
			t.Fatalf("overdue after the cancel %+v", over)
		}
	})
}

// TestRunHeaderIsTheRunWithoutJobs: Header answers the run's own fields
// (what the dispatcher needs per claimed job) without loading its jobs.
func TestRunHeaderIsTheRunWithoutJobs(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		full := mustRun(t, db, cr.ID)
		h, err := db.Runs().Header(ctx, cr.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Jobs) != 0 || len(full.Jobs) != 2 {
			t.Fatalf("header has %d jobs, the full run %d; want 0 and 2", len(h.Jobs), len(full.Jobs))
		}
		if h.ID != full.ID || h.Source != full.Source || h.Repository != full.Repository || h.Status != full.Status {
			t.Fatalf("header %+v differs from the run %+v", h, full)
		}
		if _, err := db.Runs().Header(ctx, "no-such-run"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown run: %v, want not found", err)
		}
	})
}

// A job's start moves its run to running when the claim left it pending
// (a PostgreSQL claim that skipped the locked run row, or a coordinator
// that died between the two statements), and leaves a running run alone;
// the start is one statement that reads the run's status with the move.
// Proves B252 (docs/behaviours.md).
func TestStartMovesARunStillPendingToRunning(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		c2 := claimJob(t, db, "agent-2", cr.Jobs["b"])
		unstartRun(t, db, cr.ID)
		clock.Advance(sec(2))
		if err := db.Jobs().Start(ctx, lease(c)); err != nil {
			t.Fatal(err)
		}
		r := wantRunStatus(t, db, cr.ID, kiln.RunRunning)
		if !r.StartedAt.Equal(clock.Now()) {
			t.Fatalf("started at %v, want %v", r.StartedAt, clock.Now())
		}
		clock.Advance(sec(2))
		if err := db.Jobs().Start(ctx, lease(c2)); err != nil {
			t.Fatal(err)
		}
		if r := wantRunStatus(t, db, cr.ID, kiln.RunRunning); !r.StartedAt.Equal(clock.Now().Add(-sec(2))) {
			t.Fatalf("a second start moved the run's start to %v", r.StartedAt)
		}
		// Repeated, and with a stale lease.
		if err := db.Jobs().Start(ctx, lease(c)); err != nil {
			t.Fatalf("a repeated start: %v", err)
		}
		if err := db.Jobs().Start(ctx, store.Lease{JobID: c.JobID, Epoch: c.Epoch + 1}); !errors.Is(err, store.ErrStaleLease) {
			t.Fatalf("a stale start: %v, want a stale lease", err)
		}
	})
}

// A run's steps are counted by status across its jobs, and only its own:
// another run's steps do not count.
func TestStepCountsCountsTheRunsStepsByStatus(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		mustCreate(t, db, newRun(job("other")))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		code := 0
		if err := db.Jobs().UpdateSteps(ctx, lease(c), store.StepUpdate{Index: 0, Status: kiln.StepSuccess, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
		got, err := db.Runs().StepCounts(ctx, cr.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[kiln.StepStatus]int{kiln.StepSuccess: 1, kiln.StepPending: 3}
		if !maps.Equal(got, want) {
			t.Fatalf("step counts %v, want %v", got, want)
		}
	})
}
