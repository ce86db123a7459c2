package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/web"
)

// a11yCheck is run in each page: every field has a label, every text's
// colour has a contrast of at least 4.5:1 on its background, and it
// returns the controls a keyboard must reach.
const a11yCheck = `(() => {
  const problems = [];
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!el.labels.length && !el.getAttribute("aria-label")) problems.push("unlabelled " + el.outerHTML.slice(0, 80));
  }
  const rgb = s => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = c => { const v = c.slice(0, 3).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const bg = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c; } return [255, 255, 255]; };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n; (n = walker.nextNode());) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el || el.closest("svg") || !el.getClientRects().length) continue;
    const fg = rgb(getComputedStyle(el).color), b = bg(el);
    const l1 = lum(fg), l2 = lum(b), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) problems.push("contrast " + ratio.toFixed(2) + " of " + JSON.stringify(n.textContent.trim().slice(0, 30)));
  }
  return problems.slice(0, 10).join("; ");
})()`

// focusable counts the controls Tab must reach.
const focusable = `Array.from(document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, summary"))
  .filter(e => e.tabIndex >= 0 && e.getClientRects().length).length`

// B313: on every page Tab reaches every control with a visible focus
// outline, every field is labelled, and text has a contrast of at least
// 4.5:1. Each page's screenshot is taken from a run with a failed job, a
// job that waits and an agent.
func TestBrowserKeyboardLabelsAndContrast(t *testing.T) {
	d := newSQLiteDash(t, web.Config{})
	c := tab(t)
	d.Fleet.Connect(api.AgentView{ID: "linux-1", Labels: []string{"linux", "amd64"}, MaxJobs: 1, Healthy: true,
		ConnectedAt: time.Now(), LastHeartbeat: time.Now(), Version: "v0.9.0", Hostname: "builder"})
	d.Dispatch(t)
	l := d.Claim(t, "linux-1")
	d.Log(t, l, -1, 1, "cloning app at main")
	d.Log(t, l, 0, 1, "\x1b[1mcompiling\x1b[0m ./...", "\x1b[33mwarning:\x1b[0m unused variable", "\x1b[31merror:\x1b[0m undefined: foo")
	d.Finish(t, l, kiln.JobFailed)
	d.Dispatch(t) // run 2 waits for an agent

	do(t, c, chromedp.Navigate(d.URL+"/login"), chromedp.WaitVisible(chromedp.ID("token")))
	screenshot(t, c, "login")
	d.browserLogin(t, c, d.Token)
	pages := map[string]string{
		"runs": "/runs", "run": "/runs/1", "log": fmt.Sprintf("/runs/1/jobs/%s", l.JobID), "queue": "/queue",
		"agents": "/agents", "scalers": "/scalers", "events": "/events", "dispatch": "/dispatch",
		"log-search": fmt.Sprintf("/runs/1/jobs/%s?q=error", l.JobID),
	}
	for name, path := range pages {
		do(t, c, chromedp.Navigate(d.URL+path), chromedp.WaitVisible(chromedp.CSS("main h1")))
		if problems := eval[string](t, c, a11yCheck); problems != "" {
			t.Errorf("%s: %s", path, problems)
		}
		want := eval[int](t, c, focusable)
		reached := map[string]bool{}
		for i := 0; i < want+5 && len(reached) < want; i++ {
			do(t, c, chromedp.KeyEvent(kb.Tab))
			el := eval[string](t, c, `(() => { const e = document.activeElement, s = getComputedStyle(e);
				return e === document.body ? "" : (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2 ? "ok " : "NO-OUTLINE ") +
					e.tagName + " " + (e.getAttribute("href") || e.name || e.id || "") + " " + e.textContent.trim().slice(0, 30); })()`)
			if strings.HasPrefix(el, "NO-OUTLINE") {
				t.Errorf("%s: Tab focused %q without a visible outline", path, el)
			}
			reached[el] = true
		}
		if len(reached) < want {
			t.Errorf("%s: Tab reached %d of %d controls", path, len(reached), want)
		}
		screenshot(t, c, name)
	}
}
