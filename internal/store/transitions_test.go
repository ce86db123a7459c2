package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// specReleaser queues jobs with the queue timeout their spec names
// ({"queue_timeout_ms": N}), so a test can expire one job without touching
// the others, and skips jobs whose spec says {"skip": true}.
func specReleaser(rj store.ReadyJob) store.Release {
	var spec struct {
		QueueTimeoutMS int64 `json:"queue_timeout_ms"`
		Skip           bool  `json:"skip"`
	}
	_ = json.Unmarshal(rj.Spec, &spec)
	return store.Release{Skip: spec.Skip, QueueTimeout: time.Duration(spec.QueueTimeoutMS) * time.Millisecond}
}

// fixture drives isolated jobs into any status: each job asks for a label
// of its own, so claims reach exactly that job.
type fixture struct {
	t     *testing.T
	db    *store.DB
	clock *storetest.Clock
	n     int
}

type fixtureJob struct {
	id, run, agent string
	labels         kiln.AgentLabels
	lease          store.Lease
}

func (f *fixture) create(onLost store.OnAgentLost, spec string, gated bool) fixtureJob {
	f.n++
	tag := fmt.Sprintf("fx%d", f.n)
	fj := fixtureJob{agent: "agent-" + tag, labels: kiln.AgentLabels{Labels: kiln.NewLabels("linux", tag)}}
	target := store.NewJob{Name: "target", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux", tag)},
		OnAgentLost: onLost, Spec: json.RawMessage(spec), Steps: []string{"s"}}
	jobs := []store.NewJob{target}
	if gated {
		gate := store.NewJob{Name: "gate", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("nobody-" + tag)}}
		target.Needs = []store.NeedEdge{need("gate")}
		jobs = []store.NewJob{gate, target}
	}
	cr := mustCreate(f.t, f.db, newRun(jobs...))
	fj.id, fj.run = cr.Jobs["target"], cr.ID
	fj.lease = store.Lease{JobID: fj.id}
	return fj
}

func (f *fixture) claim(fj *fixtureJob) {
	cs, err := f.db.Queue().Claim(ctx, fj.agent, fj.labels, 1)
	if err != nil || len(cs) != 1 || cs[0].JobID != fj.id {
		f.t.Fatalf("fixture claim: %v %+v", err, cs)
	}
	fj.lease = lease(cs[0])
}

func (f *fixture) check(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatalf("fixture: %v", err)
	}
}

// jobIn returns a fresh job in status s.
func (f *fixture) jobIn(s kiln.JobStatus) fixtureJob {
	f.t.Helper()
	onLost := store.AgentLostRetry
	if s == kiln.JobAgentLost {
		onLost = store.AgentLostFail
	}
	spec := "{}"
	if s == kiln.JobTimedOutStale {
		spec = `{"queue_timeout_ms": 500}`
	}
	fj := f.create(onLost, spec, s == kiln.JobPending || s == kiln.JobSkipped)
	switch s {
	case kiln.JobPending, kiln.JobQueued:
	case kiln.JobSkipped:
		gate := mustRun(f.t, f.db, fj.run).Jobs[0]
		_, err := f.db.Queue().MarkUnroutable(ctx, "", gate.ID)
		f.check(err)
	case kiln.JobTimedOutStale:
		f.clock.Advance(time.Second)
		_, err := f.db.Queue().Expire(ctx, nil)
		f.check(err)
	case kiln.JobUnroutable:
		_, err := f.db.Queue().MarkUnroutable(ctx, "", fj.id)
		f.check(err)
	default:
		f.claim(&fj)
		if s == kiln.JobDispatched {
			break
		}
		f.check(f.db.Jobs().Start(ctx, fj.lease))
		switch s {
		case kiln.JobRecovering, kiln.JobAgentLost:
			_, err := f.db.Queue().AgentLost(ctx, fj.agent)
			f.check(err)
			if s == kiln.JobAgentLost {
				f.clock.Advance(store.DefaultRecoveryWindow + time.Second)
				_, err := f.db.Queue().SweepRecovery(ctx)
				f.check(err)
			}
		case kiln.JobCancelling:
			_, err := f.db.Runs().Cancel(ctx, fj.run, "test", false)
			f.check(err)
		case kiln.JobSuccess, kiln.JobFailed, kiln.JobCancelled:
			_, err := f.db.Jobs().Complete(ctx, store.Completion{Lease: fj.lease, Status: s})
			f.check(err)
		}
	}
	wantStatus(f.t, f.db, fj.id, s)
	return fj
}

