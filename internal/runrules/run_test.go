package runrules

import (
	"slices"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// sim is the store's settle loop over one in-memory run, with the store's
// queries replaced by scans of a slice: the rules working together, with no
// database. Released jobs are simply queued (no Releaser).
type sim struct {
	t         *testing.T
	jobs      []*simJob
	cancelled bool // a cancel was requested for the run
}

type simJob struct {
	name, base  string
	status      kiln.JobStatus
	needs       []Need
	maxParallel int
	failFast    bool
	ready       bool
}

func (s *sim) job(name string) *simJob {
	for _, j := range s.jobs {
		if j.name == name {
			return j
		}
	}
	s.t.Fatalf("no job %q", name)
	return nil
}

func (s *sim) ended(j *simJob) Ended {
	deps := slices.ContainsFunc(s.jobs, func(o *simJob) bool {
		return slices.ContainsFunc(o.needs, func(n Need) bool { return n.Job == j.base })
	})
	return Ended{ID: j.name, RunID: "r", Name: j.name, Base: j.base, Status: j.status, MaxParallel: j.maxParallel, FailFast: j.failFast, HasDependents: deps}
}

// start releases the roots, as run creation does.
func (s *sim) start() {
	waves := Waves{}
	for _, j := range s.jobs {
		switch {
		case len(j.needs) > 0:
		case j.maxParallel > 0:
			j.ready = true
			waves.Add(Group{"r", j.base}, j.maxParallel)
		default:
			j.status = kiln.JobQueued
		}
	}
	s.fill(waves)
}

// end ends a job and settles what follows.
func (s *sim) end(name string, st kiln.JobStatus) {
	j := s.job(name)
	j.status = st
	batch := []Ended{s.ended(j)}
	for len(batch) > 0 {
		c := AfterEnded(batch)
		batch = nil
		move := func(j *simJob, to kiln.JobStatus) {
			if !kiln.CanTransition(j.status, to) {
				s.t.Fatalf("%s: %s → %s is not legal", j.name, j.status, to)
			}
			j.status = to
			if to.Terminal() {
				batch = append(batch, s.ended(j))
			}
		}
		for _, f := range c.FailFast {
			for _, o := range s.jobs {
				if o.base != f.Base || o.name == f.ID {
					continue
				}
				switch StopFor(o.status) {
				case StopNow:
					move(o, kiln.JobCancelled)
				case StopAsk:
					move(o, kiln.JobCancelling)
				}
			}
		}
		for _, g := range c.Dependents {
			if slices.ContainsFunc(s.jobs, func(o *simJob) bool { return o.base == g.Base && !o.status.Terminal() }) {
				continue
			}
			for _, d := range s.jobs {
				if d.status != kiln.JobPending || d.ready || !slices.ContainsFunc(d.needs, func(n Need) bool { return n.Job == g.Base }) {
					continue
				}
				p := Pending{Needs: d.needs, MaxParallel: d.maxParallel, RunCancelled: s.cancelled}
				for _, o := range s.jobs {
					if slices.ContainsFunc(d.needs, func(n Need) bool { return n.Job == o.base }) {
						p.Upstream = append(p.Upstream, Upstream{o.name, o.base, o.status})
					}
				}
				switch v, _ := DecideDependent(p); v {
				case CancelledWithRun:
					move(d, kiln.JobCancelled)
				case Unmet:
					move(d, kiln.JobSkipped)
				case HoldForSlot:
					d.ready = true
					c.Waves.Add(Group{"r", d.base}, d.maxParallel)
				case Release:
					move(d, kiln.JobQueued)
				}
			}
		}
		s.fill(c.Waves)
	}
}

func (s *sim) fill(w Waves) {
	for _, g := range w.Groups() {
		holding := 0
		for _, o := range s.jobs {
			if o.base == g.Base && HoldsSlot(o.status) {
				holding++
			}
		}
		free := FreeSlots(w[g], holding)
		for _, o := range s.jobs {
			if free > 0 && o.base == g.Base && o.status == kiln.JobPending && o.ready {
				o.status, free = kiln.JobQueued, free-1
			}
		}
	}
}

// statuses spells each job's status by its first letter (cancelling: C).
func (s *sim) statuses() string {
	var b strings.Builder
	for _, j := range s.jobs {
		if j.status == kiln.JobCancelling {
			b.WriteByte('C')
		} else {
			b.WriteByte(string(j.status)[0])
		}
	}
	return b.String()
}

func (s *sim) want(step, statuses string) {
	s.t.Helper()
	if got := s.statuses(); got != statuses {
		s.t.Fatalf("%s: %s, want %s", step, got, statuses)
	}
}

func (s *sim) rollUp() kiln.RunStatus {
	var st []kiln.JobStatus
	for _, j := range s.jobs {
		st = append(st, j.status)
	}
	r, ok := kiln.RollUp(st)
	if !ok {
		s.t.Fatalf("roll-up of an unfinished run: %s", s.statuses())
	}
	return r
}

func plain(name string, needs ...Need) *simJob {
	return &simJob{name: name, base: name, status: kiln.JobPending, needs: needs}
}

func need(job string, when ...kiln.Result) Need {
	if len(when) == 0 {
		when = []kiln.Result{success}
	}
	return Need{job, when}
}

// A failure skips its dependents and theirs in turn; `when:` sets that
// accept failure or skipped run instead (B14).
func TestSkipCascade(t *testing.T) {
	s := &sim{t: t, jobs: []*simJob{
		plain("build"),
		plain("test", need("build")),
		plain("deploy", need("test")),
		plain("notify", need("deploy", skipped)),
		plain("cleanup", need("build", failure)),
		plain("always", need("test", success, failure, cancelled, skipped)),
	}}
	s.start()
	s.want("start", "qppppp")
	s.end("build", kiln.JobFailed)
	s.want("build failed", "fssqqq")
	if r := s.job("deploy"); r.status != kiln.JobSkipped {
		t.Fatalf("deploy %s", r.status)
	}
	s.end("cleanup", kiln.JobSuccess)
	s.end("always", kiln.JobSuccess)
	s.end("notify", kiln.JobSuccess)
	if r := s.rollUp(); r != kiln.RunFailed {
		t.Fatalf("run %s", r)
	}
}

// max_parallel: the group releases at most N children at once, in creation
// order, and the next as each ends — failed or not, without fail_fast (B17).
func TestWaves(t *testing.T) {
	s := &sim{t: t}
	for _, n := range []string{"t (1)", "t (2)", "t (3)", "t (4)", "t (5)"} {
		s.jobs = append(s.jobs, &simJob{name: n, base: "t", status: kiln.JobPending, maxParallel: 2})
	}
	s.jobs = append(s.jobs, plain("after", need("t", success, failure)))
	s.start()
	s.want("start", "qqpppp")
	s.end("t (1)", kiln.JobFailed)
	s.want("one failed", "fqqppp")
	s.end("t (3)", kiln.JobSuccess)
	s.want("third ended", "fqsqpp")
	s.end("t (2)", kiln.JobSuccess)
	s.end("t (4)", kiln.JobSuccess)
	s.want("four ended", "fsssqp")
	s.end("t (5)", kiln.JobSuccess)
	s.want("group ended", "fssssq")
}

// A dependent of a max_parallel group waits in its own group's waves.
func TestWaveOfDependents(t *testing.T) {
	s := &sim{t: t, jobs: []*simJob{plain("build")}}
	for _, n := range []string{"t (1)", "t (2)", "t (3)"} {
		s.jobs = append(s.jobs, &simJob{name: n, base: "t", status: kiln.JobPending, maxParallel: 1, needs: []Need{need("build")}})
	}
	s.start()
	s.want("start", "qppp")
	s.end("build", kiln.JobSuccess)
	s.want("build ended", "sqpp")
	s.end("t (1)", kiln.JobSuccess)
	s.want("next wave", "ssqp")
}

// fail_fast: a failed child stops its siblings — waiting ones at once, those
// on agents through cancelling — and the group's dependents wait for the
// last of them (B18).
func TestFailFast(t *testing.T) {
	for _, failFast := range []bool{true, false} {
		s := &sim{t: t}
		for _, n := range []string{"t (1)", "t (2)", "t (3)", "t (4)"} {
			s.jobs = append(s.jobs, &simJob{name: n, base: "t", status: kiln.JobPending, maxParallel: 3, failFast: failFast})
		}
		s.jobs = append(s.jobs, plain("after", need("t")))
		s.start()
		s.job("t (2)").status = kiln.JobRunning
		s.job("t (3)").status = kiln.JobRecovering
		s.end("t (1)", kiln.JobFailed)
		if !failFast {
			s.want("no fail_fast", "frrqp")
			continue
		}
		s.want("fail_fast", "fCccp")
		s.end("t (2)", kiln.JobCancelled)
		s.want("last sibling ended", "fcccs")
		if r := s.rollUp(); r != kiln.RunFailed {
			t.Fatalf("run %s", r)
		}
	}
}

// A run being cancelled cancels the dependents its ending jobs would have
// released.
func TestDependentsOfACancelledRun(t *testing.T) {
	s := &sim{t: t, jobs: []*simJob{plain("a"), plain("b", need("a")), plain("c", need("b"))}}
	s.start()
	s.cancelled = true
	s.end("a", kiln.JobSuccess)
	s.want("cancelled", "scc")
	if r := s.rollUp(); r != kiln.RunCancelled {
		t.Fatalf("run %s", r)
	}
}

// The run's result: any failure fails it, else any cancellation cancels it,
// else it succeeded — skipped jobs included, even all of them.
func TestRunRollUp(t *testing.T) {
	for _, c := range []struct {
		jobs []kiln.JobStatus
		want kiln.RunStatus
	}{
		{[]kiln.JobStatus{kiln.JobSuccess}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSkipped}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSkipped, kiln.JobSkipped}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobSkipped}, kiln.RunSuccess},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobCancelled}, kiln.RunCancelled},
		{[]kiln.JobStatus{kiln.JobSkipped, kiln.JobCancelled}, kiln.RunCancelled},
		{[]kiln.JobStatus{kiln.JobCancelled, kiln.JobFailed}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobSuccess, kiln.JobTimedOutStale}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobCancelled, kiln.JobUnroutable, kiln.JobSkipped}, kiln.RunFailed},
		{[]kiln.JobStatus{kiln.JobAgentLost}, kiln.RunFailed},
	} {
		if got, ok := kiln.RollUp(c.jobs); !ok || got != c.want {
			t.Errorf("RollUp(%v) = %s %v, want %s", c.jobs, got, ok, c.want)
		}
	}
	if _, ok := kiln.RollUp([]kiln.JobStatus{kiln.JobSuccess, kiln.JobCancelling}); ok {
		t.Error("a run with a job cancelling rolled up")
	}
}
