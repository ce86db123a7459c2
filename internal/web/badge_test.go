package web_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/web"
)

// A badge is public only for a source marked public_badges, and shows the
// state of the workflow's latest run on the branch asked for: no runs,
// running, passing, failing. A source not marked, or gone, is a 404 like a
// source that never existed; a bad branch is a 400; a name without .svg a
// 404. Proves B314 and B315 (docs/behaviours.md).
func TestBadges(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		d := newDash(t, db, web.Config{})
		anon := browserless(t)
		badge := func(path string) (int, string, string) {
			t.Helper()
			resp, err := anon.Get(d.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
		}
		says := func(path, state string) {
			t.Helper()
			code, ctype, svg := badge(path)
			file := path[strings.LastIndex(path, "/")+1:]
			workflow, _, _ := strings.Cut(file, ".svg")
			if code != http.StatusOK || !strings.HasPrefix(ctype, "image/svg+xml") || !strings.HasPrefix(svg, "<svg") ||
				!strings.Contains(svg, "<title>"+workflow+": "+state+"</title>") {
				t.Fatalf("%s: %d %s, want a badge saying %q:\n%s", path, code, ctype, state, svg)
			}
		}
		notFound := func(path string) {
			t.Helper()
			if code, _, body := badge(path); code != http.StatusNotFound {
				t.Fatalf("%s: %d, want 404:\n%s", path, code, body)
			}
		}
		setPublic := func(on bool) {
			t.Helper()
			src, err := d.Client.UpdateSource(ctx, apitest.SourceName, map[string]any{"public_badges": on})
			if err != nil || src.PublicBadges != on {
				t.Fatalf("public_badges %v: %v, %+v", on, err, src)
			}
		}

		notFound("/badge/app/ci.svg?branch=main") // not public yet
		notFound("/badge/ghost/ci.svg")
		setPublic(true)
		says("/badge/app/ci.svg?branch=main", "no runs")

		d.Dispatch(t) // run 1 on main: pending
		says("/badge/app/ci.svg?branch=main", "running")
		says("/badge/app/ci.svg", "running") // any branch
		says("/badge/app/ci.svg?branch=release", "no runs")
		says("/badge/app/deploy.svg?branch=main", "no runs") // no such workflow: never ran
		build := d.Claim(t, "agent-1")
		d.Finish(t, build, kiln.JobSuccess)
		test := d.Claim(t, "agent-1")
		d.Finish(t, test, kiln.JobSuccess)
		says("/badge/app/ci.svg?branch=main", "passing")

		d.Dispatch(t) // run 2 fails: the latest run decides
		says("/badge/app/ci.svg?branch=main", "running")
		d.Finish(t, d.Claim(t, "agent-1"), kiln.JobFailed)
		says("/badge/app/ci.svg?branch=main", "failing")

		for _, bad := range []string{"?branch=a..b", "?branch=", "?branch=-x", "?branch=a%20b", "?branch=a%00b",
			"?branch=" + strings.Repeat("b", 256), "?branch=main&x=1", "?x=1", "?branch=main&branch=dev"} {
			if code, _, _ := badge("/badge/app/ci.svg" + bad); code != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", bad, code)
			}
		}
		notFound("/badge/app/ci?branch=main")
		notFound("/badge/app/ci.png")
		notFound("/badge/app/" + strings.Repeat("w", 201) + ".svg")
		notFound("/badge/app/%3Cscript%3E%0A.svg")

		// A name with markup is escaped in the image.
		if _, _, svg := badge("/badge/app/%3Cb%3E.svg"); strings.Contains(svg, "<b>") || !strings.Contains(svg, "&lt;b&gt;") {
			t.Fatalf("the workflow name is not escaped:\n%s", svg)
		}

		setPublic(false)
		notFound("/badge/app/ci.svg?branch=main")
	}, storetest.ReleaseWith(engine.Release))
}
