package server

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// decorator adds what a job spec must not hold while it waits in the queue:
// the clone URL and credentials of the run's source, minted when the job is
// sent (an installation token is short-lived; nothing secret is stored).
type decorator struct {
	db      *store.DB
	sources *ingress.Sources

	mu     sync.Mutex
	runs   map[string]runSource // run id → where its code lives
	lookup singleflight.Group   // one query per run, however many agents wait on it
}

type runSource struct{ source, repo string }

func newDecorator(db *store.DB, sources *ingress.Sources) *decorator {
	return &decorator{db: db, sources: sources, runs: map[string]runSource{}}
}

// maxRunCache bounds the run → source cache; it is only a shortcut.
const maxRunCache = 4096

// Decorate fills in the checkout of a claimed job's spec.
func (d *decorator) Decorate(ctx context.Context, c store.Claimed, spec *proto.JobSpec) error {
	if spec.Checkout == nil || spec.Checkout.LocalPath != "" {
		return nil
	}
	rs, err := d.runSource(ctx, c.RunID)
	if err != nil || rs.source == "" {
		return err
	}
	_, repo, err := d.sources.Repo(ctx, rs.source)
	if err != nil {
		return fmt.Errorf("source of run %s: %w", c.RunID, err)
	}
	ci, err := repo.Clone(ctx, rs.repo)
	if err != nil {
		return fmt.Errorf("clone credentials for %s: %w", rs.repo, err)
	}
	spec.Checkout.URL = ci.URL
	if ci.Username != "" || ci.Password != "" {
		spec.Checkout.Auth = &proto.GitAuth{Username: ci.Username, Password: ci.Password}
	}
	return nil
}

func (d *decorator) runSource(ctx context.Context, runID string) (runSource, error) {
	d.mu.Lock()
	rs, ok := d.runs[runID]
	d.mu.Unlock()
	if ok {
		return rs, nil
	}
	// A run's jobs are claimed by many agents at once: the first miss
	// reads the run's row, the others wait for it.
	v, err, _ := d.lookup.Do(runID, func() (any, error) {
		run, err := d.db.Runs().Header(ctx, runID)
		if err != nil {
			return runSource{}, err
		}
		rs := runSource{source: run.Source, repo: run.Repository}
		d.mu.Lock()
		if len(d.runs) >= maxRunCache {
			clear(d.runs)
		}
		d.runs[runID] = rs
		d.mu.Unlock()
		return rs, nil
	})
	return v.(runSource), err
}
