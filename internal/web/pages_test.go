package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/web"
)

// B304: the runs page lists runs newest first and filters them by
// source, workflow, branch, status and event.
func TestRunsPageFilters(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	d.Dispatch(t)
	d.Dispatch(t)
	c := d.login(t, d.Token)
	_, page := get(t, c, d.URL+"/runs")
	if i, j := strings.Index(page, `href="/runs/2"`), strings.Index(page, `href="/runs/1"`); i < 0 || j < 0 || i > j {
		t.Fatalf("runs are not listed newest first:\n%s", page)
	}
	for query, want := range map[string]bool{
		"?source=app&workflow=ci&branch=main&event=dispatch": true,
		"?status=pending":  true,
		"?source=other":    false,
		"?branch=release":  false,
		"?event=push":      false,
		"?status=success":  false,
		"?workflow=deploy": false,
	} {
		code, page := get(t, c, d.URL+"/runs"+query)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", query, code)
		}
		if got := strings.Contains(page, `href="/runs/1"`); got != want {
			t.Errorf("%s lists run 1: %v, want %v", query, got, want)
		}
	}
	if code, _ := get(t, c, d.URL+"/runs?event=nonsense"); code != http.StatusBadRequest {
		t.Fatalf("an unknown event: %d", code)
	}
}

// B305: the run page draws the job graph from needs (SVG, with the jobs
// table as its text alternative), and shows each job's status, agent and
// pending reason, the timeline and the buttons an admin may use.
func TestRunPage(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	run := d.Dispatch(t)
	l := d.Claim(t, "agent-7")
	c := d.login(t, d.Token)
	code, page := get(t, c, d.URL+"/runs/1")
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	contains(t, page, `<svg class="graph"`, `<path class="edge"`, ">build</text>", ">test</text>",
		"agent-7", "waiting for needs: build", "Cancel run", `aria-labelledby="graph-title"`)
	if code, _ := get(t, c, d.URL+"/runs/"+run.ID); code != http.StatusOK {
		t.Fatalf("the run by id: %d", code)
	}
	if code, _ := get(t, c, d.URL+"/runs/99"); code != http.StatusNotFound {
		t.Fatalf("no such run: %d", code)
	}
	d.Finish(t, l, kiln.JobFailed)
	_, page = get(t, c, d.URL+"/runs/1")
	contains(t, page, "Rerun all jobs", "Rerun failed jobs")
	if strings.Contains(page, "Cancel run") {
		t.Fatal("a finished run offers to cancel")
	}
	code, page = get(t, c, d.URL+"/runs/1/jobs/build")
	if code != http.StatusOK {
		t.Fatalf("log page by job name: %d", code)
	}
	contains(t, page, "compile", "Download raw log")
}

// B309: the queue page shows every waiting job with why it waits and
// since when, grouped by the labels it asks for.
func TestQueuePageShowsPendingReasons(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	d.Dispatch(t)
	c := d.login(t, d.Token)
	var q api.Queue
	waitFor(t, "the job queued", func() bool {
		var err error
		q, err = d.Client.Queue(ctx, 10)
		return err == nil && len(q.Waiting) == 1
	})
	_, page := get(t, c, d.URL+"/queue")
	contains(t, page, "linux", `href="/runs/1/jobs/`+q.Waiting[0].JobID+`"`)
	if q.Waiting[0].Reason != "" {
		contains(t, page, q.Waiting[0].Reason)
	}
}

// B310: the agents page lists each agent's labels, state, jobs,
// heartbeat age and version, with a drain button for admins.
func TestAgentsPageAndDrain(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	now := time.Now()
	d.Fleet.Connect(api.AgentView{ID: "gpu-1", Labels: []string{"linux", "gpu"}, MaxJobs: 2, Healthy: true,
		ConnectedAt: now, LastHeartbeat: now, Version: "v9.9.9", Hostname: "box"})
	c := d.login(t, d.Token)
	_, page := get(t, c, d.URL+"/agents")
	contains(t, page, "gpu-1", "gpu, linux", "v9.9.9", "Drain gpu-1")
	if code, _ := post(t, c, d.URL+"/agents/gpu-1/drain", map[string][]string{"csrf": {csrf(t, page)}}); code != http.StatusSeeOther {
		t.Fatalf("drain: %d", code)
	}
	_, page = get(t, c, d.URL+"/agents")
	if strings.Contains(page, "Drain gpu-1") {
		t.Fatal("a draining agent still offers to drain")
	}
}

// B311: the events page lists each delivery and what it started; sources
// by name.
func TestEventsPage(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	run := d.Dispatch(t)
	c := d.login(t, d.Token)
	_, page := get(t, c, d.URL+"/events")
	contains(t, page, `href="/events?source=app"`, "dispatch", `href="/runs/`+run.ID+`"`, "processed")
}
