package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/store"
)

// collect reads a log query to the end.
func collect(t *testing.T, h *apitest.Harness, run string, q api.LogQuery) []api.LogLine {
	t.Helper()
	var out []api.LogLine
	if err := h.Client.Logs(ctx, run, q, func(l api.LogLine) error { out = append(out, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func texts(lines []api.LogLine) string {
	var b []string
	for _, l := range lines {
		b = append(b, l.Text)
	}
	return strings.Join(b, ",")
}

func intp(n int) *int { return &n }

func TestLogHistory(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		l := h.Claim(t, "agent-1")
		h.Log(t, l, 1, 1, "v1", "v2")
		h.Log(t, l, -1, 1, "clone")
		h.Log(t, l, 0, 1, "c1", "c2", "c3")

		all := collect(t, h, "1", api.LogQuery{})
		if got := texts(all); got != "clone,c1,c2,c3,v1,v2" {
			t.Fatalf("history = %s", got)
		}
		first := all[0]
		if first.Job != "build" || first.JobID != l.JobID || first.Attempt != 1 || first.Step != -1 ||
			first.StepName != "checkout" || first.Seq != 1 || first.Stream != "stdout" || first.TimeMS == 0 {
			t.Fatalf("first line: %+v", first)
		}
		if all[1].StepName != "compile" || all[4].StepName != "vet" {
			t.Fatalf("step names: %+v", all)
		}
		if got := texts(collect(t, h, "1", api.LogQuery{Job: "build", Step: intp(0)})); got != "c1,c2,c3" {
			t.Fatalf("step 0 = %s", got)
		}
		if got := texts(collect(t, h, "1", api.LogQuery{Job: l.JobID, Step: intp(0), After: 1})); got != "c2,c3" {
			t.Fatalf("step 0 after 1 = %s", got)
		}
		if got := texts(collect(t, h, "1", api.LogQuery{Limit: 2})); got != "clone,c1" {
			t.Fatalf("limit 2 = %s", got)
		}
		if got := collect(t, h, "1", api.LogQuery{Job: "test"}); len(got) != 0 {
			t.Fatalf("a job that never ran has lines: %+v", got)
		}
		status, body := raw(t, h, "GET", "/api/v1/runs/1/logs?job=build&step=1", "")
		if status != http.StatusOK || strings.Count(string(body), "\n") != 2 || !strings.Contains(string(body), `"text":"v2"`) {
			t.Fatalf("raw NDJSON: %d %s", status, body)
		}
	})
}

func TestLogBadQueries(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	h.Dispatch(t)
	for q, want := range map[string]string{
		"?after=3":                   "give job and step",
		"?job=build&after=3":         "give job and step",
		"?step=x":                    "step",
		"?step=-2":                   "step",
		"?limit=0":                   "limit",
		"?follow=maybe":              "follow",
		"?jbo=build":                 `unknown query parameter "jbo"`,
		"?job=build&after=-1&step=0": "after",
	} {
		wantError(t, h, http.StatusBadRequest, kiln.CodeInvalid, "GET", "/api/v1/runs/1/logs"+q, "", want)
	}
	wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/runs/1/logs?job=deploy", "", `no job "deploy"`)
	wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/runs/2/logs", "", "no run #2")
}

// follower follows logs in the background.
type follower struct {
	lines chan api.LogLine
	done  chan error
}

func follow(h *apitest.Harness, run string, q api.LogQuery, slow <-chan struct{}) *follower {
	f := &follower{lines: make(chan api.LogLine, 100000), done: make(chan error, 1)}
	q.Follow = true
	go func() {
		f.done <- h.Client.Logs(ctx, run, q, func(l api.LogLine) error {
			if slow != nil {
				<-slow
			}
			f.lines <- l
			return nil
		})
	}()
	return f
}

// next waits for n lines.
func (f *follower) next(t *testing.T, n int) []api.LogLine {
	t.Helper()
	var out []api.LogLine
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case l := <-f.lines:
			out = append(out, l)
			continue
		default:
		}
		select {
		case l := <-f.lines:
			out = append(out, l)
		case err := <-f.done:
			f.done <- err
			if len(f.lines) > 0 {
				continue
			}
			t.Fatalf("the stream ended after %d of %d lines: %v", len(out), n, err)
		case <-timeout:
			t.Fatalf("got %d of %d lines", len(out), n)
		}
	}
	return out
}

