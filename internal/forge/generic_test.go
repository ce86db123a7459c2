package forge

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
)

func genericSource(cloneURL string) *Source {
	return &Source{Name: "ge", Kind: kiln.SourceGeneric, Generic: &GenericConfig{
		Repository: "acme/app", CloneURL: cloneURL, DefaultBranch: "main",
		Auth: GenericAuth{Type: AuthHMAC, Secret: "s"},
	}}
}

func TestGenericRepoFetchesWithGit(t *testing.T) {
	for _, partial := range []bool{false, true} {
		name := "full shallow fetch"
		if partial {
			name = "partial clone"
		}
		t.Run(name, func(t *testing.T) {
			g, c1, c2, c3 := sampleRepo(t)
			if partial {
				g.git("config", "uploadpack.allowFilter", "true")
			}
			tmp := t.TempDir()
			repo, err := NewRepo(genericSource("file://"+g.dir), Options{TempDir: tmp})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			files, err := repo.Workflows(ctx, "", c2)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{".kiln/workflows/big.yml", ".kiln/workflows/ci.yml", ".kiln/workflows/link.yml", ".kiln/workflows/nightly.yaml"}; !slices.Equal(paths(files), want) {
				t.Fatalf("workflows: %v", paths(files))
			}
			if string(files[1].Content) != "on: push\njobs: {}\n" || kiln.ErrorCode(files[0].Err) != kiln.CodeTooLarge {
				t.Errorf("ci.yml %q, big.yml %v", files[1].Content, files[0].Err)
			}

			changed, ok, err := repo.ChangedFiles(ctx, &kiln.Event{Name: kiln.EventPush, Branch: "main", DefaultBranch: "main", Before: c1, SHA: c2})
			if err != nil || !ok || !slices.Equal(changed, []string{".kiln/workflows/big.yml", ".kiln/workflows/link.yml", "src/a.go"}) {
				t.Errorf("changed files: %v %v %v", changed, ok, err)
			}
			// A new branch is compared with the default branch's tip (tree to
			// tree): it also lists what main changed since the fork.
			changed, ok, err = repo.ChangedFiles(ctx, &kiln.Event{Name: kiln.EventPush, Branch: "feature", DefaultBranch: "main", Before: zeros, SHA: c3})
			if err != nil || !ok || !slices.Contains(changed, "src/feature.go") || !slices.Contains(changed, "src/a.go") {
				t.Errorf("new branch: %v %v %v", changed, ok, err)
			}

			for ref, want := range map[string]string{"main": c2, "v1": c1, "refs/heads/feature": c3, c1: c1} {
				if got, err := repo.Resolve(ctx, "", ref); err != nil || got != want {
					t.Errorf("Resolve(%s) = %s %v, want %s", ref, got, err, want)
				}
			}
			_, err = repo.Resolve(ctx, "", "nope")
			wantCode(t, err, kiln.CodeNotFound)

			_, err = repo.Workflows(ctx, "", strings.Repeat("9", 40))
			wantCode(t, err, kiln.CodeUnavailable)
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("temporary repositories left behind: %v", left)
			}
		})
	}
}

