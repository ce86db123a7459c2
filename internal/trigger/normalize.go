package trigger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// Limits on forge payloads. GitHub caps deliveries at 25 MB.
const (
	MaxPayloadSize = 25 << 20
	// MaxChangedFiles bounds the changed-file list taken from a payload;
	// beyond it the list is left for the server to fetch (or to match
	// conservatively).
	MaxChangedFiles = 3000
	// githubMaxCommits is how many commits GitHub lists in a push payload;
	// a push with that many may have more, so its file list is incomplete.
	githubMaxCommits = 20
)

// IgnoredError says a delivery was understood but starts no run (a ping, a
// deleted branch, an event kiln does not run workflows for). The server
// answers it with 2xx; it is not a failure.
type IgnoredError struct {
	Event  string // the forge's event type
	Reason string
}

func (e *IgnoredError) Error() string {
	return fmt.Sprintf("%s event ignored: %s", e.Event, e.Reason)
}

// IsIgnored reports whether err says the event starts no run.
func IsIgnored(err error) bool {
	var ig *IgnoredError
	return errors.As(err, &ig)
}

func ignored(event, format string, args ...any) error {
	return &IgnoredError{Event: event, Reason: fmt.Sprintf(format, args...)}
}

// invalid is a malformed payload: a plain sentence with code invalid.
func invalid(format string, args ...any) error {
	return kiln.Errorf(kiln.CodeInvalid, format, args...)
}

// decodePayload checks a payload's size and decodes it into v.
func decodePayload(forge, event string, body []byte, v any) error {
	if len(body) > MaxPayloadSize {
		return kiln.Errorf(kiln.CodeTooLarge, "%s %s payload is %d bytes; at most %d", forge, event, len(body), MaxPayloadSize)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return invalid("%s %s payload is not a JSON object", forge, event)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return invalid("%s %s payload is malformed: %s", forge, event, jsonProblem(err))
	}
	return nil
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s has the wrong type (%s)", te.Field, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	return "invalid JSON"
}

// zeroSHA is what forges send as the "before" of a new branch and the
// "after" of a deleted one.
func zeroSHA(s string) bool {
	return s != "" && strings.Trim(s, "0") == ""
}

// validSHA accepts a full SHA-1 or SHA-256 object id in hex.
func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// cleanText rejects text that would corrupt logs or traces (control
// characters other than newline and tab, invalid UTF-8) or is absurdly long.
func cleanText(field, s string, max int) error {
	if len(s) > max {
		return invalid("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return invalid("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' && r != '\r' || r == 0x7f {
			return invalid("%s contains control characters", field)
		}
	}
	return nil
}

// refName splits a full ref into an event name and a branch or tag name.
func refName(ref string) (kiln.EventName, string, bool) {
	switch {
	case strings.HasPrefix(ref, "refs/heads/") && len(ref) > len("refs/heads/"):
		return kiln.EventPush, strings.TrimPrefix(ref, "refs/heads/"), true
	case strings.HasPrefix(ref, "refs/tags/") && len(ref) > len("refs/tags/"):
		return kiln.EventTag, strings.TrimPrefix(ref, "refs/tags/"), true
	}
	return "", "", false
}

// pushPayload is the part of a push delivery kiln reads; GitHub and Gitea
// share it.
type pushPayload struct {
	Ref          string   `json:"ref"`
	Before       string   `json:"before"`
	After        string   `json:"after"`
	Created      bool     `json:"created"`
	Deleted      bool     `json:"deleted"`
	Forced       bool     `json:"forced"`
	Commits      []commit `json:"commits"`
	TotalCommits *int     `json:"total_commits"` // Gitea only
	HeadCommit   *commit  `json:"head_commit"`
	Repository   *repo    `json:"repository"`
	Pusher       *struct{ Name, Login, Username string }
	Sender       *user `json:"sender"`
}

type commit struct {
	ID       string   `json:"id"`
	Message  string   `json:"message"`
	Added    []string `json:"added"`
	Removed  []string `json:"removed"`
	Modified []string `json:"modified"`
}

type repo struct {
	FullName      string `json:"full_name"`
	CloneURL      string `json:"clone_url"`
	DefaultBranch string `json:"default_branch"`
}

