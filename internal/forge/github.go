package forge

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
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
	api    *apiClient
	web    *url.URL
	maxWF  int64
	tokens func(ctx context.Context) (string, time.Time, error)
}

func newGitHub(c *GitHubConfig, o Options) (*gitHub, error) {
	base, err := parseBase(cmpOr(c.APIBase, DefaultGitHubAPI), "")
	if err != nil {
		return nil, err
	}
	web, err := gitHubWebBase(base, c.WebBase)
	if err != nil {
		return nil, err
	}
	g := &gitHub{web: web, maxWF: o.MaxWorkflowBytes}
	g.api = &apiClient{
		forge: "GitHub", base: base, hc: o.HTTPClient, maxBody: o.MaxResponseBytes, now: o.Now,
		headers: map[string]string{"Accept": gitHubMediaType, "X-GitHub-Api-Version": gitHubAPIVersion},
	}
	if c.App != nil {
		app, err := newAppTokens(c.App, g.api, o.Now)
		if err != nil {
			return nil, err
		}
		g.tokens = app.token
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

// fileContent is an entry of the contents API: a directory listing is an
// array of these without content; a file is one with base64 content.
type fileContent struct {
	Type     string `json:"type"` // file, dir, symlink, submodule
	Name     string `json:"name"`
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Encoding string `json:"encoding"` // base64; "none" for files over 1 MB
	Content  string `json:"content"`
}

func (g *gitHub) Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error) {
	rp, err := repoPath(repo)
	if err != nil {
		return nil, err
	}
	if err := checkSHA(sha); err != nil {
		return nil, err
	}
	q := url.Values{"ref": {sha}}
	var raw json.RawMessage
	_, err = g.api.do(ctx, request{method: http.MethodGet, path: rp + "/contents/" + WorkflowDir, query: q}, &raw)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		// No workflow directory, or no repository the token can see:
		// only the first is "no workflows".
		return nil, g.api.checkRepo(ctx, rp)
	}
	if err != nil {
		return nil, err
	}
	entries, err := contentListing(raw)
	if err != nil {
		return nil, err
	}
	return readWorkflows(entries, g.maxWF, func(e contentEntry) ([]byte, error) {
		var f fileContent
		if _, err := g.api.do(ctx, request{method: http.MethodGet, path: rp + "/contents/" + escapePath(e.Path), query: q}, &f); err != nil {
			return nil, err
		}
		f.Path = e.Path
		return decodeContent(f, g.maxWF)
	})
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

func (g *gitHub) PostStatus(ctx context.Context, repo, sha string, st Status) error {
	return postStatus(ctx, g.api, repo, sha, st)
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

func (g *gitHub) Clone(ctx context.Context, repo string) (CloneInfo, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return CloneInfo{}, err
	}
	tok, exp, err := g.tokens(ctx)
	if err != nil {
		return CloneInfo{}, err
	}
	// GitHub takes any token as the password of user x-access-token.
	return CloneInfo{URL: g.web.String() + "/" + repo + ".git", Username: "x-access-token", Password: tok, ExpiresAt: exp}, nil
}

// contentEntry is a directory entry both forges' contents APIs return.
type contentEntry struct {
	Type string `json:"type"`
	Name string `json:"name"`
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// contentListing decodes a contents answer for the workflow directory: an
// array when it is a directory.
func contentListing(raw json.RawMessage) ([]contentEntry, error) {
	if t := strings.TrimSpace(string(raw)); !strings.HasPrefix(t, "[") {
		return []contentEntry{{Type: "notdir", Path: WorkflowDir}}, nil
	}
	var entries []contentEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge listed %s in an unexpected format", WorkflowDir)
	}
	return entries, nil
}

// readWorkflows picks the workflow files out of a directory listing and
// reads each with fetch, turning unusable ones into error entries.
func readWorkflows(entries []contentEntry, maxBytes int64, fetch func(contentEntry) ([]byte, error)) ([]WorkflowFile, error) {
	var out []WorkflowFile
	for _, e := range entries {
		if e.Type == "notdir" {
			return []WorkflowFile{{Path: WorkflowDir, Err: kiln.Errorf(kiln.CodeInvalid, "%s is not a directory", WorkflowDir)}}, nil
		}
		if !isWorkflowFile(e.Name) || e.Type == "dir" || e.Type == "submodule" {
			continue
		}
		p := WorkflowDir + "/" + e.Name
		if len(out) == DefaultMaxWorkflowFiles {
			return nil, kiln.Errorf(kiln.CodeTooLarge, "%s holds more than %d workflow files", WorkflowDir, DefaultMaxWorkflowFiles)
		}
		switch {
		case e.Type == "symlink":
			out = append(out, WorkflowFile{Path: p, Err: kiln.Errorf(kiln.CodeInvalid, "%s is a symbolic link; workflow files must be regular files", p)})
		case e.Type != "file":
			continue
		case e.Size > maxBytes:
			out = append(out, WorkflowFile{Path: p, Err: fileTooLarge(p, e.Size, maxBytes)})
		default:
			b, err := fetch(e)
			var fe *fileError
			if errors.As(err, &fe) {
				out = append(out, WorkflowFile{Path: p, Err: fe.err})
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, WorkflowFile{Path: p, Content: b})
		}
	}
	slices.SortFunc(out, func(a, b WorkflowFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// fileError marks a per-file problem that becomes an error entry rather
// than failing the whole read.
type fileError struct{ err error }

func (e *fileError) Error() string { return e.err.Error() }

func fileTooLarge(p string, size, limit int64) error {
	return kiln.Errorf(kiln.CodeTooLarge, "%s is %s, over the %s limit for a workflow file", p, sizeString(size), sizeString(limit))
}

// decodeContent decodes a contents-API file answer.
func decodeContent(f fileContent, maxBytes int64) ([]byte, error) {
	if f.Size > maxBytes || f.Encoding == "none" {
		return nil, &fileError{fileTooLarge(f.Path, f.Size, maxBytes)}
	}
	if f.Encoding != "base64" {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge sent %s in encoding %q, not base64", f.Path, f.Encoding)
	}
	clean := strings.NewReplacer("\n", "", "\r", "").Replace(f.Content)
	b, err := base64.StdEncoding.DecodeString(clean)
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the forge sent %s with invalid base64 content", f.Path)
	}
	if int64(len(b)) > maxBytes {
		return nil, &fileError{fileTooLarge(f.Path, int64(len(b)), maxBytes)}
	}
	return b, nil
}

// shortRef accepts "main", "refs/heads/main", "v1", "refs/tags/v1" and
// returns the name GitHub's and Gitea's commit lookups take.
func shortRef(ref string) (string, error) {
	name := strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
	if !validRefName(name) {
		return "", kiln.Errorf(kiln.CodeInvalid, "ref %q is not a valid branch, tag or commit", ref)
	}
	return name, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