// end waits for the stream to end by itself and returns what came after.
func (f *follower) end(t *testing.T) []api.LogLine {
	t.Helper()
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatalf("the stream failed: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end after its job finished")
	}
	var rest []api.LogLine
	for {
		select {
		case l := <-f.lines:
			rest = append(rest, l)
		default:
			return rest
		}
	}
}

// Proves B57 (docs/behaviours.md).
func TestFollowStreamsHistoryThenLiveLinesAndEndsWithTheJob(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		l := h.Claim(t, "agent-1")
		h.Log(t, l, 0, 1, "old1", "old2")
		f := follow(h, "1", api.LogQuery{Job: "build"}, nil)
		if got := texts(f.next(t, 2)); got != "old1,old2" {
			t.Fatalf("history = %s", got)
		}
		// The history arrived, so the stream is subscribed: these are live.
		h.Log(t, l, 0, 3, "live3")
		h.Log(t, l, 0, 2, "old2", "live3", "live4") // a replay overlaps
		h.Log(t, l, 1, 1, "vet1")
		if got := texts(f.next(t, 3)); got != "live3,live4,vet1" {
			t.Fatalf("live = %s", got)
		}
		h.Log(t, l, 1, 2, "vet2")
		h.Finish(t, l, kiln.JobSuccess)
		if got := texts(f.end(t)); got != "vet2" {
			t.Fatalf("after finish = %q", got)
		}
	})
}

func TestFollowAWholeRunFollowsJobsAsTheyStart(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		f := follow(h, "1", api.LogQuery{}, nil)
		build := h.Claim(t, "agent-1")
		h.Log(t, build, 0, 1, "b1")
		if got := texts(f.next(t, 1)); got != "b1" {
			t.Fatalf("build = %s", got)
		}
		h.Finish(t, build, kiln.JobSuccess)
		test := h.Claim(t, "agent-1")
		if test.Name != "test" {
			t.Fatalf("claimed %s", test.Name)
		}
		h.Log(t, test, 0, 1, "t1", "t2")
		got := f.next(t, 2)
		if texts(got) != "t1,t2" || got[0].Job != "test" {
			t.Fatalf("test = %+v", got)
		}
		h.Finish(t, test, kiln.JobFailed)
		if rest := f.end(t); len(rest) != 0 {
			t.Fatalf("extra lines: %+v", rest)
		}
	})
}

func TestFollowReadsANewAttemptFromItsStart(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		first := h.Dispatched(t, "agent-1")
		h.Log(t, first, -1, 1, "attempt1")
		f := follow(h, "1", api.LogQuery{Job: "build"}, nil)
		if got := f.next(t, 1); got[0].Attempt != 1 {
			t.Fatalf("first attempt: %+v", got)
		}
		if _, err := h.DB.Queue().Requeue(ctx, first.Lease, "agent busy"); err != nil {
			t.Fatal(err)
		}
		second := h.Claim(t, "agent-2")
		if second.Epoch != 2 {
			t.Fatalf("second lease epoch %d", second.Epoch)
		}
		h.Log(t, second, -1, 1, "attempt2")
		got := f.next(t, 1)
		if got[0].Text != "attempt2" || got[0].Attempt != 2 || got[0].Seq != 1 {
			t.Fatalf("second attempt: %+v", got)
		}
		h.Finish(t, second, kiln.JobSuccess)
		f.end(t)
	})
}

func TestFollowAFinishedJobSendsItsHistoryAndEnds(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	h.Dispatch(t)
	l := h.Claim(t, "agent-1")
	h.Log(t, l, 0, 1, "a", "b")
	h.Finish(t, l, kiln.JobSuccess)
	f := follow(h, "1", api.LogQuery{Job: "build"}, nil)
	if got := texts(f.next(t, 2)); got != "a,b" {
		t.Fatalf("history = %s", got)
	}
	f.end(t)
}