// TestTransitionTable applies every job-level operation to a job in every
// status: the status it ends in is the table's, every change is legal per
// kiln.CanTransition, and every refused lease-guarded report returns
// ErrStaleLease or ErrConflict and changes nothing.
// Proves B54 (docs/behaviours.md).
func TestTransitionTable(t *testing.T) {
	type op struct {
		name string
		do   func(f *fixture, fj fixtureJob) error
		// want maps a from status to the status the op leaves; statuses not
		// listed stay as they are.
		want map[kiln.JobStatus]kiln.JobStatus
		// refuses: the op returns an error from every status it does not
		// change (lease-guarded reports).
		refuses bool
	}
	completeAs := func(s kiln.JobStatus) func(f *fixture, fj fixtureJob) error {
		return func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Jobs().Complete(ctx, store.Completion{Lease: fj.lease, Status: s})
			return err
		}
	}
	held := func(to kiln.JobStatus) map[kiln.JobStatus]kiln.JobStatus {
		return map[kiln.JobStatus]kiln.JobStatus{kiln.JobDispatched: to, kiln.JobRunning: to, kiln.JobCancelling: to}
	}
	ops := []op{
		{name: "claim", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Queue().Claim(ctx, fj.agent, fj.labels, 1)
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobQueued: kiln.JobDispatched}},
		{name: "start", do: func(f *fixture, fj fixtureJob) error { return f.db.Jobs().Start(ctx, fj.lease) },
			want:    map[kiln.JobStatus]kiln.JobStatus{kiln.JobDispatched: kiln.JobRunning, kiln.JobRunning: kiln.JobRunning, kiln.JobCancelling: kiln.JobCancelling},
			refuses: true},
		{name: "complete success", do: completeAs(kiln.JobSuccess), want: held(kiln.JobSuccess), refuses: true},
		{name: "complete failed", do: completeAs(kiln.JobFailed), want: held(kiln.JobFailed), refuses: true},
		{name: "complete cancelled", do: completeAs(kiln.JobCancelled), want: held(kiln.JobCancelled), refuses: true},
		{name: "requeue", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Queue().Requeue(ctx, fj.lease, "agent busy")
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobDispatched: kiln.JobQueued, kiln.JobCancelling: kiln.JobCancelled}, refuses: true},
		{name: "heartbeat", do: func(f *fixture, fj fixtureJob) error {
			stale, err := f.db.Jobs().Heartbeat(ctx, fj.lease)
			if err == nil && len(stale) > 0 {
				err = store.ErrStaleLease
			}
			return err
		}, want: held(""), refuses: true},
		{name: "cancel run", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Runs().Cancel(ctx, fj.run, "user", false)
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobPending: kiln.JobCancelled, kiln.JobQueued: kiln.JobCancelled,
			kiln.JobDispatched: kiln.JobCancelling, kiln.JobRunning: kiln.JobCancelling, kiln.JobRecovering: kiln.JobCancelled}},
		{name: "force cancel run", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Runs().Cancel(ctx, fj.run, "user", true)
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobPending: kiln.JobCancelled, kiln.JobQueued: kiln.JobCancelled,
			kiln.JobDispatched: kiln.JobCancelled, kiln.JobRunning: kiln.JobCancelled, kiln.JobRecovering: kiln.JobCancelled,
			kiln.JobCancelling: kiln.JobCancelled}},
		{name: "agent lost", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Queue().AgentLost(ctx, fj.agent)
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobDispatched: kiln.JobRecovering, kiln.JobRunning: kiln.JobRecovering,
			kiln.JobCancelling: kiln.JobCancelled}},
		{name: "reconnect", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Queue().Reconnect(ctx, fj.agent, []store.Lease{fj.lease})
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobRecovering: kiln.JobRunning}},
		{name: "mark unroutable", do: func(f *fixture, fj fixtureJob) error {
			_, err := f.db.Queue().MarkUnroutable(ctx, "", fj.id)
			return err
		}, want: map[kiln.JobStatus]kiln.JobStatus{kiln.JobQueued: kiln.JobUnroutable}},
	}
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		f := &fixture{t: t, db: db, clock: clock}
		for _, o := range ops {
			for _, from := range kiln.JobStatuses {
				fj := f.jobIn(from)
				before := mustJob(t, f.db, fj.id)
				err := o.do(f, fj)
				after := mustJob(t, f.db, fj.id)
				want, listed := o.want[from]
				if !listed || want == "" {
					want = from
				}
				if after.Status != want {
					t.Errorf("%s from %s: job is %s, want %s (err %v)", o.name, from, after.Status, want, err)
				}
				if after.Status != from && !kiln.CanTransition(from, after.Status) &&
					!(from == kiln.JobDispatched || from == kiln.JobRunning) { // force cancel passes through cancelling
					t.Errorf("%s from %s: %s → %s is not a legal transition", o.name, from, from, after.Status)
				}
				changed := listed
				switch {
				case (o.name == "cancel run" || o.name == "force cancel run") && from.Terminal():
					if !errors.Is(err, store.ErrConflict) {
						t.Errorf("cancel of a finished run: err %v, want ErrConflict", err)
					}
				case o.refuses && !changed:
					if !errors.Is(err, store.ErrStaleLease) && !errors.Is(err, store.ErrConflict) {
						t.Errorf("%s from %s: err %v, want ErrStaleLease or ErrConflict", o.name, from, err)
					}
					if after.LeaseEpoch != before.LeaseEpoch || after.LastHeartbeatAt != before.LastHeartbeatAt {
						t.Errorf("%s from %s: a refused report changed the job", o.name, from)
					}
				case err != nil && !(o.name == "cancel run" && from == kiln.JobCancelling):
					t.Errorf("%s from %s: %v", o.name, from, err)
				}
			}
		}
	}, storetest.ReleaseWith(specReleaser))
}

