package localrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
)

// EventOptions describe the simulated event.
type EventOptions struct {
	Name  kiln.EventName // push (default), pull_request, tag, dispatch
	Base  string         // pull_request: the target branch (default main)
	Tag   string         // tag: the tag name
	Files []string       // changed files; nil: uncommitted changes plus the last commit
}

// repo is the working tree kiln run works on.
type repo struct {
	root string
}

func (r repo) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", r.root}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// openRepo finds the repository containing dir.
func openRepo(ctx context.Context, dir string) (repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return repo{}, err
	}
	out, err := (repo{root: abs}).git(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return repo{}, kiln.Errorf(kiln.CodeInvalid, "%s is not inside a git repository", abs)
	}
	return repo{root: strings.TrimSpace(out)}, nil
}

// event builds the event kiln run simulates: the current branch and commit,
// with changed files = uncommitted changes plus the last commit.
func (r repo) event(ctx context.Context, o EventOptions) (*kiln.Event, error) {
	sha, err := r.git(ctx, "rev-parse", "--verify", "-q", "HEAD^{commit}")
	if err != nil || strings.TrimSpace(sha) == "" {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the repository has no commit yet; commit once so kiln run has a commit to describe")
	}
	ev := &kiln.Event{SHA: strings.TrimSpace(sha), Repository: r.name(ctx), Actor: r.actor(ctx)}
	if msg, err := r.git(ctx, "log", "-1", "--format=%B"); err == nil {
		ev.Message = strings.TrimSpace(msg)
	}
	branch := "HEAD"
	if b, err := r.git(ctx, "symbolic-ref", "--short", "-q", "HEAD"); err == nil && strings.TrimSpace(b) != "" {
		branch = strings.TrimSpace(b)
	}
	if o.Name == "" {
		o.Name = kiln.EventPush
	}
	ev.Name = o.Name
	switch o.Name {
	case kiln.EventPush, kiln.EventDispatch:
		ev.Branch, ev.Ref = branch, "refs/heads/"+branch
	case kiln.EventPullRequest:
		base := o.Base
		if base == "" {
			base = "main"
		}
		ev.Action, ev.Branch, ev.BaseBranch, ev.Ref = "opened", branch, base, "refs/heads/"+branch
		ev.PR = &kiln.PR{Number: 1, Title: firstLine(ev.Message)}
	case kiln.EventTag:
		if o.Tag == "" {
			return nil, kiln.Errorf(kiln.CodeInvalid, "--event tag needs --tag NAME")
		}
		ev.Tag, ev.Ref = o.Tag, "refs/tags/"+o.Tag
	default:
		return nil, kiln.Errorf(kiln.CodeInvalid, "--event %q is not push, pull_request, tag or dispatch", o.Name)
	}
	ev.DefaultBranch = branch
	files := o.Files
	if files == nil {
		if files, err = r.changedFiles(ctx); err != nil {
			return nil, err
		}
	}
	ev.ChangedFiles, ev.ChangedFilesStatus = files, kiln.ChangedFilesFetched
	return ev, nil
}

// changedFiles lists uncommitted changes (untracked files included) and the
// files of the last commit.
func (r repo) changedFiles(ctx context.Context) ([]string, error) {
	set := map[string]bool{}
	status, err := r.git(ctx, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	if err != nil {
		return nil, err
	}
	entries := strings.Split(status, "\x00")
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 4 {
			continue
		}
		set[e[3:]] = true
		if e[0] == 'R' || e[0] == 'C' { // renames carry the old path next
			i++
		}
	}
	last, err := r.git(ctx, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "HEAD")
	if err != nil {
		return nil, err
	}
	for _, f := range strings.Split(last, "\n") {
		if f = strings.TrimSpace(f); f != "" {
			set[f] = true
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	sort.Strings(out)
	return out, nil
}

// name is owner/name from the origin remote, else the directory's name.
func (r repo) name(ctx context.Context) string {
	if u, err := r.git(ctx, "remote", "get-url", "origin"); err == nil {
		u = strings.TrimSuffix(strings.TrimSpace(u), ".git")
		u = strings.ReplaceAll(u, ":", "/")
		parts := strings.Split(u, "/")
		if len(parts) >= 2 && parts[len(parts)-2] != "" && parts[len(parts)-1] != "" {
			return parts[len(parts)-2] + "/" + parts[len(parts)-1]
		}
	}
	return filepath.Base(r.root)
}

func (r repo) actor(ctx context.Context) string {
	if n, err := r.git(ctx, "config", "user.name"); err == nil && strings.TrimSpace(n) != "" {
		return strings.TrimSpace(n)
	}
	return os.Getenv("USER")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
