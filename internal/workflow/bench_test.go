package workflow

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// BenchmarkParseFull parses the example that uses every supported key.
func BenchmarkParseFull(b *testing.B) {
	data, err := os.ReadFile("testdata/plans/full.yml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("full.yml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseLarge parses a 200-job workflow (a chain of needs, a matrix
// and expressions in every job): the size of a big monorepo pipeline.
func BenchmarkParseLarge(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("on: [push, pull_request]\njobs:\n")
	for i := range 200 {
		fmt.Fprintf(&sb, "  j%d:\n", i)
		if i > 0 {
			fmt.Fprintf(&sb, "    needs: [j%d]\n", i-1)
		}
		sb.WriteString("    matrix: {os: [linux, macos], go: [\"1.25\", \"1.26\"]}\n    runs_on: [\"${{ matrix.os }}\"]\n")
		sb.WriteString("    steps:\n      - run: go test ./... -run ${{ matrix.go }}\n        env: {BRANCH: \"${{ event.branch }}\"}\n      - if: failure()\n        run: echo failed\n")
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("large.yml", data); err != nil {
			b.Fatal(err)
		}
	}
}
