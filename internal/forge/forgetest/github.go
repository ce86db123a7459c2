// Package forgetest is a fake GitHub REST API for kiln's tests, speaking
// the real wire format of the endpoints kiln calls: repository contents at a
// ref, compare, pull request files, commit lookup, commit statuses, check
// runs and collaborators, and (SetApp) a GitHub App installation's token
// exchange and permissions. It is the edge kiln cannot run here (github.com), faked as
// an httptest server so requests round-trip through a real network
// connection. NewGitea serves the same endpoints as Gitea does, under
// /api/v1 with "token" authorization (their wire formats agree on them).
package forgetest

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Status is a commit status kiln posted.
type Status struct {
	Repo, SHA   string
	State       string `json:"state"`
	Context     string `json:"context"`
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
}

// GitHub is a fake GitHub API. Add commits with SetFiles; read posted
// statuses with Statuses.
type GitHub struct {
	*httptest.Server
	Token string // the bearer token requests must carry ("" accepts any)

	gitea    bool // Gitea's API root and authorization
	mu       sync.Mutex
	files    map[string]map[string]string // repo@sha → path → content
	refs     map[string]string            // repo@ref → sha
	changed  map[string][]string          // repo@base...head → files
	statuses []Status
	collabs  map[string]int // repo/user → answer of the collaborators API
	scopes   *string        // X-OAuth-Scopes on GET /user; nil: none (a fine-grained token)
	down     bool           // every request answered 503, as GitHub's outages do

	app           *App                         // SetApp: an App installation's tokens and permissions
	appTokens     map[string]map[string]string // minted installation token → its permissions
	checkRuns     []*CheckRun                  // by id - 1
	checksFail    int                          // FailChecks: every check run write answers this
	checksFailMsg string
}

// SetDown makes every request answer 503 Service Unavailable (true) or
// be served again (false).
func (g *GitHub) SetDown(down bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.down = down
}

// NewGitHub starts a fake GitHub API for the test.
func NewGitHub(t testing.TB) *GitHub {
	g := New()
	t.Cleanup(g.Close)
	return g
}

// NewGitea starts a fake Gitea API for the test: the same endpoints under
// /api/v1 (its URL is the instance's), authorized with "token <Token>".
func NewGitea(t testing.TB) *GitHub {
	g := newFake(true)
	t.Cleanup(g.Close)
	return g
}

// New starts a fake GitHub API on loopback outside a test (kiln bench);
// the caller closes it.
func New() *GitHub { return newFake(false) }

func newFake(gitea bool) *GitHub {
	g := &GitHub{gitea: gitea, files: map[string]map[string]string{}, refs: map[string]string{}, changed: map[string][]string{},
		collabs: map[string]int{}}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	return g
}

// SetScopes makes GET /user answer with X-OAuth-Scopes: scopes, as GitHub
// does for a classic token.
func (g *GitHub) SetScopes(scopes string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.scopes = &scopes
}

// SetCollaborator makes GET /repos/{repo}/collaborators/{user} answer
// status: 204 (may push), 404 (may not), or a failure such as 500. Users
// never set get 404.
func (g *GitHub) SetCollaborator(repo, user string, status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.collabs[repo+"/"+user] = status
}

// SetFiles makes repo hold files (path → content) at sha, and points ref
// (e.g. "main") at it when ref is not empty.
func (g *GitHub) SetFiles(repo, sha, ref string, files map[string]string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.files[repo+"@"+sha] = files
	if ref != "" {
		g.refs[repo+"@"+ref] = sha
	}
}

// SetChanged makes compare base...head list files.
func (g *GitHub) SetChanged(repo, base, head string, files []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changed[repo+"@"+base+"..."+head] = files
}

