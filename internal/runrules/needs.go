package runrules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kilnci/kiln"
)

// Need is one entry of a job's needs: a group (the base job id) and the
// results that satisfy it — the workflow's `when:` (the store fills in
// [success] when none was given).
type Need struct {
	Job    string
	Accept []kiln.Result
}

// Upstream is one child of a group a job needs.
type Upstream struct {
	Name, Base string
	Status     kiln.JobStatus
}

// Pending is what the needs rule reads of a pending job whose needed groups
// may all have ended.
type Pending struct {
	// Needs are the job's edges, in the order a skip reason names the first
	// one unmet (the store orders them by group).
	Needs []Need
	// Upstream are the children of every needed group.
	Upstream []Upstream
	// MaxParallel is the job's own group's bound (0: none).
	MaxParallel int
	// RunCancelled: a cancel was requested for the run. Read only once
	// NeedsEnded holds.
	RunCancelled bool
}

// Dependent is what becomes of a pending job when a group it needs ended.
type Dependent int

const (
	// NotYet: some needed job has not ended; decide again when it does.
	NotYet Dependent = iota
	// CancelledWithRun: the run is being cancelled; the job is cancelled
	// and stop-marked instead of starting.
	CancelledWithRun
	// Unmet: a need is not met (the reason says which); the job is skipped,
	// and its own dependents are decided in turn — a skip cascades.
	Unmet
	// HoldForSlot: needs met, but the job's group has a max_parallel bound;
	// it is marked ready and waits for a slot (see Waves).
	HoldForSlot
	// Release: needs met; the job goes to the engine's Releaser now, which
	// queues, skips or fails it.
	Release
)

// NeedsEnded reports whether every child of every needed group has ended.
func NeedsEnded(ups []Upstream) bool {
	for _, u := range ups {
		if !u.Status.Terminal() {
			return false
		}
	}
	return true
}

// DecideDependent decides a pending job, in this order: a needed job still
// unfinished → NotYet; the run cancelled → CancelledWithRun; an unmet need
// → Unmet with its reason; a max_parallel group → HoldForSlot; else Release.
func DecideDependent(p Pending) (Dependent, string) {
	if !NeedsEnded(p.Upstream) {
		return NotYet, ""
	}
	if p.RunCancelled {
		return CancelledWithRun, RunCancelledMessage
	}
	for _, n := range p.Needs {
		if why := Unsatisfied(n, p.Upstream); why != "" {
			return Unmet, why
		}
	}
	if p.MaxParallel > 0 {
		return HoldForSlot, ""
	}
	return Release, ""
}

// RunCancelledMessage is the error of a dependent cancelled with its run.
const RunCancelledMessage = "the run was cancelled"

// Unsatisfied explains why a need is not met, or returns "" when it is. A
// need is met when every child of the group ended with an accepted result,
// or — when failure is accepted — as soon as any child failed: `when:
// [failure]` runs a cleanup once a matrix failed, even if other children
// succeeded.
func Unsatisfied(n Need, ups []Upstream) string {
	anyFailed := false
	var bad []string
	for _, u := range ups {
		if u.Base != n.Job {
			continue
		}
		r := u.Status.Result()
		if r == kiln.ResultFailure {
			anyFailed = true
		}
		if !slices.Contains(n.Accept, r) {
			bad = append(bad, fmt.Sprintf("%s is %s", u.Name, r))
		}
	}
	if len(bad) == 0 || (anyFailed && slices.Contains(n.Accept, kiln.ResultFailure)) {
		return ""
	}
	accept := make([]string, len(n.Accept))
	for i, r := range n.Accept {
		accept[i] = string(r)
	}
	return fmt.Sprintf("needs not met: %s (wanted %s)", strings.Join(bad, ", "), strings.Join(accept, " or "))
}
