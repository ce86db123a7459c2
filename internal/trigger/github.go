package trigger

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
)

// FromGitHub normalizes a GitHub webhook delivery: eventType is the
// X-GitHub-Event header, body the exact request body. Events that start no
// run return an *IgnoredError: ping; branch and tag deletions; create (the
// push of the same ref, which GitHub also sends, starts the run); and every
// event type kiln does not run workflows for.
func FromGitHub(eventType string, body []byte) (*kiln.Event, error) {
	switch eventType {
	case "push":
		var p pushPayload
		if err := decodePayload("GitHub", eventType, body, &p); err != nil {
			return nil, err
		}
		return pushEvent("GitHub", &p, githubMaxCommits)
	case "pull_request":
		var p prPayload
		if err := decodePayload("GitHub", eventType, body, &p); err != nil {
			return nil, err
		}
		return prEvent("GitHub", &p, p.Action)
	case "ping":
		return nil, ignored(eventType, "GitHub checks that the hook works; nothing to run")
	case "create":
		return nil, ignored(eventType, "the push of the new branch or tag, which GitHub sends too, starts the run")
	case "delete":
		return nil, ignored(eventType, "deleting a branch or tag starts no run")
	case "":
		return nil, invalid("the delivery has no event type (X-GitHub-Event header)")
	}
	return nil, ignored(eventType, "kiln does not start runs for %s events", clip(eventType))
}

// prPayload is the part of a pull_request delivery kiln reads.
type prPayload struct {
	Action      string `json:"action"`
	Number      int    `json:"number"`
	Before      string `json:"before"` // synchronize (GitHub)
	PullRequest *struct {
		Title string `json:"title"`
		Head  struct {
			Ref string `json:"ref"`
			SHA string `json:"sha"`
		} `json:"head"`
		Base struct {
			Ref string `json:"ref"`
		} `json:"base"`
	} `json:"pull_request"`
	Repository *repo `json:"repository"`
	Sender     *user `json:"sender"`
}

// prEvent normalizes a pull request delivery with its action already
// mapped onto GitHub's vocabulary.
func prEvent(forge string, p *prPayload, action string) (*kiln.Event, error) {
	pr := p.PullRequest
	switch {
	case pr == nil:
		return nil, invalid("%s pull_request payload has no pull_request", forge)
	case action == "":
		return nil, invalid("%s pull_request payload has no action", forge)
	case p.Number <= 0:
		return nil, invalid("%s pull_request payload has no valid number", forge)
	case pr.Head.Ref == "" || pr.Base.Ref == "":
		return nil, invalid("%s pull_request payload has no head or base ref", forge)
	case !validSHA(pr.Head.SHA):
		return nil, invalid("%s pull_request payload has no valid head sha", forge)
	}
	for field, v := range map[string]string{"action": action, "pull_request.head.ref": pr.Head.Ref, "pull_request.base.ref": pr.Base.Ref} {
		if err := cleanText(field, v, 1024); err != nil {
			return nil, err
		}
	}
	title := pr.Title
	if cleanText("title", title, 4096) != nil {
		title = ""
	}
	ev := &kiln.Event{
		Name:       kiln.EventPullRequest,
		Action:     action,
		Ref:        fmt.Sprintf("refs/pull/%d/head", p.Number),
		SHA:        strings.ToLower(pr.Head.SHA),
		Branch:     pr.Head.Ref,
		BaseBranch: pr.Base.Ref,
		PR:         &kiln.PR{Number: p.Number, Title: title},
		Actor:      actor(p.Sender, nil),
	}
	if validSHA(p.Before) {
		ev.Before = strings.ToLower(p.Before)
	}
	if err := fillRepo(forge, "pull_request", ev, p.Repository); err != nil {
		return nil, err
	}
	return ev, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
