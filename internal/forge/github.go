package forge

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// GitHub REST API details kiln relies on.
const (
	gitHubMediaType  = "application/vnd.github+json"
	gitHubAPIVersion = "2022-11-28"
	// gitHubCompareCap is how many files GitHub's compare endpoint lists at
	// most; a list that long may be cut.
	gitHubCompareCap = 300
	gitHubPerPage    = 100
)

// gitHub is a Repo over GitHub's REST API (github.com or Enterprise).
type gitHub struct {
	name   string // the source's
	api    *apiClient
	web    *url.URL
	maxWF  int64
	blobs  *blobCache // workflow files by blob id
	tokens func(ctx context.Context) (string, time.Time, error)
	app    *appTokens // nil for a token source
	clone  *CloneConfig
	// postChecks: post check runs instead of commit statuses (an App
	// source with "checks": true); checks remembers their ids.
	postChecks bool
	checks     checkIDs
}

func newGitHub(name string, c *GitHubConfig, o Options) (*gitHub, error) {
	base, err := parseBase(cmpOr(c.APIBase, DefaultGitHubAPI), "")
	if err != nil {
		return nil, err
	}
	web, err := gitHubWebBase(base, c.WebBase)
	if err != nil {
		return nil, err
	}
	g := &gitHub{name: name, web: web, maxWF: o.MaxWorkflowBytes, clone: c.Clone, postChecks: c.Checks && c.App != nil,
		blobs: newBlobCache()}
	g.api = &apiClient{
		forge: "GitHub", base: base, hc: o.HTTPClient, maxBody: o.MaxResponseBytes, now: o.Now,
		headers: map[string]string{"Accept": gitHubMediaType, "X-GitHub-Api-Version": gitHubAPIVersion},
	}
	if c.App != nil {
		app, err := newAppTokens(c.App, g.api, o.Now)
		if err != nil {
			return nil, err
		}
		g.tokens, g.app = app.token, app
	} else {
		tok := c.Token
		g.tokens = func(context.Context) (string, time.Time, error) { return tok, time.Time{}, nil }
	}
	g.api.auth = func(ctx context.Context) (string, error) {
		t, _, err := g.tokens(ctx)
		return "Bearer " + t, err
	}
	return g, nil
}

// gitHubWebBase derives where repositories are cloned from: github.com for
// api.github.com, HOST for HOST/api/v3 (Enterprise), else the API base.
func gitHubWebBase(api *url.URL, explicit string) (*url.URL, error) {
	if explicit != "" {
		return parseBase(explicit, "")
	}
	w := *api
	switch {
	case w.Host == "api.github.com":
		w.Host = "github.com"
	case strings.HasSuffix(w.Path, "/api/v3"):
		w.Path = strings.TrimSuffix(w.Path, "/api/v3")
	}
	return &w, nil
}

func (g *gitHub) Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error) {
	return readContentsWorkflows(ctx, g.api, g.blobs, g.maxWF, repo, sha)
}

func (g *gitHub) ChangedFiles(ctx context.Context, ev *kiln.Event) ([]string, bool, error) {
	p := planChanges(ev)
	if p.done {
		return p.files, p.ok, nil
	}
	rp, err := repoPath(ev.Repository)
	if err != nil {
		return nil, false, err
	}
	if p.pr > 0 {
		return g.pullFiles(ctx, rp, p.pr)
	}
	var cmp struct {
		Files []gitHubFile `json:"files"`
	}
	path := rp + "/compare/" + escapePath(p.base) + "..." + escapePath(p.head)
	_, err = g.api.do(ctx, request{method: http.MethodGet, path: path}, &cmp)
	switch kiln.ErrorCode(err) {
	case "":
	case kiln.CodeNotFound, kiln.CodeTooLarge:
		// An unknown base (a force push dropped it; no default branch) or
		// an answer over the response limit: no complete list.
		return nil, false, nil
	default:
		return nil, false, err
	}
	if len(cmp.Files) >= gitHubCompareCap {
		return nil, false, nil
	}
	return collectFiles(cmp.Files), true, nil
}

type gitHubFile struct {
	Filename         string `json:"filename"`
	PreviousFilename string `json:"previous_filename"`
	Status           string `json:"status"`
}

func collectFiles(fs []gitHubFile) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		out = addFile(out, seen, f.Filename, f.PreviousFilename)
	}
	return out
}

