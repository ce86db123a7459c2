package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// The job spec benchmarks measure the server's CPU per job on the way from
// a matched workflow to a job.dispatch frame: building the spec, releasing
// the job, encoding the frame (ns/job).
//
//	go test -run '^$' -bench 'JobSpec|StartRun' -count 5 ./internal/engine/

// benchWorkflow has 16 matrix roots with env, runs_on and step expressions,
// and a dependent with an if:.
const benchWorkflow = `
name: ci
on: push
env:
  GOFLAGS: -mod=readonly
  BUILD: "${{ event.branch }}-${{ run.number }}"
jobs:
  test:
    runs_on: [linux, "${{ matrix.arch }}"]
    matrix:
      go: ["1.23", "1.24", "1.25", "1.26"]
      arch: [amd64, arm64, riscv64, s390x]
    env:
      GO_VERSION: "${{ matrix.go }}"
      TAG: "${{ event.branch }}-${{ matrix.arch }}-${{ run.attempt }}"
    steps:
      - name: build
        run: go build ./...
      - name: test
        run: go test -run "${{ matrix.arch }}" ./...
        env: {X: "${{ env.GO_VERSION }}"}
  deploy:
    needs: [test]
    if: "${{ event.branch == 'main' && needs.test.result == 'success' }}"
    runs_on: [linux]
    steps:
      - run: ./deploy.sh
`

func benchEvent() *kiln.Event {
	return &kiln.Event{
		Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: strings.Repeat("a", 40), Before: strings.Repeat("b", 40),
		Repository: "acme/app", CloneURL: "https://github.com/acme/app.git", Actor: "alice", DefaultBranch: "main",
		Message: "Fix the thing\n\nLonger description of the change.",
	}
}

const benchRoots = 16

// benchSend is the fleet's dispatch path: read the stored spec, make the
// checkout with credentials, embed the spec in the frame.
func benchSend(c store.Claimed) ([]byte, error) {
	spec, err := jobspec.DecodeSendable(c.Spec)
	if err != nil {
		return nil, err
	}
	var co *proto.Checkout
	if src := spec.Checkout; src != nil {
		co = &proto.Checkout{URL: "https://github.com/acme/app.git", Ref: src.Ref, SHA: src.SHA,
			Auth: &proto.GitAuth{Username: "x-access-token", Password: "ghs_0123456789"}}
	}
	return proto.EncodeDispatch(&proto.Dispatch{JobID: c.JobID, RunID: c.RunID, LeaseEpoch: c.Epoch, Attempt: c.Attempt}, spec.Agent, co)
}

// BenchmarkJobSpec is the server's CPU per job for a job's spec, without a
// database: build the run's specs, release the roots, encode their
// job.dispatch frames. ns/job = one root through all three.
func BenchmarkJobSpec(b *testing.B) {
	wf, err := workflow.Parse(".kiln/workflows/ci.yml", []byte(benchWorkflow))
	if err != nil {
		b.Fatal(err)
	}
	ev := benchEvent()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		nr, err := newRun(runInput{wf: wf, content: []byte(benchWorkflow), event: ev, decision: json.RawMessage(`[]`), source: "gh", attempt: 1})
		if err != nil {
			b.Fatal(err)
		}
		for k, nj := range nr.Jobs {
			if len(nj.Needs) > 0 {
				continue
			}
			rel := Release(store.ReadyJob{ID: fmt.Sprint(k), RunID: "run", RunNumber: int64(i + 1), Name: nj.Name, Base: nj.Base,
				Matrix: nj.Matrix, Spec: nj.Spec, Requirement: nj.Requirement})
			if rel.Fail != "" || rel.Skip {
				b.Fatalf("release: %+v", rel)
			}
			if _, err := benchSend(store.Claimed{JobID: "job-" + fmt.Sprint(k), RunID: "run", Epoch: 1, Attempt: 1, Spec: rel.Spec}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRoots), "ns/job")
}

// BenchmarkStartRun is the same path through a real store: Start creates
// the run (its roots released in the transaction), an agent claims them and
// their frames are encoded.
func BenchmarkStartRun(b *testing.B) {
	wf, err := workflow.Parse(".kiln/workflows/ci.yml", []byte(benchWorkflow))
	if err != nil {
		b.Fatal(err)
	}
	ev := benchEvent()
	match := Match{Workflow: wf, Content: []byte(benchWorkflow), Decision: trigger.Match(wf, ev)}
	agent := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "amd64", "arm64", "riscv64", "s390x")}
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			ctx := context.Background()
			eng := benchEngine(b, be.URL(b))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := eng.Start(ctx, StartRequest{Source: "gh", Event: ev, Matches: []Match{match}}, nil); err != nil {
					b.Fatal(err)
				}
				cs, err := eng.db.Queue().Claim(ctx, "agent-1", agent, benchRoots)
				if err != nil || len(cs) != benchRoots {
					b.Fatalf("claimed %d: %v", len(cs), err)
				}
				for _, c := range cs {
					if _, err := benchSend(c); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRoots), "ns/job")
		})
	}
}

func benchEngine(b *testing.B, url string) *Engine {
	db, err := store.Open(context.Background(), store.Config{URL: url, Releaser: Release})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return New(db, nil, Config{})
}