// Statuses returns the statuses posted so far, in order.
func (g *GitHub) Statuses() []Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Status(nil), g.statuses...)
}

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	down := g.down
	g.mu.Unlock()
	if down {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"message": "Service Unavailable"})
		return
	}
	scheme, urlPath := "Bearer ", r.URL.Path
	if g.gitea {
		scheme = "token "
		var ok bool
		if urlPath, ok = strings.CutPrefix(urlPath, "/api/v1"); !ok {
			notFound(w)
			return
		}
	}
	g.mu.Lock()
	app := g.app != nil && !g.gitea
	g.mu.Unlock()
	if app && g.serveApp(w, r) {
		return
	}
	if !app && g.Token != "" && r.Header.Get("Authorization") != scheme+g.Token {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
		return
	}
	if urlPath == "/user" && r.Method == http.MethodGet {
		g.mu.Lock()
		scopes := g.scopes
		g.mu.Unlock()
		if scopes != nil && !g.gitea {
			w.Header().Set("X-OAuth-Scopes", *scopes)
		}
		writeJSON(w, http.StatusOK, map[string]any{"login": "kiln-bot", "id": 1, "type": "User"})
		return
	}
	parts := strings.Split(strings.TrimPrefix(urlPath, "/"), "/")
	if len(parts) < 3 || parts[0] != "repos" {
		notFound(w)
		return
	}
	repo, rest := parts[1]+"/"+parts[2], append(parts[3:], "")
	g.mu.Lock()
	defer g.mu.Unlock()
	resource := rest[0]
	if resource == "commits" && len(rest) == 4 && rest[2] == "check-runs" {
		resource = "check-runs-list"
	}
	if app {
		need, level := permissionFor(r.Method, resource)
		if st, msg := g.appAllowed(r, need, level); st != 0 {
			writeJSON(w, st, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
			return
		}
	}
	switch {
	case !g.gitea && resource == "check-runs-list" && r.Method == http.MethodGet:
		g.checkRunsAPI(w, r, repo, rest)
	case !g.gitea && resource == "check-runs" && ((r.Method == http.MethodPost && len(rest) == 2) || (r.Method == http.MethodPatch && len(rest) == 3)):
		g.checkRunsAPI(w, r, repo, rest)
	case r.Method == http.MethodGet && rest[0] == "contents":
		g.contents(w, repo, strings.Join(rest[1:len(rest)-1], "/"), r.URL.Query().Get("ref"))
	case r.Method == http.MethodGet && rest[0] == "commits" && len(rest) == 3:
		sha, ok := g.refs[repo+"@"+rest[1]]
		if !ok {
			notFound(w)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.github.sha")
		w.Write([]byte(sha))
	case r.Method == http.MethodGet && rest[0] == "compare" && len(rest) == 3:
		files, ok := g.changed[repo+"@"+rest[1]]
		if !ok {
			notFound(w)
			return
		}
		var out struct {
			Files []map[string]string `json:"files"`
		}
		for _, f := range files {
			out.Files = append(out.Files, map[string]string{"filename": f, "status": "modified"})
		}
		writeJSON(w, http.StatusOK, out)
	case r.Method == http.MethodPost && rest[0] == "statuses" && len(rest) == 3:
		var st Status
		if err := json.NewDecoder(r.Body).Decode(&st); err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Problems parsing JSON"})
			return
		}
		st.Repo, st.SHA = repo, rest[1]
		g.statuses = append(g.statuses, st)
		writeJSON(w, http.StatusCreated, st)
	case r.Method == http.MethodGet && rest[0] == "collaborators" && len(rest) == 3:
		switch st, ok := g.collabs[repo+"/"+rest[1]]; {
		case !ok || st == http.StatusNotFound:
			notFound(w)
		case st == http.StatusNoContent:
			w.WriteHeader(http.StatusNoContent)
		default:
			writeJSON(w, st, map[string]string{"message": http.StatusText(st)})
		}
	case r.Method == http.MethodGet && len(rest) == 1 && g.knows(repo):
		writeJSON(w, http.StatusOK, map[string]any{"full_name": repo})
	default:
		notFound(w)
	}
}

func (g *GitHub) knows(repo string) bool {
	for k := range g.files {
		if strings.HasPrefix(k, repo+"@") {
			return true
		}
	}
	return false
}

func (g *GitHub) contents(w http.ResponseWriter, repo, p, ref string) {
	files, ok := g.files[repo+"@"+ref]
	if !ok {
		notFound(w)
		return
	}
	if c, ok := files[p]; ok {
		writeJSON(w, http.StatusOK, map[string]any{
			"type": "file", "name": path.Base(p), "path": p, "size": len(c),
			"encoding": "base64", "content": base64.StdEncoding.EncodeToString([]byte(c)),
		})
		return
	}
	var entries []map[string]any
	for fp, c := range files {
		if path.Dir(fp) == p {
			entries = append(entries, map[string]any{"type": "file", "name": path.Base(fp), "path": fp, "size": len(c)})
		}
	}
	if len(entries) == 0 {
		notFound(w)
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i]["path"].(string) < entries[j]["path"].(string) })
	writeJSON(w, http.StatusOK, entries)
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
