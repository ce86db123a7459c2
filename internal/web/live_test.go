package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/web"
)

// B306, B308: a browser logged in opens a run while it runs, follows a
// job's log as it grows to its final line, loses its connection and
// resumes without a line twice or a line lost, and sees the job end.
func TestBrowserFollowsALiveLogAcrossAReconnect(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	c := tab(t)
	run := d.Dispatch(t)
	l := d.Claim(t, "agent-1")
	if err := d.DB.Jobs().UpdateSteps(ctx, l.Lease, store.StepUpdate{Index: 0, Status: kiln.StepRunning}); err != nil {
		t.Fatal(err)
	}
	d.Log(t, l, 0, 1, "\x1b[32mcompiling\x1b[0m", "line 2", "line 3")

	d.browserLogin(t, c, d.Token)
	screenshot(t, c, "runs")
	do(t, c, chromedp.Navigate(fmt.Sprintf("%s/runs/%d", d.URL, run.Number)), chromedp.WaitVisible(chromedp.CSS("svg.graph")))
	screenshot(t, c, "run-running")
	do(t, c, chromedp.Click(chromedp.CSS(`#jobs a[href$="/jobs/`+l.JobID+`"]`)), chromedp.WaitVisible(chromedp.ID("s0-L3")))
	if cls := eval[string](t, c, `document.querySelector("#s0-L1 .tx span").className`); cls != "fg2" {
		t.Fatalf("the green ANSI text has class %q", cls)
	}
	waitJS(t, c, "the live follow to connect", `document.getElementById("live").textContent.startsWith("Live")`)

	for i := uint64(4); i <= 50; i++ {
		d.Log(t, l, 0, i, fmt.Sprintf("line %d", i))
	}
	waitJS(t, c, "line 50 in the page", `!!document.getElementById("s0-L50")`)

	// Cut every connection: the page's EventSource reconnects with the last
	// event id, and the server resumes after it.
	d.Web.CloseClientConnections()
	for i := uint64(51); i <= 99; i++ {
		d.Log(t, l, 0, i, fmt.Sprintf("line %d", i))
	}
	d.Log(t, l, 0, 100, "final line")
	waitJS(t, c, "the final line in the page", `(document.getElementById("s0-L100")||{}).textContent === "100final line"`)
	seqs := eval[[]int](t, c, `Array.from(document.querySelectorAll('ol.log[data-step="0"] > li')).map(li => +li.dataset.seq)`)
	if len(seqs) != 100 {
		t.Fatalf("the page holds %d lines of step 0, want 100 (each once): %v", len(seqs), seqs)
	}
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("line %d of the page is seq %d: a line was lost or repeated: %v", i, s, seqs)
		}
	}
	screenshot(t, c, "log-live")
	d.Finish(t, l, kiln.JobSuccess)
	waitJS(t, c, "the follow to end with the job", `document.getElementById("log").dataset.ended === "1"`)
}
