package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/storage/storagetest"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

const sharedWorkflow = `on: push
jobs:
  build:
    steps:
      - run: |
          if [ -f .deps/stamp ]; then echo "deps warm"; else mkdir -p .deps && echo x > .deps/stamp && echo "deps cold"; fi
          mkdir -p dist && echo "binary of run $RUN" > dist/app && echo "built run $RUN"
          if [ "$RUN" = 3 ]; then
            echo "waiting for the gate"
            for i in $(seq 1 1200); do [ -f "$GATE" ] && break; sleep 0.05; done
            echo "gate opened"
          fi
        env: {RUN: "${{ run.number }}", GATE: "%s"}
    cache:
      - key: deps-${{ hashFiles('./README') }}
        paths: [.deps]
    artifacts:
      - name: dist
        paths: [dist]
  test:
    needs: [build]
    steps:
      - run: echo "testing $(cat dist/app)"
`

// B224: two servers on one PostgreSQL database with S3 storage (a real
// versitygw): a run whose agent is connected to server A prints the same
// logs, and downloads the same artifact, through either server, and the
// next run restores the cache the first saved, which either server's API
// shows in the job's log; `kiln logs --follow` on B streams a job running
// on A's agent while it runs.
func TestTwoServersShareLogsArtifactsAndCaches(t *testing.T) {
	t.Parallel()
	dbURL := storetest.PostgresURL(t)
	s3args, env := s3Storage(t)
	args := append(clusterArgs(dbURL), s3args...)
	srvA := startServerProcEnv(t, t.TempDir(), 0, env, args...)
	ca := procClient(t, srvA)
	srvB := startServerProcEnv(t, t.TempDir(), 0, env, args...)
	cb, err := api.NewClient(srvB.URL, srvA.adminToken(t))
	if err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	r := newRepo(t, map[string]string{"README": "app\n", workflow("shared"): fmt.Sprintf(sharedWorkflow, gate)})
	addLocalSource(t, ca, "app", r.dir)
	secret, _ := agentToken(t, ca, api.CreateTokenRequest{Name: "a"})
	startAgent(t, srvA.URL, secret, agentOpts{id: "a1"})
	waitConnected(t, ca, "a1")

	first := waitRun(t, cb, triggerOne(t, ca, "app").ID, 2*time.Minute)
	if first.Status != kiln.RunSuccess {
		t.Fatalf("first run: %s", describeRun(first))
	}
	oa, ob := newOperator(t, srvA.URL, srvA.adminToken(t)), newOperator(t, srvB.URL, srvA.adminToken(t))
	for _, job := range []string{"build", "test"} {
		la, lb := oa.run(0, "logs", "1", job).stdout, ob.run(0, "logs", "1", job).stdout
		if la != lb {
			t.Fatalf("kiln logs 1 %s differs between the servers:\nA:\n%s\nB:\n%s", job, la, lb)
		}
		want := map[string]string{"build": "built run 1", "test": "testing binary of run 1"}[job]
		if !strings.Contains(lb, want) {
			t.Fatalf("kiln logs 1 %s on B lacks %q:\n%s", job, want, lb)
		}
		t.Logf("kiln logs 1 %s (the same on A and B):\n%s", job, lb)
	}
	for _, o := range []*operator{oa, ob} {
		o.run(0, "artifacts", "get", "1", "dist", "--dir", "out")
		b, err := os.ReadFile(filepath.Join(o.dir, "out", "dist", "dist", "app"))
		if err != nil || string(b) != "binary of run 1\n" {
			t.Fatalf("the artifact downloaded: %q, %v", b, err)
		}
	}

	second := waitRun(t, ca, triggerOne(t, cb, "app").ID, 2*time.Minute)
	if second.Status != kiln.RunSuccess {
		t.Fatalf("second run: %s", describeRun(second))
	}
	for _, c := range []*api.Client{ca, cb} {
		setup := strings.Join(texts(logLines(t, c, second.ID, "build", intp(-1))), "\n")
		if !strings.Contains(setup, "from refs/heads/main (exact match)") {
			t.Fatalf("the second build's setup log:\n%s", setup)
		}
	}
	if out := ob.run(0, "logs", "2", "build").stdout; !strings.Contains(out, "deps warm") {
		t.Fatalf("the second build did not see the cache:\n%s", out)
	}

	// A live follow on B of a job whose agent is connected to A: the job
	// waits for the gate, which opens only once B has streamed its line.
	triggerOne(t, ca, "app")
	follow := startProc(t, "kiln-logs-follow-b", append(baseEnv(t), ob.env...), "logs", "3", "build", "--follow")
	waittest.UntilState(t, time.Minute, "logs --follow on B to print the running job's line", func() (bool, string) {
		return strings.Contains(follow.log.String(), "waiting for the gate"), follow.log.String()
	})
	if strings.Contains(follow.log.String(), "gate opened") || follow.exited() {
		t.Fatalf("logs --follow went ahead of the job: %s", follow.log.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := follow.wait(t, time.Minute); code != 0 {
		t.Fatalf("logs --follow on B exited %d: %s", code, follow.log.String())
	}
	if out := follow.log.String(); !strings.Contains(out, "gate opened") {
		t.Fatalf("logs --follow on B printed:\n%s", out)
	}
}

// s3Storage starts a versitygw bucket and returns the server flags that
// use it and the environment that holds its keys.
func s3Storage(t *testing.T) (args, env []string) {
	t.Helper()
	s3 := storagetest.StartVersitygw(t)
	bucket := s3.NewBucket(t)
	env = []string{"KILN_E2E_S3_KEY=" + s3.AccessKey, "KILN_E2E_S3_SECRET=" + s3.SecretKey}
	args = []string{"--set", "storage.backend=s3", "--set", "storage.s3.endpoint=" + s3.Endpoint,
		"--set", "storage.s3.bucket=" + bucket, "--set", "storage.s3.region=" + s3.Region, "--set", "storage.s3.path_style=true",
		"--set", "storage.s3.access_key_env=KILN_E2E_S3_KEY", "--set", "storage.s3.secret_key_env=KILN_E2E_S3_SECRET"}
	return args, env
}
