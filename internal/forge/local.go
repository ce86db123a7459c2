package forge

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/kilnci/kiln"
)

// local is a Repo over a git repository on the server's host. It reads
// commits with git; agents on the same host clone it over file://.
type local struct {
	name  string
	git   gitRepo
	maxWF int64
}

func newLocal(name string, c *LocalConfig, o Options) *local {
	return &local{name: name, git: gitRepo{git: o.Git, dir: c.Path}, maxWF: o.MaxWorkflowBytes}
}

func (l *local) Workflows(ctx context.Context, _, sha string) ([]WorkflowFile, error) {
	return l.git.workflows(ctx, sha, l.maxWF)
}

func (l *local) ChangedFiles(ctx context.Context, ev *kiln.Event) ([]string, bool, error) {
	p := planChanges(ev)
	if p.done || p.pr > 0 {
		return p.files, p.ok, nil
	}
	return l.git.diffNames(ctx, p.base, p.head)
}

func (l *local) Resolve(ctx context.Context, _, ref string) (string, error) {
	if !validRefName(ref) {
		return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch, tag or commit", ref)
	}
	sha, ok, err := l.git.commit(ctx, ref)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", kiln.Errorf(kiln.CodeNotFound, "source %s has no branch, tag or commit %q", l.name, ref)
	}
	return sha, nil
}

// PostStatus drops the status: a local repository has nowhere to show it.
func (l *local) PostStatus(context.Context, string, string, Status) error { return nil }

func (l *local) Clone(context.Context, string) (CloneInfo, error) {
	return CloneInfo{URL: fileURL(l.git.dir)}, nil
}

func fileURL(p string) string {
	return (&url.URL{Scheme: "file", Path: p}).String()
}

// LocalPush is what `kiln trigger SOURCE` (or the post-receive hook) says
// happened to a local repository.
type LocalPush struct {
	// Ref is the branch or tag: "main", "v1", "refs/heads/main". Empty
	// means the repository's HEAD branch.
	Ref string
	// SHA is the ref's new commit; empty means what Ref names now.
	SHA string
	// Before is the ref's previous commit (all zeros for a new ref); empty
	// when unknown, which makes the changed-file list unavailable unless the
	// branch is not the default one.
	Before string
}

// LocalEvent builds the push (or tag) event for a push to a local source's
// repository.
func LocalEvent(ctx context.Context, src *Source, push LocalPush, opts Options) (*kiln.Event, error) {
	if src.Kind != kiln.SourceLocal || src.Local == nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "source %s is not a local source", src.Name)
	}
	if err := src.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	g := gitRepo{git: opts.Git, dir: src.Local.Path}
	if _, err := g.run(ctx, gitMaxSmall, "rev-parse", "--git-dir"); err != nil {
		return nil, kiln.Errorf(kiln.CodeNotFound, "source %s: %s is not a git repository kiln can read", src.Name, src.Local.Path)
	}
	def := g.headBranch(ctx)
	ref, err := g.fullRef(ctx, push.Ref, def)
	if err != nil {
		return nil, err
	}
	rev := push.SHA
	if rev == "" {
		rev = ref
	} else if err := checkSHA(rev); err != nil {
		return nil, err
	}
	sha, ok, err := g.commit(ctx, rev)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, kiln.Errorf(kiln.CodeNotFound, "source %s has no commit %s", src.Name, rev)
	}
	if push.Before != "" {
		if err := checkSHA(push.Before); err != nil {
			return nil, err
		}
	}
	ev := &kiln.Event{
		Name: kiln.EventPush, Ref: ref, SHA: sha, Before: push.Before,
		Repository: src.Name, CloneURL: fileURL(src.Local.Path), DefaultBranch: def,
	}
	if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		ev.Branch = b
	} else {
		ev.Name, ev.Tag = kiln.EventTag, strings.TrimPrefix(ref, "refs/tags/")
	}
	if out, err := g.run(ctx, gitMaxSmall, "show", "-s", "--format=%an%x00%B", sha); err == nil {
		actor, msg, _ := strings.Cut(string(out), "\x00")
		ev.Actor, ev.Message = actor, strings.TrimSpace(msg)
	}
	return ev, nil
}

// headBranch is the branch HEAD points at (the default branch), or "".
func (g gitRepo) headBranch(ctx context.Context) string {
	out, err := g.run(ctx, gitMaxSmall, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// fullRef turns a branch or tag name into refs/heads/… or refs/tags/….
func (g gitRepo) fullRef(ctx context.Context, ref, def string) (string, error) {
	if ref == "" {
		if def == "" {
			return "", kiln.Errorf(kiln.CodeInvalid, "the repository's HEAD is not a branch; name a ref")
		}
		return "refs/heads/" + def, nil
	}
	if !validRefName(ref) {
		return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch or tag name", ref)
	}
	if strings.HasPrefix(ref, "refs/") {
		if !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
			return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a branch (refs/heads/…) or a tag (refs/tags/…)", ref)
		}
		return ref, nil
	}
	for _, full := range []string{"refs/heads/" + ref, "refs/tags/" + ref} {
		if _, ok, err := g.commit(ctx, full); err != nil {
			return "", err
		} else if ok {
			return full, nil
		}
	}
	return "", kiln.Errorf(kiln.CodeNotFound, "the repository has no branch or tag named %q", ref)
}

// Collaborator cannot tell: a local source has no forge API.
func (l *local) Collaborator(context.Context, string, string) (bool, error) {
	return false, kiln.Errorf(kiln.CodeUnavailable, "a local source cannot tell who may push to its repository")
}

// CheckOnHost reports, as a sentence (kiln.CodeInvalid), a local source
// whose path is not a git repository on this host: the server reads the
// repository itself, so a path that only exists on the operator's laptop
// would otherwise fail at the first push with "not a git repository".
func (c *LocalConfig) CheckOnHost() error {
	host, _ := os.Hostname()
	fi, err := os.Stat(c.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kiln.Errorf(kiln.CodeInvalid, "path %s does not exist on the server's host (%s); a local source is a git repository on the server's own disk", c.Path, host)
	case err != nil:
		return kiln.Errorf(kiln.CodeInvalid, "path %s cannot be read on the server's host (%s): %v", c.Path, host, errors.Unwrap(err))
	case !fi.IsDir():
		return kiln.Errorf(kiln.CodeInvalid, "path %s on the server's host (%s) is a file, not a git repository", c.Path, host)
	}
	for _, marker := range []string{".git", "HEAD"} { // a working tree, or a bare repository
		if _, err := os.Stat(filepath.Join(c.Path, marker)); err == nil {
			return nil
		}
	}
	return kiln.Errorf(kiln.CodeInvalid, "path %s on the server's host (%s) is not a git repository (no .git, no HEAD); create it with git init --bare", c.Path, host)
}
