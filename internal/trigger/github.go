package trigger

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

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
			Ref  string `json:"ref"`
			SHA  string `json:"sha"`
			Repo *repo  `json:"repo"` // null when the fork was deleted
		} `json:"head"`
		Base struct {
			Ref  string `json:"ref"`
			Repo *repo  `json:"repo"`
		} `json:"base"`
		User              *user  `json:"user"`
		AuthorAssociation string `json:"author_association"` // GitHub only
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
	fork, err := prFork(forge, p)
	if err != nil {
		return nil, err
	}
	ev.Fork = fork
	return ev, nil
}

// prFork tells a pull request from a fork (its head repository is not its
// base repository) and who opened it, or returns nil for a branch of the
// repository itself. A head repository the payload does not name (GitHub
// sends null once the fork is deleted) counts as a fork: nothing vouches
// for the code.
func prFork(forge string, p *prPayload) (*kiln.Fork, error) {
	pr := p.PullRequest
	base := p.Repository.FullName
	if pr.Base.Repo != nil && pr.Base.Repo.FullName != "" {
		base = pr.Base.Repo.FullName
	}
	head := ""
	if pr.Head.Repo != nil {
		head = pr.Head.Repo.FullName
	}
	if head != "" && strings.EqualFold(head, base) {
		return nil, nil
	}
	f := &kiln.Fork{HeadRepository: head, AuthorAssociation: strings.ToUpper(pr.AuthorAssociation)}
	switch {
	case pr.User != nil && pr.User.Login != "":
		f.Author = pr.User.Login
	case p.Sender != nil:
		f.Author = p.Sender.Login
	}
	if err := checkFork(f); err != nil {
		return nil, invalid("%s pull_request payload: %s", forge, kiln.ErrorMessage(err))
	}
	return f, nil
}

// checkFork rejects fork details that are not plain names: they end up in
// pending reasons, commit statuses and logs.
func checkFork(f *kiln.Fork) error {
	for _, v := range []struct{ field, value string }{
		{"pull_request.head.repo.full_name", f.HeadRepository}, {"pull_request.user.login", f.Author},
		{"pull_request.author_association", f.AuthorAssociation},
	} {
		if len(v.value) > 256 {
			return invalid("%s is longer than 256 bytes", v.field)
		}
		for _, r := range v.value {
			if r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				return invalid("%s contains white space, control or formatting characters", v.field)
			}
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
