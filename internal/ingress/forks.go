package ingress

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// forkRules is how a delivery of a fork's pull request is treated: denied
// (with the delivery's message), or run with its jobs restricted to the
// labels its source allows forks (and held for approval, as holdFor says).
type forkRules struct {
	deny   string      // the ignored delivery's message; "" when not denied
	labels kiln.Labels // the mandatory agent labels the fork's jobs may use
}

// forkPolicy reads the source's fork policy (deny is decided before any
// workflow is read; approval only once runs are to be created).
func (p *Processor) forkPolicy(ctx context.Context, sourceID string, ev *kiln.Event) (store.Source, forkRules, error) {
	st, err := p.db.Sources().Get(ctx, sourceID)
	if err != nil {
		return st, forkRules{}, err
	}
	rules := forkRules{labels: st.ForkLabels}
	if st.ForkPullRequests == kiln.ForkDeny {
		rules.deny = ev.Fork.Describe() + ": the source denies fork pull requests"
	}
	return st, rules, nil
}

// holdFor decides whether a fork's runs wait for approval under the
// approve policy: not when the author is the base repository's owner, a
// member of its organization or a collaborator — GitHub says so in the
// payload (author_association); Gitea's payloads do not, so the forge's
// collaborators API is asked —, and always when kiln cannot tell.
func (p *Processor) holdFor(ctx context.Context, st store.Source, repo forge.Repo, ev *kiln.Event) string {
	hold := "waiting for approval: " + ev.Fork.Describe()
	if st.ForkPullRequests == kiln.ForkRun {
		return ""
	}
	f := ev.Fork
	switch {
	case f.Trusted():
		return ""
	case f.AuthorAssociation != "" || f.Author == "":
		return hold // GitHub said: not one of the repository's own
	}
	ok, err := repo.Collaborator(ctx, ev.Repository, f.Author)
	if err != nil {
		p.log.Warn("cannot tell whether a fork's author may push; the run waits for approval",
			"repository", ev.Repository, "author", f.Author, "err", err)
		return hold
	}
	if !ok {
		return hold
	}
	return ""
}
