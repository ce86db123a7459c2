package trigger

import (
	"testing"
)

func BenchmarkFromGitHubPullRequest(b *testing.B) {
	body := readFixture(b, "github/pull_request.synchronize.payload.json")
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := FromGitHub("pull_request", body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	w := wf(b, fuzzOn[1])
	ev := push("release/1.2", "README.md", "docs/a.md", "internal/store/jobs.go")
	for b.Loop() {
		if d := Match(w, ev); !d.Matched {
			b.Fatal(d.Summary)
		}
	}
}