// A lease-guarded report under an old epoch is refused with ErrStaleLease
// and changes nothing, even though the job is in a status that would accept
// it under the current epoch.
// Proves B54 (docs/behaviours.md).
func TestStaleLeaseRefused(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("build")))
		id := cr.Jobs["build"]
		old := claimJob(t, db, "agent-old", id)
		if _, err := db.Queue().Requeue(ctx, lease(old), "agent busy"); err != nil {
			t.Fatal(err)
		}
		cur := claimJob(t, db, "agent-new", id)
		if cur.Epoch != old.Epoch+1 || cur.Attempt != 2 {
			t.Fatalf("second claim: epoch %d attempt %d (first %d)", cur.Epoch, cur.Attempt, old.Epoch)
		}
		checks := map[string]func() error{
			"start": func() error { return db.Jobs().Start(ctx, lease(old)) },
			"ack":   func() error { return db.Jobs().Ack(ctx, lease(old)) },
			"complete": func() error {
				_, err := db.Jobs().Complete(ctx, store.Completion{Lease: lease(old), Status: kiln.JobSuccess})
				return err
			},
			"steps": func() error {
				return db.Jobs().UpdateSteps(ctx, lease(old), store.StepUpdate{Index: 0, Status: kiln.StepRunning})
			},
			"requeue": func() error { _, err := db.Queue().Requeue(ctx, lease(old), "x"); return err },
		}
		for name, fn := range checks {
			if err := fn(); !errors.Is(err, store.ErrStaleLease) {
				t.Errorf("%s with the old epoch: err %v, want ErrStaleLease", name, err)
			}
		}
		stale, err := db.Jobs().Heartbeat(ctx, lease(old), lease(cur))
		if err != nil || len(stale) != 1 || stale[0] != lease(old) {
			t.Fatalf("heartbeat: stale %v err %v", stale, err)
		}
		j := wantStatus(t, db, id, kiln.JobDispatched)
		if j.AgentID != "agent-new" || j.LeaseEpoch != cur.Epoch {
			t.Fatalf("job after refused reports: agent %s epoch %d", j.AgentID, j.LeaseEpoch)
		}
		if j.Steps[0].Status != kiln.StepPending {
			t.Fatalf("a refused step update was written: %+v", j.Steps[0])
		}
		if kiln.ErrorCode(errors.Join(db.Jobs().Start(ctx, lease(old)))) != kiln.CodeConflict {
			t.Fatal("ErrStaleLease does not carry the conflict code")
		}
		// The current lease still works.
		if err := db.Jobs().Start(ctx, lease(cur)); err != nil {
			t.Fatal(err)
		}
		complete(t, db, cur, kiln.JobSuccess)
	})
}
