package caches

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Scopes are where a job's caches come from and go to. Caches belong to a
// repository (Namespace) and, inside it, to the branch, pull request or tag
// that saved them: a job restores from its own scope, then its pull
// request's base branch, then the default branch, and saves only to its
// own — so a branch never overwrites what another branch restores, and a
// pull request cannot plant a cache its base would pick up.
type Scopes struct {
	Namespace string
	Restore   []string // in order, without duplicates
	// Save is the job's own scope; "" when the job may not save, and
	// NoSave says why.
	Save   string
	NoSave string
}

// ScopesOf derives a job's scopes from its run.
func ScopesOf(jr store.JobRun) (Scopes, error) {
	var ev kiln.Event
	if len(jr.Event) > 0 {
		if err := json.Unmarshal(jr.Event, &ev); err != nil {
			return Scopes{}, fmt.Errorf("the run's event: %w", err)
		}
	}
	s := Scopes{Namespace: jr.Source + ":" + jr.Repository}
	var own, base string
	switch {
	case ev.PR != nil:
		own = fmt.Sprintf("refs/pull/%d", ev.PR.Number)
		if ev.BaseBranch != "" {
			base = "refs/heads/" + ev.BaseBranch
		}
	case ev.Tag != "":
		own = "refs/tags/" + ev.Tag
	case ev.Branch != "":
		own = "refs/heads/" + ev.Branch
	default:
		own = ev.Ref
	}
	def := ""
	if ev.DefaultBranch != "" {
		def = "refs/heads/" + ev.DefaultBranch
	}
	for _, sc := range []string{own, base, def} {
		if sc != "" && !slices.Contains(s.Restore, sc) {
			s.Restore = append(s.Restore, sc)
		}
	}
	switch {
	case ev.Fork != nil:
		s.NoSave = "a fork pull request's job never saves caches"
	case own == "":
		s.NoSave = "the run has no branch, pull request or tag to save caches to"
	default:
		s.Save = own
	}
	return s, nil
}
