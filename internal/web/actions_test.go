package web_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
	"github.com/kilnci/kiln/internal/web"
)

// B305, B309, B312: in a browser, an admin sees a waiting job's pending
// reason on the queue page, cancels a run, reruns a failed run's failed
// jobs, and dispatches a workflow with a typed input.
func TestBrowserQueueCancelRerunAndDispatch(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	c := tab(t)
	d.Dispatch(t) // run 1: queued, no agent
	q, err := d.Client.Queue(ctx, 10)
	if err != nil || len(q.Waiting) == 0 || q.Waiting[0].Reason == "" {
		t.Fatalf("queue: %v %+v", err, q.Waiting)
	}
	reason := q.Waiting[0].Reason

	d.browserLogin(t, c, d.Token)
	do(t, c, chromedp.Navigate(d.URL+"/queue"), chromedp.WaitVisible(chromedp.CSS("td.reason")))
	if got := eval[string](t, c, `document.querySelector("td.reason").textContent`); !strings.Contains(got, reason) {
		t.Fatalf("the queue page says %q, the API %q", got, reason)
	}
	screenshot(t, c, "queue")

	// Cancel run 1.
	do(t, c, chromedp.Navigate(d.URL+"/runs/1"), chromedp.Click(chromedp.CSS(`form[action="/runs/1/cancel"] button`)))
	waitJS(t, c, "the run cancelled", `location.pathname === "/runs/1" && document.querySelector("h1 .st").textContent === "cancelled"`)

	// Run 2 fails; rerun its failed jobs.
	d.Dispatch(t)
	l := d.Claim(t, "agent-1")
	d.Log(t, l, 0, 1, "\x1b[31merror: it broke\x1b[0m")
	d.Finish(t, l, kiln.JobFailed)
	do(t, c, chromedp.Navigate(d.URL+"/runs/2"), chromedp.WaitVisible(chromedp.CSS(`form[action="/runs/2/rerun"]`)))
	screenshot(t, c, "run-failed")
	do(t, c, chromedp.Click(chromedp.CSS(`input[name="failed"] ~ button`)))
	waitJS(t, c, "the rerun's page", `location.pathname === "/runs/3"`)
	rerun, err := d.Client.GetRun(ctx, "3")
	if err != nil || rerun.RerunOf == "" {
		t.Fatalf("run 3: %v, rerun of %q", err, rerun.RerunOf)
	}

	// Dispatch ci with target=production.
	do(t, c, chromedp.Navigate(d.URL+"/dispatch"), chromedp.WaitVisible(chromedp.ID("w0-target")))
	screenshot(t, c, "dispatch")
	do(t, c, chromedp.SetValue(chromedp.ID("w0-target"), "production"),
		chromedp.Click(chromedp.CSS(`form.dispatch button`)))
	waitJS(t, c, "the dispatched run's page", `location.pathname === "/runs/4"`)
	run4, err := d.Client.GetRun(ctx, "4")
	if err != nil || !strings.Contains(string(run4.Inputs), `"production"`) {
		t.Fatalf("run 4: %v, inputs %s", err, run4.Inputs)
	}
}

// B303: a read-only session's pages show no buttons but logout.
func TestBrowserReadOnlySessionSeesNoButtons(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	c := tab(t)
	d.Dispatch(t)
	d.browserLogin(t, c, d.token(t, "viewer", "read-only"))
	for _, page := range []string{"/runs/1", "/agents", "/dispatch", "/queue"} {
		do(t, c, chromedp.Navigate(d.URL+page), chromedp.WaitVisible(chromedp.CSS("main h1")))
		if n := eval[int](t, c, `document.querySelectorAll("main button, main form[method=post]").length`); n != 0 {
			t.Fatalf("%s shows a read-only session %d buttons or forms", page, n)
		}
	}
	screenshot(t, c, "queue-read-only")
}

// B306: after scrolling a 100,000-line log to its end, the page holds
// fewer than 2,000 line elements, the last line among them.
func TestBrowserLongLogStaysWindowed(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	c := tab(t)
	d.Dispatch(t)
	l := d.Claim(t, "agent-1")
	const n = 100000
	texts := make([]string, 0, 10000)
	for seq := 1; seq <= n; seq++ {
		texts = append(texts, fmt.Sprintf("line %d of a long log", seq))
		if len(texts) == cap(texts) {
			d.Log(t, l, 0, uint64(seq-len(texts)+1), texts...)
			texts = texts[:0]
		}
	}
	d.Finish(t, l, kiln.JobSuccess)
	d.browserLogin(t, c, d.Token)
	do(t, c, chromedp.Navigate(fmt.Sprintf("%s/runs/1/jobs/%s?step=0", d.URL, l.JobID)), chromedp.WaitVisible(chromedp.ID("s0-L1000")))
	// Scrolling loads the next windows and drops lines far above.
	waittest.UntilState(t, time.Minute, "three more windows", func() (bool, string) {
		state, err := chromedp.Run(c, chromedp.Evaluate[string](`(window.scrollTo(0, document.body.scrollHeight),
			document.querySelector("ol.log > li:last-child").id)`))
		return err == nil && state == "s0-L4000", state
	})
	if count := eval[int](t, c, `document.querySelectorAll("ol.log > li").length`); count > 1500 {
		t.Fatalf("after four windows the page holds %d line elements", count)
	}
	// "Last lines" jumps to the end's window; scroll to its end.
	do(t, c, chromedp.Click(chromedp.CSS("a.tail")), chromedp.WaitVisible(chromedp.ID("s0-L100000")))
	waittest.UntilState(t, 2*time.Minute, "the log scrolled to its end", func() (bool, string) {
		state, err := chromedp.Run(c, chromedp.Evaluate[string](`(window.scrollTo(0, document.body.scrollHeight),
			(document.querySelector("a.more") ? "more " : "end ") + document.querySelector("ol.log > li:last-child").id)`))
		if os.Getenv("KILN_DEBUG_WEB") != "" {
			t.Logf("%s %v", state, err)
		}
		return err == nil && strings.HasPrefix(state, "end"), state
	})
	count := eval[int](t, c, `document.querySelectorAll("ol.log > li").length`)
	last := eval[string](t, c, `document.querySelector("ol.log > li:last-child").id`)
	if count >= 2000 || last != fmt.Sprintf("s0-L%d", n) {
		t.Fatalf("at the end of the log the page holds %d line elements (want < 2000), the last %q", count, last)
	}
	screenshot(t, c, "log-long-end")
}
