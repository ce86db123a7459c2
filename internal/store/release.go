package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// ReasonWaiting is the pending reason a job gets when it enters the queue;
// the dispatcher replaces it with what it knows (see the Reason functions).
const ReasonWaiting = "waiting for an agent"

// ReadyJob is a job whose needs are met, handed to the Releaser inside the
// transaction that made it ready. A root job is handed over in the
// transaction that creates its run, before its row is written: it is
// written once, as the Releaser decided.
type ReadyJob struct {
	ID          string
	RunID       string
	RunNumber   int64
	Name        string
	Base        string
	Matrix      json.RawMessage
	Spec        json.RawMessage
	Requirement kiln.Requirement // as given at creation
	// Upstream are the children of every group the job needs, in creation
	// order, with their results and outputs.
	Upstream []UpstreamJob
}

// UpstreamJob is one finished job a ReadyJob needed.
type UpstreamJob struct {
	ID      string
	Name    string
	Base    string
	Status  kiln.JobStatus
	Result  kiln.Result
	Outputs map[string]string
}

// Release is the Releaser's decision about a ReadyJob: Fail (⇒ failed with
// that message), else Skip (⇒ skipped), else queue it.
type Release struct {
	Fail       string
	Skip       bool
	SkipReason string // default defaultSkipReason
	// Requirement replaces the one given at creation (nil: keep it).
	Requirement *kiln.Requirement
	// QueueTimeout is how long the job may wait for an agent (0:
	// Config.QueueTimeout; negative: no expiry).
	QueueTimeout time.Duration
	// Spec replaces the job's spec (nil: keep it), e.g. with runs_on, env
	// and container evaluated.
	Spec json.RawMessage
}

// defaultSkipReason is a skipped job's error when the Releaser gave none.
const defaultSkipReason = "if: condition was false"

// Releaser decides what happens to a job whose needs are met: evaluate its
// `if:`, `runs_on` and other release-time expressions and return a Release.
// It runs inside the store's write transaction (which may be rerun on a
// PostgreSQL deadlock), so it must be quick, pure and free of I/O — above
// all it must not call the store.
type Releaser func(ReadyJob) Release

// NeedContext is `needs.<job>` as a dependent sees it: the group's result
// and its outputs merged with the matrix agreement rule.
type NeedContext struct {
	Result  kiln.Result
	Outputs map[string]string
	// Conflicts maps each output key the children disagree on to a message
	// naming them; reading such a key must fail the dependent.
	Conflicts map[string]string
}

// Output returns needs.<job>.outputs.<key>: "" when no child set it, an
// error naming the children when they disagree.
func (n NeedContext) Output(key string) (string, error) {
	if msg, ok := n.Conflicts[key]; ok {
		return "", invalid("%s", msg)
	}
	return n.Outputs[key], nil
}

// Needs returns the `needs` context of a ReadyJob: one entry per upstream
// base (a matrix group merged) and one per matrix child name (for
// needs['test (1.26)']).
func (r ReadyJob) Needs() map[string]NeedContext {
	groups := map[string][]UpstreamJob{}
	var order []string
	for _, u := range r.Upstream {
		if _, ok := groups[u.Base]; !ok {
			order = append(order, u.Base)
		}
		groups[u.Base] = append(groups[u.Base], u)
	}
	out := make(map[string]NeedContext, len(r.Upstream)+len(groups))
	for _, u := range r.Upstream {
		out[u.Name] = NeedContext{Result: u.Result, Outputs: u.Outputs}
	}
	for _, base := range order {
		out[base] = mergeNeed(base, groups[base])
	}
	return out
}

