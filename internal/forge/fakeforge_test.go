package forge

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeForge is an httptest server speaking GitHub's or Gitea's REST wire
// format over an in-memory model of one repository, acme/app. It records
// every request so tests can check what kiln asked for.
type fakeForge struct {
	t      testing.TB
	gitea  bool
	token  string // the Authorization value kiln must send, e.g. "Bearer tok"
	srv    *httptest.Server
	prefix string // "" for GitHub, "/api/v1" for Gitea

	mu       sync.Mutex
	trees    map[string]map[string]fakeEntry // sha → path → entry
	compares map[string][]fakeFile           // "base...head" → files
	pulls    map[int][]fakeFile
	refs     map[string]string // ref name → sha
	statuses []postedStatus
	requests []string // "METHOD path?query"
	override func(w http.ResponseWriter, r *http.Request) bool
	// collaborators answers GET /repos/acme/app/collaborators/{user}:
	// the status per user (204 yes, 404 no, anything else a failure);
	// users it does not name get 404.
	collaborators map[string]int
	// scopes is GitHub's X-OAuth-Scopes header on GET /user: a classic
	// token's scopes; nil sends none, as for a fine-grained token.
	scopes *string
}

type fakeEntry struct {
	typ     string // file, symlink, dir
	content []byte
	size    int64  // reported size; len(content) when zero
	blob    string // reported blob id; the content's when empty
}

type fakeFile struct{ name, prev, status string }

type postedStatus struct {
	Repo, SHA string
	Body      map[string]any
	Auth      string
}

const fakeRepo = "acme/app"

func newFakeForge(t testing.TB, gitea bool, token string) *fakeForge {
	f := &fakeForge{
		t: t, gitea: gitea, token: token,
		trees: map[string]map[string]fakeEntry{}, compares: map[string][]fakeFile{},
		pulls: map[int][]fakeFile{}, refs: map[string]string{},
	}
	if gitea {
		f.prefix = "/api/v1"
	}
	mux := http.NewServeMux()
	p := f.prefix + "/repos/{owner}/{repo}"
	mux.HandleFunc("GET "+p, f.repo)
	mux.HandleFunc("GET "+p+"/contents/{path...}", f.contents)
	mux.HandleFunc("GET "+p+"/compare/{basehead...}", f.compare)
	mux.HandleFunc("GET "+p+"/pulls/{n}/files", f.pullFiles)
	mux.HandleFunc("POST "+p+"/statuses/{sha}", f.status)
	mux.HandleFunc("GET "+p+"/commits/{ref...}", f.commit) // GitHub
	mux.HandleFunc("GET "+p+"/commits", f.commitList)      // Gitea
	mux.HandleFunc("GET "+p+"/collaborators/{user}", f.collaborator)
	mux.HandleFunc("GET "+f.prefix+"/user", f.user)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		ov, token := f.override, f.token
		f.mu.Unlock()
		if ov != nil && ov(w, r) {
			return
		}
		if r.Header.Get("Authorization") != token {
			f.errorJSON(w, http.StatusUnauthorized, "Bad credentials")
			return
		}
		if !gitea && (r.Header.Get("Accept") != "application/vnd.github+json" && r.Header.Get("Accept") != "application/vnd.github.sha" ||
			r.Header.Get("X-GitHub-Api-Version") != "2022-11-28") {
			f.errorJSON(w, http.StatusBadRequest, "missing GitHub headers")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// base is the APIBase a source gives for this server.
func (f *fakeForge) base() string { return f.srv.URL }

func (f *fakeForge) setOverride(h func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	f.override = h
	f.mu.Unlock()
}

func (f *fakeForge) setToken(tok string) {
	f.mu.Lock()
	f.token = tok
	f.mu.Unlock()
}

func (f *fakeForge) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *fakeForge) posted() []postedStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]postedStatus(nil), f.statuses...)
}

