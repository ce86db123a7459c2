package web_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/web"
)

// A running run's page follows the run over one live connection: a job's
// state, agent and graph node, the run's status and the timeline change on
// the page without a reload; when the run ends the page reloads once and
// shows its buttons. A second page on the same run gets the same updates.
// Proves B318 (docs/behaviours.md).
func TestBrowserRunPageUpdatesLive(t *testing.T) {
	d := newSQLiteDash(t, web.Config{LiveInterval: 50 * time.Millisecond})
	c := tab(t)
	run := d.Dispatch(t)
	build, test := run.Jobs[0].ID, run.Jobs[1].ID
	if run.Jobs[0].Name != "build" || run.Jobs[1].Name != "test" {
		t.Fatalf("jobs %+v", run.Jobs)
	}
	d.browserLogin(t, c, d.Token)
	do(t, c, chromedp.Navigate(fmt.Sprintf("%s/runs/%d", d.URL, run.Number)), chromedp.WaitVisible(chromedp.ID("runlive")))
	waitJS(t, c, "the live connection", `document.getElementById("runlive").textContent.startsWith("Live")`)
	// A mark that only survives if the page is not reloaded.
	eval[bool](t, c, `window.notReloaded = true`)

	// Another page follows the same run (a plain event-stream client).
	other := d.login(t, d.Token)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", fmt.Sprintf("%s/runs/%d/live", d.URL, run.Number), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := other.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("a second live page: %v %+v", err, resp)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	jobIs := func(id, status, agent, cls string) string {
		return fmt.Sprintf(`(() => { const tr = document.getElementById("job-%s");
			return tr.querySelector(".st").textContent === %q && tr.textContent.includes(%q)
				&& document.getElementById("node-%s").getAttribute("class") === "node st-%s"; })()`, id, status, agent, id, cls)
	}
	l := d.Claim(t, "agent-7")
	waitJS(t, c, "build running on agent-7", jobIs(build, "running", "agent-7", "run"))
	waitJS(t, c, "the run running", `document.querySelector("#run-status .st").textContent === "running"`)
	waitJS(t, c, "the dispatch on the timeline", `document.getElementById("timeline").textContent.includes("attempt 1 sent to agent agent-7")`)
	screenshot(t, c, "run-live")
	d.Finish(t, l, kiln.JobSuccess)
	waitJS(t, c, "build done, test queued", jobIs(build, "success", "agent-7", "ok")+" && "+jobIs(test, "queued", "", "wait"))
	if !eval[bool](t, c, `window.notReloaded === true`) {
		t.Fatal("the page was reloaded to show the change")
	}

	// The other page saw build's success too.
	deadline := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the second page's stream ended")
			}
			seen = strings.HasPrefix(line, "data: ") && strings.Contains(line, build) && strings.Contains(line, `success`)
		case <-deadline:
			t.Fatal("the second page did not see build succeed")
		}
	}

	// The run ends: the page reloads once, with the run's buttons.
	d.Finish(t, d.Claim(t, "agent-7"), kiln.JobFailed)
	waitJS(t, c, "the finished run's page", `window.notReloaded === undefined && document.querySelector("#run-status .st").textContent === "failed"
		&& !!document.querySelector('form[action="/runs/1/rerun"]') && !document.getElementById("runlive")`)
}