// mergeNeed applies the agreement rule: KEY is defined when every child
// that set it set the same value.
func mergeNeed(base string, children []UpstreamJob) NeedContext {
	n := NeedContext{Result: groupResult(children), Outputs: map[string]string{}}
	setters := map[string][]UpstreamJob{}
	for _, c := range children {
		for k := range c.Outputs {
			setters[k] = append(setters[k], c)
		}
	}
	for k, cs := range setters {
		v := cs[0].Outputs[k]
		agree := true
		for _, c := range cs[1:] {
			if c.Outputs[k] != v {
				agree = false
			}
		}
		if agree {
			n.Outputs[k] = v
			continue
		}
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = fmt.Sprintf("%q set %q", c.Name, c.Outputs[k])
		}
		sort.Strings(parts)
		if n.Conflicts == nil {
			n.Conflicts = map[string]string{}
		}
		n.Conflicts[k] = fmt.Sprintf("needs.%s.outputs.%s is ambiguous: the matrix children disagree (%s)", base, k, strings.Join(parts, ", "))
	}
	return n
}

// groupResult is the result of a matrix group: failure if any child
// failed, else cancelled if any was cancelled, else skipped if all were
// skipped, else success.
func groupResult(children []UpstreamJob) kiln.Result {
	failed, cancelled, skipped := false, false, 0
	for _, c := range children {
		switch c.Result {
		case kiln.ResultFailure:
			failed = true
		case kiln.ResultCancelled:
			cancelled = true
		case kiln.ResultSkipped:
			skipped++
		}
	}
	switch {
	case failed:
		return kiln.ResultFailure
	case cancelled:
		return kiln.ResultCancelled
	case len(children) > 0 && skipped == len(children):
		return kiln.ResultSkipped
	}
	return kiln.ResultSuccess
}

// pendingJob is a pending job being considered for release.
type pendingJob struct {
	ID          string
	RunID       string
	Name        string
	Base        string
	Matrix      string
	Spec        string
	Key         string
	MaxParallel int
}

var pendingCols = "id, run_id, name, base, matrix, " + specOf("jobs") + ", queue_key, max_parallel"

func scanPending(rows interface{ Scan(...any) error }) (pendingJob, error) {
	var p pendingJob
	err := rows.Scan(&p.ID, &p.RunID, &p.Name, &p.Base, &p.Matrix, &p.Spec, &p.Key, &p.MaxParallel)
	return p, err
}

// release hands a job whose needs are met to the Releaser and applies its
// decision.
func (t *txn) release(ctx context.Context, p pendingJob, ups []UpstreamJob) error {
	return t.releaseAll(ctx, []pendingJob{p}, [][]UpstreamJob{ups})
}

// releaseAll releases jobs together: each gets the Releaser's decision, and
// the jobs queued alike (same key and timeout) move in a few statements, so
// hundreds of matrix children released at once cost a few updates.
func (t *txn) releaseAll(ctx context.Context, ps []pendingJob, ups [][]UpstreamJob) error {
	type group struct {
		key     string
		timeout time.Duration
	}
	groups := map[group][]string{}
	var order []group
	// Jobs whose spec the Releaser rewrote (the engine's always are): moved
	// per key and timeout too, each with its own spec.
	specGroups := map[group][]idSpec{}
	var specOrder []group
	numbers := map[string]int64{} // run id → number, for the run context
	why := map[string]string{}    // job id → its release event's detail
	for i, p := range ps {
		number, ok := numbers[p.RunID]
		if !ok {
			if err := t.queryRow(ctx, "SELECT number FROM runs WHERE id = ?", p.RunID).Scan(&number); err != nil {
				return fmt.Errorf("release %s: %w", p.Name, err)
			}
			numbers[p.RunID] = number
		}
		rj := ReadyJob{
			ID: p.ID, RunID: p.RunID, RunNumber: number, Name: p.Name, Base: p.Base,
			Matrix: json.RawMessage(p.Matrix), Spec: json.RawMessage(p.Spec),
			Requirement: kiln.ParseRequirementKey(p.Key), Upstream: ups[i],
		}
		r := t.db.cfg.Releaser(rj)
		ids := []string{p.ID}
		switch {
		case r.Fail != "":
			if _, err := t.move(ctx, mFailRelease, change{ids: ids, err: r.Fail}); err != nil {
				return err
			}
			continue
		case r.Skip:
			if _, err := t.move(ctx, mSkip, change{ids: ids, err: cmp.Or(r.SkipReason, defaultSkipReason)}); err != nil {
				return err
			}
			continue
		}
		key := p.Key
		if r.Requirement != nil {
			key = r.Requirement.Key()
		}
		timeout := r.QueueTimeout
		if timeout == 0 {
			timeout = t.db.cfg.QueueTimeout
		}
		g := group{key, timeout}
		why[p.ID] = releaseDetail(ups[i], key)
		if r.Spec != nil {
			if _, ok := specGroups[g]; !ok {
				specOrder = append(specOrder, g)
			}
			specGroups[g] = append(specGroups[g], idSpec{p.ID, string(r.Spec)})
			continue
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], p.ID)
	}
	var queued []movedJob
	for _, g := range order {
		moved, err := t.enqueue(ctx, groups[g], g.key, g.timeout, nil)
		if err != nil {
			return err
		}
		queued = append(queued, moved...)
	}
	for _, g := range specOrder {
		jobs := specGroups[g]
		for start := 0; start < len(jobs); start += specsPerStatement {
			moved, err := t.enqueue(ctx, nil, g.key, g.timeout, jobs[start:min(start+specsPerStatement, len(jobs))])
			if err != nil {
				return err
			}
			queued = append(queued, moved...)
		}
	}
	for _, j := range queued {
		t.event(j.RunID, j.ID, EventReleased, why[j.ID])
	}
	return nil
}