// pullFiles pages through a pull request's files (GitHub lists at most
// 3000, 100 a page).
func (g *gitHub) pullFiles(ctx context.Context, rp string, n int) ([]string, bool, error) {
	var all []gitHubFile
	for page := 1; ; page++ {
		var fs []gitHubFile
		q := url.Values{"per_page": {itoa(gitHubPerPage)}, "page": {itoa(page)}}
		if _, err := g.api.do(ctx, request{method: http.MethodGet, path: rp + "/pulls/" + itoa(n) + "/files", query: q}, &fs); err != nil {
			return nil, false, err
		}
		all = append(all, fs...)
		if len(fs) < gitHubPerPage {
			return collectFiles(all), true, nil
		}
		if len(all) >= MaxChangedFiles {
			return nil, false, nil
		}
	}
}

func (g *gitHub) Resolve(ctx context.Context, repo, ref string) (string, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return "", err
	}
	name, err := shortRef(ref)
	if err != nil {
		return "", err
	}
	raw, _, err := g.api.doRaw(ctx, request{method: http.MethodGet, path: rp + "/commits/" + escapePath(name), accept: "application/vnd.github.sha"})
	if err != nil {
		return "", err
	}
	sha := strings.TrimSpace(string(raw))
	if checkSHA(sha) != nil {
		return "", kiln.Errorf(kiln.CodeUnavailable, "GitHub answered a commit lookup with something that is not a commit id")
	}
	return sha, nil
}

// PostStatus posts st as a commit status or, for a source that posts
// check runs and an update that carries one, as a check run. A check run
// GitHub refuses for good (403: the App lacks checks: write; 422) is
// posted as a commit status instead, answered with *ChecksRefused.
func (g *gitHub) PostStatus(ctx context.Context, repo, sha string, st Status) error {
	if !g.postChecks || st.Check == nil {
		return postStatus(ctx, g.api, repo, sha, st)
	}
	err := g.postCheck(ctx, repo, sha, st)
	if !checksRefused(err) {
		return err
	}
	reason := kiln.ErrorMessage(err)
	if kiln.ErrorCode(err) == kiln.CodeForbidden {
		reason += " (check runs need the GitHub App's checks: write permission)"
	}
	if serr := postStatus(ctx, g.api, repo, sha, st); serr != nil {
		return serr
	}
	return &ChecksRefused{Reason: reason}
}

// postStatus is the same call on GitHub and Gitea: POST
// /repos/{o}/{r}/statuses/{sha} with {state, target_url, description,
// context}, answered 201.
func postStatus(ctx context.Context, api *apiClient, repo, sha string, st Status) error {
	rp, err := repoPath(repo)
	if err != nil {
		return err
	}
	if err := checkSHA(sha); err != nil {
		return err
	}
	st, err = st.normalize()
	if err != nil {
		return err
	}
	_, err = api.do(ctx, request{method: http.MethodPost, path: rp + "/statuses/" + sha, in: st}, nil)
	return err
}

// Clone gives a GitHub App source's agents an installation token minted
// for repo alone with contents: read, and a token source's agents its
// clone credential, or nothing: never the source's own token.
func (g *gitHub) Clone(ctx context.Context, repo string) (CloneInfo, error) {
	if g.app == nil {
		return cloneWith(g.clone, g.web, repo, "x-access-token", g.name)
	}
	_, name, err := splitRepo(repo)
	if err != nil {
		return CloneInfo{}, err
	}
	tok, exp, err := g.app.readToken(ctx, name)
	if err != nil {
		return CloneInfo{}, err
	}
	// GitHub takes an installation token as the password of x-access-token.
	return CloneInfo{URL: g.web.String() + "/" + repo + ".git", Username: "x-access-token", Password: tok, ExpiresAt: exp}, nil
}

// Collaborator asks GET /repos/{o}/{r}/collaborators/{user}: 204 yes, 404 no.
func (g *gitHub) Collaborator(ctx context.Context, repo, user string) (bool, error) {
	return askCollaborator(ctx, g.api, repo, user)
}

// askCollaborator is GitHub's and Gitea's collaborator check: 204 when
// user may push to repo, 404 when not.
func askCollaborator(ctx context.Context, api *apiClient, repo, user string) (bool, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return false, err
	}
	if user == "" || strings.ContainsAny(user, "/?#") {
		return false, kiln.Errorf(kiln.CodeInvalid, "%q is not a user name", user)
	}
	_, _, err = api.doRaw(ctx, request{method: http.MethodGet, path: rp + "/collaborators/" + url.PathEscape(user)})
	switch kiln.ErrorCode(err) {
	case "":
		return true, nil
	case kiln.CodeNotFound:
		return false, nil
	}
	return false, err
}
