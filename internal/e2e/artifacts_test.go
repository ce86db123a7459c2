package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

const artifactWorkflow = `name: artifacts
on: push
jobs:
  build:
    steps:
      - run: mkdir -p dist/sub && echo binary > dist/app && echo nested > dist/sub/lib && echo skip > dist/x.tmp
    artifacts:
      - name: dist
        paths: [./dist, "!dist/*.tmp", nothing-here]
  test:
    needs: [build]
    matrix:
      shard: [a, b]
    steps:
      - run: test "$(cat dist/app)" = binary && test "$(cat dist/sub/lib)" = nested && test ! -e dist/x.tmp && echo "report $SHARD" > report.txt
        env: {SHARD: "${{ matrix.shard }}"}
    artifacts:
      - name: report
        paths: [report.txt]
`

// B203, B204, B205: a build job's artifact (a path matching nothing only
// warns) is unpacked into its dependent's workspace before its first step;
// a matrix job's artifact names carry their matrix values; people list
// and download them with the CLI.
func TestBuildPublishesAnArtifactTheTestJobUses(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	localRun(t, s, map[string]string{"artifacts": artifactWorkflow})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "box"})
	startAgent(t, s.URL, secret, agentOpts{id: "box-1"})

	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 2*time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s\nbuild setup log: %q", describeRun(run), texts(logLines(t, s.Client, run.ID, "build", intp(-1))))
	}
	setup := strings.Join(texts(logLines(t, s.Client, run.ID, "build", intp(-1))), "\n")
	if !strings.Contains(setup, `warning: artifact "dist": path "nothing-here" matched no file`) ||
		!strings.Contains(setup, `artifact "dist": 2 files uploaded`) {
		t.Fatalf("build's setup log:\n%s", setup)
	}
	fetched := strings.Join(texts(logLines(t, s.Client, run.ID, "test (a)", intp(-1))), "\n")
	if !strings.Contains(fetched, `artifact "dist": 2 files`) {
		t.Fatalf("test's setup log:\n%s", fetched)
	}

	o := newOperator(t, s.URL, s.AdminToken)
	list := o.run(0, "artifacts", "list", "1").stdout
	for _, want := range []string{"dist", "report (a)", "report (b)"} {
		if !strings.Contains(list, want) {
			t.Fatalf("artifacts list lacks %q:\n%s", want, list)
		}
	}
	o.run(0, "artifacts", "get", "1", "dist", "--dir", "out")
	b, err := os.ReadFile(filepath.Join(o.dir, "out", "dist", "dist", "sub", "lib"))
	if err != nil || string(b) != "nested\n" {
		t.Fatalf("downloaded dist/sub/lib: %q, %v", b, err)
	}
	o.run(0, "artifacts", "get", "1", "--dir", "all")
	if b, err := os.ReadFile(filepath.Join(o.dir, "all", "report (b)", "report.txt")); err != nil || string(b) != "report b\n" {
		t.Fatalf("downloaded report (b): %q, %v", b, err)
	}
	if res := o.run(1, "artifacts", "get", "1", "missing"); !strings.Contains(res.stderr, `no artifact "missing"`) {
		t.Fatalf("a missing artifact: %s", res)
	}
}
