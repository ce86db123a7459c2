package trigger

import (
	"github.com/kilnci/kiln"
)

// giteaActions maps Gitea's pull request actions onto GitHub's words, which
// are the ones workflows name in on.pull_request.types.
var giteaActions = map[string]string{
	"synchronized":           "synchronize",
	"label_updated":          "labeled",
	"label_cleared":          "unlabeled",
	"review_request_removed": "review_request_removed",
}

// FromGitea normalizes a Gitea (or Forgejo) webhook delivery: eventType is
// the X-Gitea-Event header. Gitea's payloads follow GitHub's; the
// differences are its action words ("synchronized") and total_commits,
// which says when the commit list of a push was cut short. Gitea does not
// flag forced pushes, so the changed files of a forced push are those of
// its new commits.
func FromGitea(eventType string, body []byte) (*kiln.Event, error) {
	switch eventType {
	case "push":
		var p pushPayload
		if err := decodePayload("Gitea", eventType, body, &p); err != nil {
			return nil, err
		}
		return pushEvent("Gitea", &p, 0)
	case "pull_request", "pull_request_sync":
		var p prPayload
		if err := decodePayload("Gitea", eventType, body, &p); err != nil {
			return nil, err
		}
		action := p.Action
		if a, ok := giteaActions[action]; ok {
			action = a
		}
		return prEvent("Gitea", &p, action)
	case "create":
		return nil, ignored(eventType, "the push of the new branch or tag, which Gitea sends too, starts the run")
	case "delete":
		return nil, ignored(eventType, "deleting a branch or tag starts no run")
	case "":
		return nil, invalid("the delivery has no event type (X-Gitea-Event header)")
	}
	return nil, ignored(eventType, "kiln does not start runs for %s events", clip(eventType))
}
