package forge

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// WorkflowDir is where a repository keeps its workflow files.
const WorkflowDir = ".kiln/workflows"

// Limits on what kiln reads from a repository.
const (
	DefaultMaxWorkflowBytes = 1 << 20 // per workflow file
	DefaultMaxWorkflowFiles = 100
	// MaxChangedFiles bounds a changed-files list; past it the list is
	// reported incomplete and path filters match conservatively.
	MaxChangedFiles = 3000
)

// Repo is what the server needs from a source, whatever its kind. repo is
// "owner/name" for GitHub and Gitea (one source may serve many
// repositories); local and generic sources serve one repository and
// ignore it.
type Repo interface {
	// Workflows returns .kiln/workflows/*.yml and *.yaml at sha, sorted by
	// path. A missing directory is an empty list, not an error. A file that
	// cannot be used (over 1 MiB, a symlink) comes back with Err set and no
	// content, for the linter to report; it is never downloaded whole.
	Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error)
	// ChangedFiles lists the files an event changed: the payload's list when
	// it has one, else the pull request's files or the push's before...after
	// comparison. ok is false when no complete list can be had (a new
	// branch with no base, over MaxChangedFiles files, a tag, a dispatch);
	// path filters then match conservatively.
	ChangedFiles(ctx context.Context, ev *kiln.Event) (files []string, ok bool, err error)
	// Resolve turns a branch, tag or full ref into the commit it names.
	Resolve(ctx context.Context, repo, ref string) (sha string, err error)
	// PostStatus sets a commit status. Sources with no status API (generic,
	// local) accept and drop it.
	PostStatus(ctx context.Context, repo, sha string, st Status) error
	// Clone says how an agent fetches the repository, with read-only
	// credentials (or none); credentials are separate from the URL.
	Clone(ctx context.Context, repo string) (CloneInfo, error)
	// Collaborator reports whether user may push to repo: its owner or a
	// collaborator. An error means the forge could not tell (sources
	// without a forge API never can).
	Collaborator(ctx context.Context, repo, user string) (bool, error)
}

// WorkflowFile is one workflow file read at a commit.
type WorkflowFile struct {
	Path    string // repository-relative, e.g. .kiln/workflows/ci.yml
	Content []byte
	Err     error // set instead of Content when the file cannot be used
}

// CloneInfo is how an agent fetches a repository, with read-only
// credentials at most: a token (a GitHub App's is minted for the one
// repository with contents: read and expires after an hour: ExpiresAt) or
// an ssh deploy key, never in the URL. Agents pass them to git in its
// environment, not on a command line. With no credentials Hint says how to
// give some, for the agent to show when the anonymous clone fails.
type CloneInfo struct {
	URL        string    `json:"url"`
	Username   string    `json:"username,omitempty"`
	Password   string    `json:"password,omitempty"`
	SSHKey     string    `json:"ssh_key,omitempty"`
	KnownHosts string    `json:"known_hosts,omitempty"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	Hint       string    `json:"hint,omitempty"`
}

// Options are the dependencies of every Repo.
type Options struct {
	HTTPClient       *http.Client // default: a client with DefaultHTTPTimeout
	MaxResponseBytes int64        // default DefaultMaxResponseBytes
	MaxWorkflowBytes int64        // default DefaultMaxWorkflowBytes
	Git              string       // the git executable; default "git" from PATH
	TempDir          string       // where generic sources fetch; default os.TempDir()
	Now              func() time.Time
	Logger           *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: DefaultHTTPTimeout}
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxWorkflowBytes <= 0 {
		o.MaxWorkflowBytes = DefaultMaxWorkflowBytes
	}
	if o.Git == "" {
		o.Git = "git"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// NewRepo returns the Repo for a validated source.
func NewRepo(src *Source, opts Options) (Repo, error) {
	if err := src.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	switch src.Kind {
	case kiln.SourceGitHub:
		return newGitHub(src.Name, src.GitHub, opts)
	case kiln.SourceGitea:
		return newGitea(src.Name, src.Gitea, opts)
	case kiln.SourceGeneric:
		return newGeneric(src.Generic, opts), nil
	case kiln.SourceLocal:
		return newLocal(src.Name, src.Local, opts), nil
	}
	return nil, kiln.Errorf(kiln.CodeInvalid, "source kind %q is not known", src.Kind)
}

// isWorkflowFile reports whether a directory entry's name is a workflow.
// The name comes from the forge's answer: one with a slash (or a
// backslash, or NUL) is no entry of this directory.
func isWorkflowFile(name string) bool {
	ext := path.Ext(name)
	return (ext == ".yml" || ext == ".yaml") && !strings.HasPrefix(name, ".") && len(name) > len(ext) &&
		!strings.ContainsAny(name, "/\\\x00")
}

// changePlan is what a forge has to compare to list an event's changed
// files.
type changePlan struct {
	done  bool // files/ok are the answer already
	files []string
	ok    bool
	pr    int    // list a pull request's files
	base  string // or compare base...head (three dots: from the merge base)
	head  string
}

// planChanges decides how to list an event's changed files. A payload list
// wins. A pull request lists its files. A push compares before...after;
// the first push of a branch (before all zeros) compares against the
// default branch, so a feature branch's files count from where it forked;
// the default branch's own first push and tags have no base (ok=false).
func planChanges(ev *kiln.Event) changePlan {
	switch {
	case ev == nil:
		return changePlan{done: true}
	case ev.ChangedFilesStatus == kiln.ChangedFilesFetched:
		return changePlan{done: true, files: ev.ChangedFiles, ok: true}
	case ev.Name == kiln.EventPullRequest && ev.PR != nil && ev.PR.Number > 0:
		return changePlan{pr: ev.PR.Number}
	case ev.Name != kiln.EventPush || zeroSHA(ev.SHA) || checkSHA(ev.SHA) != nil:
		return changePlan{done: true}
	case !zeroSHA(ev.Before):
		if checkSHA(ev.Before) != nil {
			return changePlan{done: true}
		}
		return changePlan{base: ev.Before, head: ev.SHA}
	case ev.Branch != "" && ev.DefaultBranch != "" && ev.Branch != ev.DefaultBranch && validRefName(ev.DefaultBranch):
		return changePlan{base: ev.DefaultBranch, head: ev.SHA}
	}
	return changePlan{done: true}
}

// addFile appends f (and a rename's old name) unless it is already there.
func addFile(files []string, seen map[string]bool, names ...string) []string {
	for _, n := range names {
		if n != "" && !seen[n] {
			seen[n] = true
			files = append(files, n)
		}
	}
	return files
}
