package web_test

import (
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/web"
)

// The run page's timeline starts with the delivery and the trigger
// decision, then shows each release, dispatch (attempt and agent), requeue
// and rerun as the store recorded them (the rerun's page: what it reruns
// and what it carried over). Proves B317 (docs/behaviours.md).
func TestRunPageTimeline(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	d.Dispatch(t)
	l := d.Dispatched(t, "agent-1")
	if _, err := d.DB.Queue().Requeue(ctx, l.Lease, "the agent is busy"); err != nil {
		t.Fatal(err)
	}
	d.Finish(t, d.Claim(t, "agent-2"), kiln.JobSuccess) // build
	d.Finish(t, d.Claim(t, "agent-2"), kiln.JobFailed)  // test
	rerun, err := d.Client.RerunRun(ctx, "1", true)
	if err != nil {
		t.Fatal(err)
	}
	c := d.login(t, d.Token)
	code, page := get(t, c, d.URL+"/runs/1")
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	contains(t, text(page), "delivery — dispatch event 1 received", "trigger — ",
		"job.released · build — queued for an agent labelled linux",
		"job.dispatched · build — attempt 1 sent to agent agent-1",
		"job.requeued · build — back in the queue: the agent is busy",
		"job.dispatched · build — attempt 2 sent to agent agent-2",
		"job.released · test — needs met (build): queued for an agent labelled linux",
		"run.rerun — rerun as run #2 (failed jobs only")
	_, page = get(t, c, d.URL+"/runs/2")
	contains(t, text(page), "run.rerun — rerun of run #1", "job.reused · build — success in the run this one reruns")
	if rerun.Number != 2 {
		t.Fatalf("the rerun is run %d", rerun.Number)
	}
}

var tags = regexp.MustCompile(`<[^>]*>`)

// text is a page's text: its tags dropped, its entities decoded.
func text(page string) string {
	return html.UnescapeString(tags.ReplaceAllString(page, ""))
}