type user struct {
	Login string `json:"login"`
}

// pushEvent normalizes a push delivery (GitHub's and Gitea's are alike).
// maxCommits is how many commits the forge lists at most (0: it says how
// many there were in total_commits).
func pushEvent(forge string, p *pushPayload, maxCommits int) (*kiln.Event, error) {
	if p.Ref == "" {
		return nil, invalid("%s push payload has no ref", forge)
	}
	if err := cleanText("ref", p.Ref, 1024); err != nil {
		return nil, err
	}
	name, short, ok := refName(p.Ref)
	if !ok {
		return nil, ignored("push", "ref %s is neither a branch nor a tag", p.Ref)
	}
	what := "branch"
	if name == kiln.EventTag {
		what = "tag"
	}
	if p.Deleted || zeroSHA(p.After) {
		return nil, ignored("push", "%s %s was deleted", what, short)
	}
	if !validSHA(p.After) {
		return nil, invalid("%s push payload has no valid commit id in after (%.50q)", forge, p.After)
	}
	ev := &kiln.Event{Name: name, Ref: p.Ref, SHA: strings.ToLower(p.After)}
	if validSHA(p.Before) {
		ev.Before = strings.ToLower(p.Before)
	}
	if name == kiln.EventTag {
		ev.Tag = short
	} else {
		ev.Branch = short
	}
	if err := fillRepo(forge, "push", ev, p.Repository); err != nil {
		return nil, err
	}
	ev.Actor = actor(p.Sender, p.Pusher)
	if p.HeadCommit != nil {
		ev.Message = p.HeadCommit.Message
	}
	if err := cleanText("the head commit message", ev.Message, 64<<10); err != nil {
		ev.Message = "" // a hostile message does not stop the run; it is just not shown
	}
	if name == kiln.EventPush {
		ev.ChangedFiles, ev.ChangedFilesStatus = changedFiles(p, maxCommits)
	}
	return ev, nil
}

func fillRepo(forge, event string, ev *kiln.Event, r *repo) error {
	if r == nil || r.FullName == "" {
		return invalid("%s %s payload has no repository.full_name", forge, event)
	}
	for field, v := range map[string]string{"repository.full_name": r.FullName, "repository.clone_url": r.CloneURL, "repository.default_branch": r.DefaultBranch} {
		if err := cleanText(field, v, 1024); err != nil {
			return err
		}
	}
	ev.Repository, ev.CloneURL, ev.DefaultBranch = r.FullName, r.CloneURL, r.DefaultBranch
	return nil
}

// actor is who caused the event: the sender's login, else the pusher's
// name; "" when the forge sent nothing presentable.
func actor(sender *user, pusher *struct{ Name, Login, Username string }) string {
	var candidates []string
	if sender != nil {
		candidates = append(candidates, sender.Login)
	}
	if pusher != nil {
		candidates = append(candidates, pusher.Login, pusher.Username, pusher.Name)
	}
	for _, s := range candidates {
		if s != "" && cleanText("actor", s, 256) == nil {
			return s
		}
	}
	return ""
}

// changedFiles lists the files a push changed, when the payload can tell
// completely: not for a new branch or a forced push (the diff is not the
// listed commits), and not when the forge truncated the commit list. Then
// the status is "" and the server asks the forge API.
func changedFiles(p *pushPayload, maxCommits int) ([]string, kiln.ChangedFilesStatus) {
	switch {
	case p.Created || zeroSHA(p.Before) || p.Forced || len(p.Commits) == 0:
		return nil, ""
	case maxCommits > 0 && len(p.Commits) >= maxCommits:
		return nil, ""
	case p.TotalCommits != nil && *p.TotalCommits > len(p.Commits):
		return nil, ""
	}
	seen := map[string]bool{}
	var files []string
	for _, c := range p.Commits {
		for _, list := range [][]string{c.Added, c.Removed, c.Modified} {
			for _, f := range list {
				if f == "" || seen[f] || cleanText("file", f, 4096) != nil {
					continue
				}
				if len(files) == MaxChangedFiles {
					return nil, ""
				}
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	return files, kiln.ChangedFilesFetched
}