// TestGenericCredentialsStayOutOfURLs fetches from an HTTP server that
// records what git sends: the password arrives in a header.
func TestGenericCredentialsStayOutOfURLs(t *testing.T) {
	var mu sync.Mutex
	var auths, urls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths, urls = append(auths, r.Header.Get("Authorization")), append(urls, r.URL.String())
		mu.Unlock()
		http.Error(w, "no such repository", http.StatusNotFound)
	}))
	defer srv.Close()
	src := genericSource(srv.URL + "/acme/app.git")
	src.Generic.CloneUsername, src.Generic.ClonePassword = "bot", "pa55word"
	repo, _ := NewRepo(src, Options{TempDir: t.TempDir()})
	_, err := repo.Workflows(t.Context(), "", shaA)
	wantCode(t, err, kiln.CodeUnavailable)
	if strings.Contains(err.Error(), "pa55word") {
		t.Errorf("error holds the password: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("bot:pa55word"))
	if len(auths) == 0 || auths[0] != want {
		t.Errorf("Authorization headers %q, want %q", auths, want)
	}
	for _, u := range urls {
		if strings.Contains(u, "pa55word") {
			t.Errorf("password in URL %s", u)
		}
	}
	ci, _ := repo.Clone(t.Context(), "")
	if ci.URL != src.Generic.CloneURL || ci.Username != "bot" || ci.Password != "pa55word" {
		t.Errorf("Clone = %+v", ci)
	}
	if err := repo.PostStatus(t.Context(), "", shaA, Status{State: StateSuccess, Context: "kiln/ci"}); err != nil {
		t.Errorf("PostStatus: %v", err)
	}
}

func TestGenericEvent(t *testing.T) {
	src := genericSource("https://git.example.com/acme/app.git")
	parse := func(event, body string) (*GenericTrigger, error) {
		return GenericEvent(src, &Delivery{Kind: kiln.SourceGeneric, Event: event, Body: []byte(body)})
	}
	tr, err := parse("push", `{"sha":"`+shaA+`","before":"`+shaB+`","actor":"ci-bot","message":"deploy","extra":{"ignored":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	want := kiln.Event{Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: shaA, Before: shaB, Repository: "acme/app",
		CloneURL: "https://git.example.com/acme/app.git", DefaultBranch: "main", Actor: "ci-bot", Message: "deploy"}
	if !eventEqual(*tr.Event, want) || tr.Event.ChangedFilesStatus != "" {
		t.Errorf("push:\n got %+v\nwant %+v", *tr.Event, want)
	}

	tr, err = parse("push", `{"ref":"refs/tags/v2","changed_files":[]}`)
	if err != nil || tr.Event.Name != kiln.EventTag || tr.Event.Tag != "v2" || tr.Event.SHA != "" || tr.Event.ChangedFilesStatus != kiln.ChangedFilesFetched {
		t.Errorf("tag: %+v %v", tr, err)
	}
	tr, err = parse("push", `{"ref":"feature/x","changed_files":["a.go","docs/b.md"]}`)
	if err != nil || tr.Event.Branch != "feature/x" || !slices.Equal(tr.Event.ChangedFiles, []string{"a.go", "docs/b.md"}) {
		t.Errorf("branch with files: %+v %v", tr, err)
	}
	tr, err = parse("dispatch", `{"workflow":"deploy.yml","inputs":{"env":"prod","dry_run":true}}`)
	if err != nil || tr.Event.Name != kiln.EventDispatch || tr.Workflow != ".kiln/workflows/deploy.yml" || tr.Inputs["env"] != "prod" || tr.Event.Ref != "refs/heads/main" {
		t.Errorf("dispatch: %+v %v", tr, err)
	}
	many := make([]string, MaxChangedFiles+1)
	for i := range many {
		many[i] = `"f"`
	}
	if tr, err = parse("push", `{"changed_files":[`+strings.Join(many, ",")+`]}`); err != nil || tr.Event.ChangedFilesStatus != kiln.ChangedFilesUnavailable || tr.Event.ChangedFiles != nil {
		t.Errorf("too many files: %+v %v", tr.Event, err)
	}

	for _, c := range []struct{ event, body, msg string }{
		{"push", `[1,2]`, "must be an object"},
		{"push", `{"ref":7}`, "field ref must be a string"},
		{"push", `{"sha":"HEAD"}`, "sha \"HEAD\" is not a hexadecimal commit id"},
		{"push", `{"before":"` + strings.Repeat("x", 40) + `"}`, "before"},
		{"push", `{"ref":"--upload-pack=evil"}`, "not a valid branch"},
		{"push", `{"ref":"refs/pull/1/head"}`, "not a branch"},
		{"push", `{"workflow":"ci.yml"}`, "belong to dispatch events"},
		{"dispatch", `{"workflow":"../../etc/passwd.yml"}`, "not a file name"},
		{"dispatch", `{"workflow":"ci.json"}`, "ending in .yml"},
		{"push", `{"changed_files":[""]}`, "changed_files"},
		{"deploy", `{}`, "push or dispatch"},
	} {
		_, err := parse(c.event, c.body)
		if kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %s: %v; want %q", c.event, c.body, err, c.msg)
		}
	}
	noDefault := genericSource("https://git.example.com/a.git")
	noDefault.Generic.DefaultBranch = ""
	if _, err := GenericEvent(noDefault, &Delivery{Event: "push", Body: []byte(`{}`)}); !strings.Contains(kiln.ErrorMessage(err), "no default_branch") {
		t.Errorf("no ref and no default branch: %v", err)
	}
}

func FuzzGenericEvent(f *testing.F) {
	f.Add("push", []byte(`{"ref":"main","sha":"`+shaA+`","changed_files":["a"]}`))
	f.Add("dispatch", []byte(`{"workflow":"ci.yml","inputs":{"a":[1,{"b":null}]}}`))
	f.Add("push", []byte(`{"ref":"refs/tags/v1"}`))
	f.Add("push", []byte(`{"actor":"\u00e9\u00e9"}`))
	src := genericSource("https://git.example.com/acme/app.git")
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		tr, err := GenericEvent(src, &Delivery{Event: event, Body: body})
		if err != nil {
			if kiln.ErrorCode(err) != kiln.CodeInvalid {
				t.Fatalf("not an invalid-input error: %v", err)
			}
			return
		}
		ev := tr.Event
		if !ev.Name.Valid() || !strings.HasPrefix(ev.Ref, "refs/") || (ev.SHA != "" && checkSHA(ev.SHA) != nil) || len(ev.Actor) > maxActor {
			t.Fatalf("bad event %+v", ev)
		}
		if filepath.Dir(tr.Workflow) != WorkflowDir && tr.Workflow != "" {
			t.Fatalf("workflow %q escapes %s", tr.Workflow, WorkflowDir)
		}
	})
}
