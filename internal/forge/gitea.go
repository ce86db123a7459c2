package forge

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
)

// giteaPageSize is Gitea's default maximum page size (MAX_RESPONSE_ITEMS).
const giteaPageSize = 50

// gitea is a Repo over the Gitea (and Forgejo) REST API, /api/v1.
type gitea struct {
	name  string // the source's
	api   *apiClient
	web   *url.URL
	maxWF int64
	clone *CloneConfig
	blobs *blobCache // workflow files by blob id
}

func newGitea(name string, c *GiteaConfig, o Options) (*gitea, error) {
	web, err := parseBase(c.APIBase, "/api/v1")
	if err != nil {
		return nil, err
	}
	api := *web
	api.Path += "/api/v1"
	tok := c.Token
	return &gitea{
		name: name, web: web, maxWF: o.MaxWorkflowBytes, clone: c.Clone, blobs: newBlobCache(),
		api: &apiClient{
			forge: "Gitea", base: &api, hc: o.HTTPClient, maxBody: o.MaxResponseBytes, now: o.Now,
			headers: map[string]string{"Accept": "application/json"},
			auth:    func(context.Context) (string, error) { return "token " + tok, nil },
		},
	}, nil
}

func (g *gitea) Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error) {
	return readContentsWorkflows(ctx, g.api, g.blobs, g.maxWF, repo, sha)
}

func (g *gitea) ChangedFiles(ctx context.Context, ev *kiln.Event) ([]string, bool, error) {
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
	// Gitea's compare answers the commits between base and head, each with
	// the files it touched; their union is the change.
	var cmp struct {
		Commits []struct {
			Files []gitHubFile `json:"files"`
		} `json:"commits"`
	}
	path := rp + "/compare/" + escapePath(p.base) + "..." + escapePath(p.head)
	q := url.Values{"files": {"true"}, "verification": {"false"}}
	_, err = g.api.do(ctx, request{method: http.MethodGet, path: path, query: q}, &cmp)
	switch kiln.ErrorCode(err) {
	case "":
	case kiln.CodeNotFound, kiln.CodeTooLarge:
		// An unknown base (a force push, or a Gitea older than 1.22 with no
		// compare API), or more commits than kiln reads: no complete list.
		return nil, false, nil
	default:
		return nil, false, err
	}
	var all []gitHubFile
	for _, c := range cmp.Commits {
		all = append(all, c.Files...)
	}
	files := collectFiles(all)
	if len(files) > MaxChangedFiles {
		return nil, false, nil
	}
	return files, true, nil
}

func (g *gitea) pullFiles(ctx context.Context, rp string, n int) ([]string, bool, error) {
	var all []gitHubFile
	for page := 1; ; page++ {
		var fs []gitHubFile
		q := url.Values{"limit": {itoa(giteaPageSize)}, "page": {itoa(page)}}
		h, err := g.api.do(ctx, request{method: http.MethodGet, path: rp + "/pulls/" + itoa(n) + "/files", query: q}, &fs)
		if err != nil {
			return nil, false, err
		}
		all = append(all, fs...)
		total, terr := strconv.Atoi(h.Get("X-Total-Count"))
		if len(fs) == 0 || (terr == nil && len(all) >= total) || (terr != nil && len(fs) < giteaPageSize) {
			return collectFiles(all), true, nil
		}
		if len(all) >= MaxChangedFiles {
			return nil, false, nil
		}
	}
}

func (g *gitea) Resolve(ctx context.Context, repo, ref string) (string, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return "", err
	}
	name, err := shortRef(ref)
	if err != nil {
		return "", err
	}
	var commits []struct {
		SHA string `json:"sha"`
	}
	q := url.Values{"sha": {name}, "limit": {"1"}, "stat": {"false"}, "verification": {"false"}, "files": {"false"}}
	if _, err := g.api.do(ctx, request{method: http.MethodGet, path: rp + "/commits", query: q}, &commits); err != nil {
		return "", err
	}
	if len(commits) == 0 || checkSHA(commits[0].SHA) != nil {
		return "", kiln.Errorf(kiln.CodeNotFound, "Gitea has no commit for ref %q in %s", ref, strings.TrimPrefix(rp, "/repos/"))
	}
	return commits[0].SHA, nil
}

func (g *gitea) PostStatus(ctx context.Context, repo, sha string, st Status) error {
	return postStatus(ctx, g.api, repo, sha, st)
}

// Clone gives agents the source's clone credential, or nothing: never the
// source's own token. Gitea reads an access token as the password of any
// user name.
func (g *gitea) Clone(_ context.Context, repo string) (CloneInfo, error) {
	return cloneWith(g.clone, g.web, repo, "kiln", g.name)
}

// Collaborator says whether user may push to repo: the repository's owner
// may; anyone else Gitea's collaborators API answers for (204 yes, 404
// no). Gitea's pull request payloads say nothing of the author's relation
// to the repository, unlike GitHub's author_association.
func (g *gitea) Collaborator(ctx context.Context, repo, user string) (bool, error) {
	owner, _, err := splitRepo(repo)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(owner, user) {
		return true, nil
	}
	return askCollaborator(ctx, g.api, repo, user)
}
