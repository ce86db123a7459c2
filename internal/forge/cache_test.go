package forge

import (
	"slices"
	"strings"
	"testing"
)

func TestWorkflowCache(t *testing.T) {
	f := newFakeForge(t, false, "Bearer tok-123")
	f.trees[shaA] = map[string]fakeEntry{".kiln/workflows/ci.yml": {typ: "file", content: []byte("a: 1\n")}}
	f.trees[shaB] = map[string]fakeEntry{".kiln/workflows/ci.yml": {typ: "file", content: []byte(strings.Repeat("b", 600))}}
	f.trees[shaC] = map[string]fakeEntry{".kiln/workflows/ci.yml": {typ: "file", content: []byte(strings.Repeat("c", 600))}}
	inner, _ := NewRepo(apiForges[0].source(f.base()), Options{})
	repo := WithWorkflowCache(inner, 1000) // room for one of the 600-byte commits, not two
	ctx := t.Context()
	get := func(sha string) []WorkflowFile {
		t.Helper()
		files, err := repo.Workflows(ctx, fakeRepo, sha)
		if err != nil || len(files) != 1 {
			t.Fatalf("Workflows(%s) = %v, %v", sha[:1], files, err)
		}
		return files
	}
	requests := func() int { return len(f.seen()) }

	first := get(shaA)
	n := requests()
	again := get(shaA)
	if requests() != n || string(again[0].Content) != "a: 1\n" {
		t.Fatalf("a cached commit went to the forge again")
	}
	again[0].Path = "changed by the caller"
	if get(shaA)[0].Path != ".kiln/workflows/ci.yml" || first[0].Path != ".kiln/workflows/ci.yml" {
		t.Error("a caller's change reached the cache")
	}

	get(shaB) // the budget holds one 600-byte commit: B pushes out A,
	get(shaC) // and C pushes out B
	n = requests()
	get(shaC)
	if requests() != n {
		t.Error("the most recent commit was evicted")
	}
	get(shaB)
	if requests() == n {
		t.Error("the cache holds more than its byte budget")
	}

	// Failures are not cached, and other methods pass through.
	if _, err := repo.Workflows(ctx, "acme/missing", shaA); err == nil {
		t.Fatal("missing repository succeeded")
	}
	n = requests()
	repo.Workflows(ctx, "acme/missing", shaA)
	if requests() == n {
		t.Error("a failure was cached")
	}
	f.refs["main"] = shaA
	if sha, err := repo.Resolve(ctx, fakeRepo, "main"); err != nil || sha != shaA {
		t.Errorf("Resolve through the cache: %s %v", sha, err)
	}
	if !slices.Equal(paths(first), []string{".kiln/workflows/ci.yml"}) {
		t.Error("first answer changed")
	}
}