// releaseDetail is a released job's timeline entry: which needs were met
// (none for a root job) and what it waits for in the queue.
func releaseDetail(ups []UpstreamJob, key string) string {
	if len(ups) == 0 {
		return "queued for " + describeKey(key)
	}
	var bases []string
	for _, u := range ups {
		if !slices.Contains(bases, u.Base) {
			bases = append(bases, u.Base)
		}
	}
	return "needs met (" + strings.Join(bases, ", ") + "): queued for " + describeKey(key)
}

// idSpec is a released job and the spec it is queued with.
type idSpec struct{ id, spec string }

// specsPerStatement bounds the jobs one enqueue statement rewrites the spec
// of (each adds two parameters and its spec's bytes to the statement).
const specsPerStatement = 200

// enqueue moves released jobs into the queue in one statement: ids keep
// their spec; specs (when given instead) each get their own, written to
// job_specs by a second statement for the jobs that moved.
func (t *txn) enqueue(ctx context.Context, ids []string, key string, timeout time.Duration, specs []idSpec) ([]movedJob, error) {
	var expires any
	if timeout > 0 {
		expires = ms(t.now.Add(timeout))
	}
	set := "ready = 1, queue_key = ?, queued_at = ?, expires_at = ?, pending_reason = ?, pending_since = ?"
	args := []any{key, ms(t.now), expires, ReasonWaiting, ms(t.now)}
	if len(specs) > 0 {
		ids = make([]string, len(specs))
		for i, s := range specs {
			ids[i] = s.id
		}
	}
	moved, err := t.move(ctx, mRelease, change{ids: ids, set: set, args: args})
	if err != nil || len(specs) == 0 || len(moved) == 0 {
		return moved, err
	}
	return moved, t.rewriteSpecs(ctx, specs, moved)
}

// rewriteSpecs stores the specs the Releaser rendered for the jobs that
// moved into the queue, in one statement.
func (t *txn) rewriteSpecs(ctx context.Context, specs []idSpec, moved []movedJob) error {
	did := make(map[string]bool, len(moved))
	for _, m := range moved {
		did[m.ID] = true
	}
	var b strings.Builder
	var args []any
	var ids []string
	b.WriteString("UPDATE job_specs SET spec = CASE job_id")
	for _, s := range specs {
		if did[s.id] {
			b.WriteString(" WHEN ? THEN ?")
			args, ids = append(args, s.id, s.spec), append(ids, s.id)
		}
	}
	in, inArgs := t.db.dialect.oneOf("job_id", ids)
	b.WriteString(" END WHERE " + in)
	if _, err := t.exec(ctx, b.String(), append(args, inArgs...)...); err != nil {
		return fmt.Errorf("release: store the jobs' specs: %w", err)
	}
	return nil
}
