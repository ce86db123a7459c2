package forge

import (
	"slices"
	"strings"
	"testing"
)

// A second commit whose workflow file did not change costs the directory's
// listing only; a changed file is read; a file whose content is not the
// blob its listing names is never kept.
func TestWorkflowFilesAreReadOncePerBlob(t *testing.T) {
	eachForge(t, Options{}, func(t *testing.T, f *fakeForge, repo Repo) {
		ci := fakeEntry{typ: "file", content: []byte("name: ci\n")}
		lint := fakeEntry{typ: "file", content: []byte("name: lint\n")}
		lying := fakeEntry{typ: "file", content: []byte("name: lying\n"), blob: strings.Repeat("0", 40)}
		f.trees[shaA] = map[string]fakeEntry{".kiln/workflows/ci.yml": ci, ".kiln/workflows/odd.yml": lying}
		f.trees[shaB] = map[string]fakeEntry{".kiln/workflows/ci.yml": ci, ".kiln/workflows/odd.yml": lying,
			".kiln/workflows/lint.yml": lint}
		f.trees[shaC] = map[string]fakeEntry{".kiln/workflows/ci.yml": {typ: "file", content: []byte("name: ci2\n")}}
		reads := func(sha string) []string {
			t.Helper()
			n := len(f.seen())
			files, err := repo.Workflows(t.Context(), fakeRepo, sha)
			if err != nil {
				t.Fatal(err)
			}
			for _, wf := range files {
				want := f.trees[sha][wf.Path].content
				if wf.Err != nil || string(wf.Content) != string(want) {
					t.Fatalf("%s at %s = %q, %v; want %q", wf.Path, sha[:1], wf.Content, wf.Err, want)
				}
			}
			var got []string
			for _, r := range f.seen()[n:] {
				if i := strings.Index(r, ".kiln/workflows/"); i >= 0 {
					name, _, _ := strings.Cut(r[i+len(".kiln/workflows/"):], "?")
					got = append(got, name)
				}
			}
			slices.Sort(got)
			return got
		}
		if got := reads(shaA); !slices.Equal(got, []string{"ci.yml", "odd.yml"}) {
			t.Fatalf("first commit read %q", got)
		}
		// ci.yml is the same blob: only the new file and the one whose
		// listed id its content does not match are read.
		if got := reads(shaB); !slices.Equal(got, []string{"lint.yml", "odd.yml"}) {
			t.Fatalf("second commit read %q, want lint.yml and odd.yml", got)
		}
		if got := reads(shaC); !slices.Equal(got, []string{"ci.yml"}) {
			t.Fatalf("a changed file: read %q, want ci.yml", got)
		}
	})
}

func TestIsBlob(t *testing.T) {
	// git hash-object of "hello\n", and of the empty file.
	if !isBlob("ce013625030ba8dba906f756967f9e9ca394464a", []byte("hello\n")) ||
		!isBlob("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", nil) {
		t.Error("a git blob id was not recognised")
	}
	if got := BlobID([]byte("hello\n")); got != "ce013625030ba8dba906f756967f9e9ca394464a" {
		t.Errorf("BlobID(hello) = %s, want git hash-object's", got)
	}
	// git hash-object --object-format=sha256 of "hello\n".
	if !isBlob("2cf8d83d9ee29543b34a87727421fdecb7e3f3a183d337639025de576db9ebb4", []byte("hello\n")) {
		t.Error("a SHA-256 blob id was not recognised")
	}
	for _, id := range []string{"", "ce01362503", strings.Repeat("0", 40), "ce013625030ba8dba906f756967f9e9ca394464a"} {
		if isBlob(id, []byte("hello")) {
			t.Errorf("isBlob(%q, hello) = true", id)
		}
	}
}
