package runrules

import (
	"slices"

	"github.com/kilnci/kiln"
)

// Group is a matrix group — or a plain job, a group of one — inside a run:
// what needs, max_parallel and fail_fast are about. Base is the workflow's
// job id every child of the group shares.
type Group struct{ RunID, Base string }

// Ended is a job that just reached a terminal status, with its group's
// settings (repeated on every child).
type Ended struct {
	ID, RunID, Name, Base string
	Status                kiln.JobStatus
	MaxParallel           int  // 0: no bound
	FailFast              bool // a failed child stops its siblings
	HasDependents         bool // some job of the run needs this group
}

// Group is the group the job belongs to.
func (e Ended) Group() Group { return Group{e.RunID, e.Base} }

// Consequences is what a batch of ended jobs sets in motion, in the order
// the store applies it: fail_fast first, so the dependents and waves see
// the siblings already stopped (a wave never releases a child fail_fast is
// about to cancel); then the dependents of each ended group; then the waves
// of max_parallel groups.
type Consequences struct {
	// FailFast holds, per fail_fast group with a failed child among the
	// batch, the first such child: its siblings are stopped (see Stop) with
	// FailFastMessage(child.Name).
	FailFast []Ended
	// Dependents are the groups with dependents, each once, in the order
	// their jobs ended: once a group has no unfinished child left, each of
	// its pending dependents is decided (see Dependent).
	Dependents []Group
	// Waves are the max_parallel groups of the ended jobs: a slot may have
	// freed. Never nil: the store adds the groups of dependents it held for
	// a slot.
	Waves Waves
}

// AfterEnded decides what follows from jobs that just ended. Jobs the
// consequences end in turn come back as a new batch, until nothing follows.
func AfterEnded(ended []Ended) Consequences {
	c := Consequences{Waves: Waves{}}
	var stopped, decided map[Group]bool // sweeps end up to a thousand jobs at once
	for _, j := range ended {
		g := j.Group()
		if j.FailFast && j.Status.Result() == kiln.ResultFailure && !stopped[g] {
			if stopped == nil {
				stopped = map[Group]bool{}
			}
			stopped[g] = true
			c.FailFast = append(c.FailFast, j)
		}
		if j.HasDependents && !decided[g] {
			if decided == nil {
				decided = map[Group]bool{}
			}
			decided[g] = true
			c.Dependents = append(c.Dependents, g)
		}
		if j.MaxParallel > 0 {
			c.Waves.Add(g, j.MaxParallel)
		}
	}
	return c
}

// Waves are max_parallel groups whose free slots are to be filled, each
// with its bound.
type Waves map[Group]int

// Add records a group and its bound.
func (w Waves) Add(g Group, maxParallel int) { w[g] = maxParallel }

// Groups lists the groups in the order they are filled: by run, then base,
// so concurrent transactions touch runs in one order.
func (w Waves) Groups() []Group {
	gs := make([]Group, 0, len(w))
	for g := range w {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(a, b Group) int {
		if a.RunID != b.RunID {
			if a.RunID < b.RunID {
				return -1
			}
			return 1
		}
		if a.Base < b.Base {
			return -1
		}
		if a.Base > b.Base {
			return 1
		}
		return 0
	})
	return gs
}

// HoldsSlot reports whether a job in status s takes one of its group's
// max_parallel slots: from the moment it is released to the queue until it
// ends. A pending job — even one ready for the next wave — holds none.
func HoldsSlot(s kiln.JobStatus) bool {
	return s != kiln.JobPending && s.Valid() && !s.Terminal()
}

// SlotHolders lists the statuses that hold a max_parallel slot, in
// lifecycle order (for the store's count).
func SlotHolders() []kiln.JobStatus {
	var out []kiln.JobStatus
	for _, s := range kiln.JobStatuses {
		if HoldsSlot(s) {
			out = append(out, s)
		}
	}
	return out
}

// FreeSlots is how many more ready children of a max_parallel group may be
// released now, when holding of its children hold a slot. The store releases them in
// creation order and asks again, since the Releaser may skip or fail some
// (they then hold no slot).
func FreeSlots(maxParallel, holding int) int {
	return max(0, maxParallel-holding)
}

// WaitingForSlot is the pending reason of a ready child waiting for a wave.
const WaitingForSlot = "waiting for a max_parallel slot"

// StepEnds says how an ended job's unfinished steps end: a step still
// running takes the job's outcome, a step that never ran is skipped — both
// cancelled when the job was.
func StepEnds(job kiln.JobStatus) (running, waiting kiln.StepStatus) {
	switch job {
	case kiln.JobSuccess:
		return kiln.StepSuccess, kiln.StepSkipped
	case kiln.JobCancelled:
		return kiln.StepCancelled, kiln.StepCancelled
	}
	return kiln.StepFailed, kiln.StepSkipped
}
