package cli

import (
	"regexp"
	"testing"

	"github.com/kilnci/kiln/internal/api/apitest"
)

// `sources add --public-badges` makes a source's badges public, `sources
// list` says which sources' badges are public, and `sources update
// --public-badges=false` makes them private again without touching the
// rest of the source. Proves B315 (docs/behaviours.md).
func TestSourcesPublicBadges(t *testing.T) {
	o := newOp(t)
	repo := t.TempDir()
	apitest.Git(t, "", "init", "-q", "--bare", repo)
	o.ok(t, "sources", "add", "site", "--kind", "local", "--path", repo, "--public-badges")
	row := func(name string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + name + `\s.*$`).FindString(o.ok(t, "sources", "list"))
		if m == "" {
			t.Fatalf("sources list has no row for %s", name)
		}
		return m
	}
	contains(t, o.ok(t, "sources", "list"), "BADGES")
	contains(t, row("site"), "public")
	contains(t, row(apitest.SourceName), "private")
	contains(t, o.ok(t, "sources", "show", "site"), `"public_badges": true`)

	o.ok(t, "sources", "update", "site", "--public-badges=false")
	contains(t, row("site"), "private", repo)
	o.ok(t, "sources", "update", apitest.SourceName, "--public-badges")
	contains(t, row(apitest.SourceName), "public")
	src, err := o.Client.Source(t.Context(), apitest.SourceName)
	if err != nil || !src.PublicBadges || src.Local == nil || src.Local.Path != o.Repo {
		t.Fatalf("after update: %v %+v", err, src)
	}
	o.fails(t, ExitUsage, "invalid argument", "sources", "update", "site", "--public-badges=sometimes")
}
