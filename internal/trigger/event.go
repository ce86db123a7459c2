package trigger

import (
	"github.com/kilnci/kiln"
)

// Validate checks an event built outside the normalizers (a manual run
// from the API, a schedule, a local git push) with the rules the
// normalizers apply: a known name, the fields that name needs, valid
// commit ids, and text without control characters, within bounds.
func Validate(ev *kiln.Event) error {
	if ev == nil || !ev.Name.Valid() {
		return invalid("the event has no valid name (push, pull_request, tag, schedule or dispatch)")
	}
	if ev.SHA != "" && !validSHA(ev.SHA) {
		return invalid("the event's sha %.50q is not a commit id", ev.SHA)
	}
	if ev.Before != "" && !validSHA(ev.Before) {
		return invalid("the event's before %.50q is not a commit id", ev.Before)
	}
	fields := []struct{ name, value string }{
		{"action", ev.Action}, {"ref", ev.Ref}, {"branch", ev.Branch}, {"base_branch", ev.BaseBranch},
		{"tag", ev.Tag}, {"repository", ev.Repository}, {"clone_url", ev.CloneURL},
		{"default_branch", ev.DefaultBranch}, {"actor", ev.Actor}, {"schedule", ev.Schedule},
	}
	for _, f := range fields {
		if err := cleanText(f.name, f.value, 1024); err != nil {
			return err
		}
	}
	if err := cleanText("message", ev.Message, 64<<10); err != nil {
		return err
	}
	switch {
	case ev.Name == kiln.EventPush && ev.Branch == "":
		return invalid("a push event needs a branch")
	case ev.Name == kiln.EventTag && ev.Tag == "":
		return invalid("a tag event needs a tag")
	case ev.Name == kiln.EventPullRequest && (ev.PR == nil || ev.PR.Number <= 0 || ev.Action == ""):
		return invalid("a pull_request event needs an action and a pull request number")
	case ev.Name == kiln.EventSchedule && ev.Schedule == "":
		return invalid("a schedule event needs the cron expression that fired")
	}
	if ev.PR != nil {
		if err := cleanText("pr.title", ev.PR.Title, 4096); err != nil {
			return err
		}
	}
	if ev.Fork != nil {
		if ev.Name != kiln.EventPullRequest {
			return invalid("only a pull_request event comes from a fork")
		}
		if err := checkFork(ev.Fork); err != nil {
			return err
		}
	}
	switch ev.ChangedFilesStatus {
	case "", kiln.ChangedFilesFetched, kiln.ChangedFilesUnavailable:
	default:
		return invalid("changed_files_status %q is not fetched or unavailable", ev.ChangedFilesStatus)
	}
	if len(ev.ChangedFiles) > MaxChangedFiles {
		return invalid("the event lists %d changed files; at most %d (leave them out and mark them unavailable)", len(ev.ChangedFiles), MaxChangedFiles)
	}
	for _, f := range ev.ChangedFiles {
		if err := cleanText("a changed file", f, 4096); err != nil {
			return err
		}
	}
	return nil
}
