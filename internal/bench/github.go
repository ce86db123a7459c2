package bench

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/forge"
)

// benchGitHub answers the few GitHub REST calls a kiln server makes for
// the bench's repository: the contents API at a commit, the commit lookup
// of a dispatch's ref and commit statuses. It is part of the kiln binary
// (bench runs from it), so it is plain net/http on a loopback listener,
// not a test server: the test fakes of forge/forgetest must not be linked
// into a production binary.
//
// Every commit of the repository holds the same files, so any commit id is
// answered without being registered first; main resolves to benchMainSHA.
type benchGitHub struct {
	URL    string
	srv    *http.Server
	served chan struct{}     // closed when Serve returned
	files  map[string]string // path → content
}

var commitID = regexp.MustCompile(`^[0-9a-f]{40}$`)

// newBenchGitHub serves files (path → content) as the bench repository's
// tree at every commit, on a loopback port of its own.
func newBenchGitHub(files map[string]string) (*benchGitHub, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &benchGitHub{URL: "http://" + ln.Addr().String(), files: files, served: make(chan struct{})}
	// The only client is the bench's own server, on loopback.
	g.srv = &http.Server{Handler: http.HandlerFunc(g.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(g.served)
		_ = g.srv.Serve(ln)
	}()
	return g, nil
}

// Close stops serving, cutting off requests in flight, and returns when the
// serving goroutine has ended.
func (g *benchGitHub) Close() {
	_ = g.srv.Close()
	<-g.served
}

func (g *benchGitHub) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+benchAPIToken {
		writeGitHubJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/repos/"+benchRepo)
	if !ok {
		gitHubNotFound(w)
		return
	}
	ref := r.URL.Query().Get("ref")
	switch {
	case r.Method == http.MethodGet && rest == "":
		writeGitHubJSON(w, http.StatusOK, map[string]string{"full_name": benchRepo})
	case r.Method == http.MethodGet && strings.HasPrefix(rest, "/contents/") && (ref == "main" || commitID.MatchString(ref)):
		g.contents(w, strings.TrimPrefix(rest, "/contents/"))
	case r.Method == http.MethodGet && rest == "/commits/main":
		w.Header().Set("Content-Type", "application/vnd.github.sha")
		_, _ = w.Write([]byte(benchMainSHA))
	case r.Method == http.MethodPost && strings.HasPrefix(rest, "/statuses/"):
		_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<16))
		writeGitHubJSON(w, http.StatusCreated, map[string]string{"state": "pending"})
	default:
		gitHubNotFound(w)
	}
}

// contents answers a file with its base64 content and a directory with
// its entries, as GitHub's contents API does.
func (g *benchGitHub) contents(w http.ResponseWriter, p string) {
	if c, ok := g.files[p]; ok {
		writeGitHubJSON(w, http.StatusOK, map[string]any{
			"type": "file", "name": path.Base(p), "path": p, "size": len(c),
			"encoding": "base64", "content": base64.StdEncoding.EncodeToString([]byte(c)),
		})
		return
	}
	var names []string
	for fp := range g.files {
		if path.Dir(fp) == p {
			names = append(names, fp)
		}
	}
	if len(names) == 0 {
		gitHubNotFound(w)
		return
	}
	slices.Sort(names)
	entries := make([]map[string]any, 0, len(names))
	for _, fp := range names {
		// GitHub names each file's git blob, which kiln caches files by.
		entries = append(entries, map[string]any{"type": "file", "name": path.Base(fp), "path": fp, "size": len(g.files[fp]),
			"sha": forge.BlobID([]byte(g.files[fp]))})
	}
	writeGitHubJSON(w, http.StatusOK, entries)
}

func gitHubNotFound(w http.ResponseWriter) {
	writeGitHubJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
}

func writeGitHubJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
