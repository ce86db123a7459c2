package forge

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

func BenchmarkVerifyGitHub(b *testing.B) {
	push := payloads(b)["push.payload.json"]
	big := bytes.Repeat([]byte(" "), 1<<20)
	for _, c := range []struct {
		name string
		body []byte
	}{{"push-7KiB", push}, {"1MiB", big}} {
		sig := Sign(testSecret, c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if err := VerifyGitHub(testSecret, c.body, sig); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReceiveGitHub is the whole ingress check of one delivery: read,
// verify, headers, JSON validity.
func BenchmarkReceiveGitHub(b *testing.B) {
	body := payloads(b)["pull_request.opened.payload.json"]
	hdr := ghHeaders("pull_request", body)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := httptest.NewRequest("POST", "/webhook/github/gh", bytes.NewReader(body))
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		if _, err := Receive(r, kiln.SourceGitHub, ghSource, BodyLimits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReporterReport(b *testing.B) {
	r := NewStatusReporter(lookupOf(newRecPoster()), ReporterConfig{})
	shas := make([]string, 500)
	for i := range shas {
		shas[i] = fmt.Sprintf("%040d", i)
	}
	st := Status{State: StatePending, Context: "kiln/ci", Description: "3 of 5 jobs done"}
	i := 0
	for b.Loop() {
		r.Report("src", fakeRepo, shas[i%len(shas)], st)
		i++
	}
}

func BenchmarkWorkflows(b *testing.B) {
	b.Run("github-api", func(b *testing.B) {
		f := newFakeForge(b, false, "Bearer tok-123")
		f.trees[shaA] = map[string]fakeEntry{
			".kiln/workflows/ci.yml":      {typ: "file", content: []byte(strings.Repeat("on: push\n", 100))},
			".kiln/workflows/release.yml": {typ: "file", content: []byte(strings.Repeat("on: tag\n", 100))},
		}
		repo, _ := NewRepo(apiForges[0].source(f.base()), Options{})
		for b.Loop() {
			if files, err := repo.Workflows(b.Context(), fakeRepo, shaA); err != nil || len(files) != 2 {
				b.Fatal(len(files), err)
			}
		}
	})
	b.Run("github-api-cached", func(b *testing.B) {
		f := newFakeForge(b, false, "Bearer tok-123")
		f.trees[shaA] = map[string]fakeEntry{".kiln/workflows/ci.yml": {typ: "file", content: []byte("on: push\n")}}
		inner, _ := NewRepo(apiForges[0].source(f.base()), Options{})
		repo := WithWorkflowCache(inner, 0)
		for b.Loop() {
			if files, err := repo.Workflows(b.Context(), fakeRepo, shaA); err != nil || len(files) != 1 {
				b.Fatal(len(files), err)
			}
		}
	})
	b.Run("local-git", func(b *testing.B) {
		g := newTestGit(b, false)
		sha := g.commit("c", map[string]string{".kiln/workflows/ci.yml": "on: push\n", ".kiln/workflows/release.yml": "on: tag\n"})
		repo, _ := NewRepo(localSource(g.dir), Options{})
		for b.Loop() {
			if files, err := repo.Workflows(b.Context(), "", sha); err != nil || len(files) != 2 {
				b.Fatal(len(files), err)
			}
		}
	})
}
