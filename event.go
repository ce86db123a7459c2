package kiln

// EventName names what triggered a run; the trigger types of a workflow's `on:`.
type EventName string

const (
	EventPush        EventName = "push"
	EventPullRequest EventName = "pull_request"
	EventTag         EventName = "tag"
	EventSchedule    EventName = "schedule"
	EventDispatch    EventName = "dispatch"
)

// EventNames lists every event name.
var EventNames = []EventName{EventPush, EventPullRequest, EventTag, EventSchedule, EventDispatch}

// Valid reports whether n is a known event name.
func (n EventName) Valid() bool {
	switch n {
	case EventPush, EventPullRequest, EventTag, EventSchedule, EventDispatch:
		return true
	}
	return false
}

// ChangedFilesStatus says whether Event.ChangedFiles can be trusted. Path
// filters need it: with no list they cannot decide, and kiln says so in the
// decision trace instead of guessing silently.
type ChangedFilesStatus string

const (
	// ChangedFilesFetched: the list is complete (from the payload or the forge API).
	ChangedFilesFetched ChangedFilesStatus = "fetched"
	// ChangedFilesUnavailable: the forge could not tell (API failure, too many
	// commits); path filters match conservatively.
	ChangedFilesUnavailable ChangedFilesStatus = "unavailable"
)

// Event is a forge event normalized into the fields workflows can read as the
// `event` context (workflow.md lists them) plus what the orchestrator needs to
// fetch and check out the code. Every normalizer (GitHub, Gitea, generic,
// local git, schedule, dispatch) produces one.
type Event struct {
	Name   EventName `json:"name"`
	Action string    `json:"action,omitempty"` // pull_request: opened, synchronize, …
	Ref    string    `json:"ref,omitempty"`    // full ref: refs/heads/main, refs/tags/v1, refs/pull/7/head
	SHA    string    `json:"sha,omitempty"`    // the commit to run
	// Before is the previous head of a pushed branch (all zeros for a new
	// branch); used to list changed files when the payload does not.
	Before     string `json:"before,omitempty"`
	Branch     string `json:"branch,omitempty"`      // pushed branch; a pull request's head branch
	BaseBranch string `json:"base_branch,omitempty"` // pull request target
	Tag        string `json:"tag,omitempty"`
	Repository string `json:"repository,omitempty"` // owner/name
	// CloneURL is where agents fetch the repository (https, ssh or file://).
	CloneURL      string `json:"clone_url,omitempty"`
	DefaultBranch string `json:"default_branch,omitempty"`
	Actor         string `json:"actor,omitempty"`
	Message       string `json:"message,omitempty"` // head commit message
	PR            *PR    `json:"pr,omitempty"`
	// Schedule is the cron expression that fired, for schedule events.
	Schedule           string             `json:"schedule,omitempty"`
	ChangedFiles       []string           `json:"changed_files,omitempty"`
	ChangedFilesStatus ChangedFilesStatus `json:"changed_files_status,omitempty"`
	// Fork is set on a pull request whose head lives in another repository
	// than its base: its code and workflows are a stranger's (see
	// docs/security.md).
	Fork *Fork `json:"fork,omitempty"`
}

// PR is the pull request of a pull_request event.
type PR struct {
	Number int    `json:"number"`
	Title  string `json:"title,omitempty"`
}

// Fork describes the pull request of a fork: where its head lives and who
// opened it, as the forge's payload says.
type Fork struct {
	// HeadRepository is the fork's owner/name ("" when the forge no longer
	// knows it: a deleted fork).
	HeadRepository string `json:"head_repository"`
	// Author is the login of the pull request's author.
	Author string `json:"author"`
	// AuthorAssociation is the author's relation to the base repository as
	// GitHub spells it (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR,
	// FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE); "" when the payload does
	// not say (Gitea), and kiln asks the forge instead.
	AuthorAssociation string `json:"author_association,omitempty"`
}

// Trusted reports whether the association makes the author someone who may
// push to the base repository anyway: its owner, a member of the owning
// organization, or a collaborator.
func (f *Fork) Trusted() bool {
	switch f.AuthorAssociation {
	case "OWNER", "MEMBER", "COLLABORATOR":
		return true
	}
	return false
}

// Describe names the fork and its author: "pull request from fork
// OWNER/REPO by USER".
func (f *Fork) Describe() string {
	repo := f.HeadRepository
	if repo == "" {
		repo = "(deleted)"
	}
	author := f.Author
	if author == "" {
		author = "(unknown)"
	}
	return "pull request from fork " + repo + " by " + author
}

// ForkPolicy is what a source does with pull requests from forks.
type ForkPolicy string

const (
	// ForkApprove runs fork pull requests of the base repository's owners,
	// members and collaborators at once and holds the others' runs until an
	// admin approves them. The default.
	ForkApprove ForkPolicy = "approve"
	// ForkRun runs every fork pull request at once.
	ForkRun ForkPolicy = "run"
	// ForkDeny runs none: their deliveries are recorded as ignored.
	ForkDeny ForkPolicy = "deny"
)

// Valid reports whether p is a known policy.
func (p ForkPolicy) Valid() bool {
	return p == ForkApprove || p == ForkRun || p == ForkDeny
}