func (f *fakeForge) errorJSON(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	if f.gitea {
		fmt.Fprintf(w, `{"message":%q,"url":"%s/api/swagger"}`, msg, f.srv.URL)
		return
	}
	fmt.Fprintf(w, `{"message":%q,"documentation_url":"https://docs.github.com/rest","status":"%d"}`, msg, code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeForge) repoOK(w http.ResponseWriter, r *http.Request) bool {
	if r.PathValue("owner")+"/"+r.PathValue("repo") != fakeRepo {
		f.errorJSON(w, http.StatusNotFound, "Not Found")
		return false
	}
	return true
}

// collaborator answers as both forges do: 204 with no body when the user
// may push, 404 with a message when not.
func (f *fakeForge) collaborator(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	f.mu.Lock()
	st, ok := f.collaborators[r.PathValue("user")]
	f.mu.Unlock()
	switch {
	case !ok || st == http.StatusNotFound:
		f.errorJSON(w, http.StatusNotFound, "Not Found")
	case st == http.StatusNoContent:
		w.WriteHeader(http.StatusNoContent)
	default:
		f.errorJSON(w, st, "Server Error")
	}
}

// user answers GET /user for the token's owner, with GitHub's
// X-OAuth-Scopes header when the token is a classic one.
func (f *fakeForge) user(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	scopes := f.scopes
	f.mu.Unlock()
	if scopes != nil && !f.gitea {
		w.Header().Set("X-OAuth-Scopes", *scopes)
		w.Header().Set("X-Accepted-OAuth-Scopes", "")
	}
	writeJSON(w, 200, map[string]any{"login": "kiln-bot", "id": 7, "type": "User"})
}

func (f *fakeForge) repo(w http.ResponseWriter, r *http.Request) {
	if f.repoOK(w, r) {
		writeJSON(w, 200, map[string]any{"id": 1, "full_name": fakeRepo, "default_branch": "main"})
	}
}

// contentObject is one entry as both APIs spell it. A listing carries no
// content (GitHub omits the fields, Gitea sends null).
func (f *fakeForge) contentObject(p string, e fakeEntry, withContent bool) map[string]any {
	size := e.size
	if size == 0 {
		size = int64(len(e.content))
	}
	blob := e.blob
	if blob == "" {
		blob = BlobID(e.content)
	}
	o := map[string]any{
		"type": e.typ, "name": path.Base(p), "path": p, "size": size,
		"sha":          blob,
		"url":          f.srv.URL + f.prefix + "/repos/" + fakeRepo + "/contents/" + p,
		"html_url":     "https://example.test/" + fakeRepo + "/blob/main/" + p,
		"git_url":      f.srv.URL + f.prefix + "/repos/" + fakeRepo + "/git/blobs/3d21ec5",
		"download_url": "https://raw.example.test/" + fakeRepo + "/main/" + p,
		"_links":       map[string]any{"self": f.srv.URL, "git": f.srv.URL, "html": f.srv.URL},
	}
	if f.gitea {
		o["encoding"], o["content"], o["target"], o["submodule_git_url"] = nil, nil, nil, nil
		o["last_commit_sha"] = "65f1bf27bc3bf70f64657658635e66094edbcb4d"
	}
	if withContent {
		enc := base64.StdEncoding.EncodeToString(e.content)
		if !f.gitea { // GitHub wraps base64 at 60 characters
			var b strings.Builder
			for len(enc) > 60 {
				b.WriteString(enc[:60] + "\n")
				enc = enc[60:]
			}
			b.WriteString(enc + "\n")
			enc = b.String()
		}
		o["encoding"], o["content"] = "base64", enc
		if size > 1<<20 && !f.gitea {
			o["encoding"], o["content"] = "none", ""
		}
	}
	return o
}

func (f *fakeForge) contents(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	f.mu.Lock()
	tree := f.trees[r.URL.Query().Get("ref")]
	f.mu.Unlock()
	p := r.PathValue("path")
	if e, ok := tree[p]; ok && e.typ != "dir" {
		writeJSON(w, 200, f.contentObject(p, e, true))
		return
	}
	var list []map[string]any
	for fp, e := range tree {
		if path.Dir(fp) == p {
			list = append(list, f.contentObject(fp, e, false))
		}
	}
	if list == nil {
		f.errorJSON(w, http.StatusNotFound, "Not Found")
		return
	}
	sort.Slice(list, func(i, j int) bool { return list[i]["path"].(string) < list[j]["path"].(string) })
	writeJSON(w, 200, list)
}

func (f *fakeForge) fileObject(ff fakeFile) map[string]any {
	o := map[string]any{
		"sha": "bbcd538c8e72b8c175046e27cc8f907076331401", "filename": ff.name, "status": cmpOr(ff.status, "modified"),
		"additions": 103, "deletions": 21, "changes": 124,
		"blob_url": "https://example.test/blob", "raw_url": "https://example.test/raw", "contents_url": f.srv.URL,
		"patch": "@@ -132,7 +132,7 @@ module Test @@ -1000,7 +1000,7 @@ module Test",
	}
	if ff.prev != "" {
		o["previous_filename"], o["status"] = ff.prev, "renamed"
	}
	return o
}

func (f *fakeForge) compare(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	f.mu.Lock()
	files, ok := f.compares[r.PathValue("basehead")]
	f.mu.Unlock()
	if !ok {
		f.errorJSON(w, http.StatusNotFound, "Not Found")
		return
	}
	var objs []map[string]any
	for _, ff := range files {
		objs = append(objs, f.fileObject(ff))
	}
	if f.gitea {
		// Gitea lists commits, each with the files it touched: split the
		// files over two commits, repeating one, as real histories do.
		half := len(objs) / 2
		c1 := map[string]any{"sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e", "files": objs[:half], "commit": map[string]any{"message": "one"}}
		c2 := map[string]any{"sha": "7dcb09b5b57875f334f61aebed695e2e4193db5e", "files": append(objs[half:], objs[:min(half, 1)]...), "commit": map[string]any{"message": "two"}}
		writeJSON(w, 200, map[string]any{"total_commits": 2, "commits": []any{c1, c2}})
		return
	}
	writeJSON(w, 200, map[string]any{
		"url": f.srv.URL, "status": "ahead", "ahead_by": 2, "behind_by": 0, "total_commits": 2,
		"base_commit": map[string]any{"sha": "6dcb09b5"}, "merge_base_commit": map[string]any{"sha": "6dcb09b5"},
		"commits": []any{map[string]any{"sha": "7dcb09b5"}}, "files": objs,
	})
}

func (f *fakeForge) pullFiles(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	n, _ := strconv.Atoi(r.PathValue("n"))
	f.mu.Lock()
	files, ok := f.pulls[n]
	f.mu.Unlock()
	if !ok {
		f.errorJSON(w, http.StatusNotFound, "Not Found")
		return
	}
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	per, _ := strconv.Atoi(q.Get("per_page"))
	if f.gitea {
		per, _ = strconv.Atoi(q.Get("limit"))
		w.Header().Set("X-Total-Count", strconv.Itoa(len(files)))
	} else if len(files) > 3000 {
		files = files[:3000] // GitHub lists at most 3000 files of a pull request
	}
	if page < 1 || per < 1 || per > 100 {
		f.errorJSON(w, http.StatusUnprocessableEntity, "bad paging")
		return
	}
	lo, hi := min((page-1)*per, len(files)), min(page*per, len(files))
	objs := []map[string]any{}
	for _, ff := range files[lo:hi] {
		objs = append(objs, f.fileObject(ff))
	}
	writeJSON(w, 200, objs)
}

func (f *fakeForge) status(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.errorJSON(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	f.mu.Lock()
	f.statuses = append(f.statuses, postedStatus{Repo: fakeRepo, SHA: r.PathValue("sha"), Body: body, Auth: r.Header.Get("Authorization")})
	f.mu.Unlock()
	resp := map[string]any{"id": 1, "url": f.srv.URL, "created_at": "2012-07-20T01:19:13Z", "creator": map[string]any{"login": "kiln"}}
	for k, v := range body {
		resp[k] = v
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (f *fakeForge) commit(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	f.mu.Lock()
	sha, ok := f.refs[r.PathValue("ref")]
	f.mu.Unlock()
	if !ok {
		f.errorJSON(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+r.PathValue("ref"))
		return
	}
	if r.Header.Get("Accept") == "application/vnd.github.sha" {
		w.Header().Set("Content-Type", "application/vnd.github.sha; charset=utf-8")
		fmt.Fprint(w, sha)
		return
	}
	writeJSON(w, 200, map[string]any{"sha": sha})
}

func (f *fakeForge) commitList(w http.ResponseWriter, r *http.Request) {
	if !f.repoOK(w, r) {
		return
	}
	f.mu.Lock()
	sha, ok := f.refs[r.URL.Query().Get("sha")]
	f.mu.Unlock()
	if !ok {
		f.errorJSON(w, http.StatusNotFound, "object does not exist")
		return
	}
	writeJSON(w, 200, []map[string]any{{"sha": sha, "url": f.srv.URL, "commit": map[string]any{"message": "m"}}})
}
