package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
)

const cacheWorkflow = `name: caches
on: push
jobs:
  build:
    steps:
      - run: |
          if [ -f .deps/stamp ]; then echo "warm: $(cat .deps/stamp)"; else mkdir -p .deps && echo "from run $RUN" > .deps/stamp && echo cold; fi
        env: {RUN: "${{ run.number }}"}
    cache:
      - key: deps-${{ hashFiles('./README', '!./nothing') }}
        paths: [.deps]
        restore_keys: [deps-]
  broken:
    steps:
      - run: mkdir -p .out && echo x > .out/x && exit 1
    cache:
      - key: broken-1
        paths: [.out]
`

// B216: a second run restores the cache the first saved (its key from
// hashFiles() with "./" patterns), and the job's log says what was
// restored from where, or that nothing was and where it looked; a failed
// job saves nothing.
func TestASecondRunRestoresTheCache(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	localRun(t, s, map[string]string{"caches": cacheWorkflow})
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "box"})
	startAgent(t, s.URL, secret, agentOpts{id: "box-1"})

	setup := func(run api.Run, job string) string {
		return strings.Join(texts(logLines(t, s.Client, run.ID, job, intp(-1))), "\n")
	}
	steps := func(run api.Run) string {
		return strings.Join(texts(logLines(t, s.Client, run.ID, "build", intp(0))), "\n")
	}
	// README holds "app\n": GitHub's hashFiles('README').
	const key = `deps-d1f6b172765f3b1a87dbf5350151e0336c1dacfe6a3d2c429148ae762631aa82`
	first := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 2*time.Minute)
	if first.Status != kiln.RunFailed {
		t.Fatalf("first run: %s", describeRun(first))
	}
	if log := setup(first, "build"); !strings.Contains(log, `no cache found (searched refs/heads/main)`) || !strings.Contains(log, `saved (1 files)`) {
		t.Fatalf("first build's setup log:\n%s", log)
	}
	if log := steps(first); !strings.Contains(log, "cold") {
		t.Fatalf("first build's step log:\n%s", log)
	}
	if log := setup(first, "broken"); !strings.Contains(log, `cache "broken-1": not saved: the job did not succeed`) {
		t.Fatalf("first broken's setup log:\n%s", log)
	}

	second := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, 2*time.Minute)
	log := setup(second, "build")
	if !strings.Contains(log, `restored "deps-`) || !strings.Contains(log, `from refs/heads/main (exact match): 1 files`) ||
		!strings.Contains(log, `not saved: it was restored from an exact match`) {
		t.Fatalf("second build's setup log:\n%s", log)
	}
	if !strings.Contains(log, key) {
		t.Errorf("the key is not GitHub's hashFiles of README (%s):\n%s", key, log)
	}
	if log := steps(second); !strings.Contains(log, "warm: from run 1") {
		t.Fatalf("second build's step log:\n%s", log)
	}
	if log := setup(second, "broken"); !strings.Contains(log, `cache "broken-1": no cache found`) {
		t.Fatalf("second broken's setup log:\n%s", log)
	}
}
