package forge

import (
	"context"
	"encoding/base64"
	"os"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// DefaultFetchTimeout bounds one git fetch of a generic source.
const DefaultFetchTimeout = 2 * time.Minute

// generic is a Repo for a source with no forge API: it fetches the commits
// it needs from the clone URL with git (shallow, and without file contents
// where the server supports partial clone) into a temporary repository,
// reads them like a local source, and deletes the copy. It posts no
// statuses.
type generic struct {
	cfg   *GenericConfig
	git   string
	tmp   string
	maxWF int64
	env   []string // credentials for https fetches
}

func newGeneric(c *GenericConfig, o Options) *generic {
	g := &generic{cfg: c, git: o.Git, tmp: cmpOr(o.TempDir, os.TempDir()), maxWF: o.MaxWorkflowBytes}
	if c.CloneUsername != "" {
		basic := base64.StdEncoding.EncodeToString([]byte(c.CloneUsername + ":" + c.ClonePassword))
		// Passed through the environment, which other users cannot read,
		// rather than on git's command line, which they can.
		g.env = []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + basic}
	}
	return g
}

// fetch makes a temporary bare repository holding each of revs (commit ids
// or full ref names) as refs/kiln/0, refs/kiln/1, …
func (g *generic) fetch(ctx context.Context, revs ...string) (gitRepo, func(), error) {
	dir, err := os.MkdirTemp(g.tmp, "kiln-fetch-*")
	if err != nil {
		return gitRepo{}, nil, kiln.Errorf(kiln.CodeUnavailable, "could not make a temporary directory to fetch into: %v", err)
	}
	done := func() { _ = os.RemoveAll(dir) }
	repo := gitRepo{git: g.git, dir: dir, env: g.env}
	ctx, cancel := context.WithTimeout(ctx, DefaultFetchTimeout)
	defer cancel()
	if _, err := repo.run(ctx, gitMaxSmall, "init", "--quiet", "--bare", "."); err != nil {
		done()
		return gitRepo{}, nil, kiln.Errorf(kiln.CodeUnavailable, "could not create a temporary repository: %v", err)
	}
	args := []string{"fetch", "--quiet", "--depth=1", "--no-tags", "--filter=blob:none", "--end-of-options", g.cfg.CloneURL}
	for i, r := range revs {
		args = append(args, "+"+r+":refs/kiln/"+itoa(i))
	}
	if _, err := repo.run(ctx, gitMaxSmall, args...); err != nil {
		done()
		msg := err.Error()
		if ge, ok := err.(*gitError); ok {
			msg = ge.stderr
		}
		return gitRepo{}, nil, kiln.Errorf(kiln.CodeUnavailable, "could not fetch %s from %s: %s", strings.Join(revs, " and "), g.cfg.CloneURL, msg)
	}
	return repo, done, nil
}

func (g *generic) Workflows(ctx context.Context, _, sha string) ([]WorkflowFile, error) {
	if err := checkSHA(sha); err != nil {
		return nil, err
	}
	repo, done, err := g.fetch(ctx, sha)
	if err != nil {
		return nil, err
	}
	defer done()
	return repo.workflows(ctx, sha, g.maxWF)
}

func (g *generic) ChangedFiles(ctx context.Context, ev *kiln.Event) ([]string, bool, error) {
	p := planChanges(ev)
	if p.done || p.pr > 0 {
		return p.files, p.ok, nil
	}
	base := p.base
	if checkSHA(base) != nil {
		base = "refs/heads/" + base
	}
	repo, done, err := g.fetch(ctx, base, p.head)
	if err != nil {
		return nil, false, err
	}
	defer done()
	// Only the two commits are here (depth 1), so the comparison is of their
	// trees, not from a merge base: for a new branch it also counts what
	// changed on the default branch since the fork, which errs on the side
	// of running.
	return repo.diffTrees(ctx, "refs/kiln/0", "refs/kiln/1")
}

func (g *generic) Resolve(ctx context.Context, _, ref string) (string, error) {
	if !validRefName(ref) {
		return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch or tag", ref)
	}
	if checkSHA(ref) == nil && len(ref) >= 40 {
		return ref, nil
	}
	repo := gitRepo{git: g.git, dir: g.tmp, env: g.env}
	ctx, cancel := context.WithTimeout(ctx, DefaultFetchTimeout)
	defer cancel()
	// Ranked patterns: a tag wins over a branch of the same name (as in
	// git), and an annotated tag's peeled commit over the tag object.
	patterns := []string{"refs/heads/" + ref, "refs/tags/" + ref, "refs/tags/" + ref + "^{}"}
	if strings.HasPrefix(ref, "refs/") {
		patterns = []string{ref, ref + "^{}"}
	}
	want := map[string]int{}
	for i, p := range patterns {
		want[p] = i + 1
	}
	args := append([]string{"ls-remote", "--end-of-options", g.cfg.CloneURL}, patterns...)
	out, err := repo.run(ctx, gitMaxListing, args...)
	if err != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "could not list the refs of %s", g.cfg.CloneURL)
	}
	best := pickLsRemote(out, want)
	if best == "" {
		return "", kiln.Errorf(kiln.CodeNotFound, "%s has no branch or tag %q", g.cfg.CloneURL, ref)
	}
	return best, nil
}

// PostStatus drops the status: a generic source has no status API.
func (g *generic) PostStatus(context.Context, string, string, Status) error { return nil }

func (g *generic) Clone(context.Context, string) (CloneInfo, error) {
	return CloneInfo{URL: g.cfg.CloneURL, Username: g.cfg.CloneUsername, Password: g.cfg.ClonePassword}, nil
}

// Collaborator cannot tell: a generic source has no forge API.
func (g *generic) Collaborator(context.Context, string, string) (bool, error) {
	return false, kiln.Errorf(kiln.CodeUnavailable, "a generic source cannot tell who may push to its repository")
}