// A viewer that stops reading makes its subscription lag: the stream
// resynchronizes from the file and the viewer still gets every line once,
// in order.
// Proves B84 (docs/behaviours.md).
func TestFollowALaggingViewerLosesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, h *apitest.Harness) {
		h.Dispatch(t)
		l := h.Claim(t, "agent-1")
		h.Log(t, l, 0, 1, "first")
		slow := make(chan struct{})
		f := follow(h, "1", api.LogQuery{Job: "build", Step: intp(0)}, slow)
		slow <- struct{}{} // let the history line through
		f.next(t, 1)
		before := api.Resyncs()
		// The viewer is stuck in its callback while batches pile up: far
		// more than the socket buffers hold, so the server blocks writing
		// and the one-batch subscription overflows.
		const batches, per = 200, 8
		big := strings.Repeat("x", 4<<10) // 6.4 MB in all: under the 10 MiB step cap (B104)
		seq := uint64(2)
		for b := range batches {
			var texts []string
			for i := range per {
				texts = append(texts, fmt.Sprintf("%d-%d %s", b, i, big))
			}
			h.Log(t, l, 0, seq, texts...)
			seq += per
		}
		close(slow) // the viewer reads again
		got := f.next(t, batches*per)
		for i, line := range got {
			if line.Seq != uint64(i+2) {
				t.Fatalf("line %d has seq %d: lost or repeated lines", i, line.Seq)
			}
		}
		if api.Resyncs() == before {
			t.Fatal("the subscription never lagged; the test did not exercise the resync")
		}
		h.Finish(t, l, kiln.JobSuccess)
		if rest := f.end(t); len(rest) != 0 {
			t.Fatalf("%d lines after the end", len(rest))
		}
	}, func(c *api.Config) { c.LogBuffer = 1 })
}

// A viewer that stops reading altogether is dropped after the write
// timeout instead of holding the stream (and its goroutine) forever.
// Proves B84 (docs/behaviours.md).
func TestFollowDropsAStalledViewer(t *testing.T) {
	h := apitest.New(t, newSQLite(t), func(c *api.Config) { c.LogWriteTimeout = 200 * time.Millisecond })
	h.Dispatch(t)
	l := h.Claim(t, "agent-1")
	h.Log(t, l, 0, 1, "first")
	stuck := make(chan struct{})
	f := follow(h, "1", api.LogQuery{Job: "build"}, stuck)
	stuck <- struct{}{}
	f.next(t, 1)
	big := strings.Repeat("y", 32<<10)
	for i := range 400 { // ~13 MB: more than the socket buffers hold
		h.Log(t, l, 0, uint64(i+2), big)
	}
	// The viewer stays stuck far past the write timeout (200 ms), so the
	// server, blocked on full socket buffers, gives up on it even when a
	// loaded machine is slow to fill them. This is the stall itself, not a
	// wait for async work.
	time.Sleep(3 * time.Second)
	close(stuck)
	select {
	case err := <-f.done:
		wantCode(t, err, kiln.CodeUnavailable)
	case <-time.After(20 * time.Second):
		t.Fatal("the stalled viewer's stream never ended")
	}
}

func TestLogsOfAMatrixJobByItsBaseName(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	var jobs []store.NewJob
	for _, v := range []string{"a", "b"} {
		jobs = append(jobs, store.NewJob{Name: "test (" + v + ")", Base: "test", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")}, Steps: []string{"unit"}})
	}
	if _, err := h.DB.Runs().Create(ctx, store.NewRun{Workflow: "matrix", Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b"} {
		l := h.Claim(t, "agent-"+v)
		h.Log(t, l, 0, 1, "from "+l.Name)
	}
	got := collect(t, h, "1", api.LogQuery{Job: "test"})
	if texts(got) != "from test (a),from test (b)" || got[0].Job != "test (a)" {
		t.Fatalf("base name: %+v", got)
	}
	if got := collect(t, h, "1", api.LogQuery{Job: "test (b)"}); texts(got) != "from test (b)" {
		t.Fatalf("one child: %+v", got)
	}
}
