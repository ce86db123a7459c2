package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
	"github.com/kilnci/kiln/internal/web/webtest"
)

// liveLines is how many lines BenchmarkLiveLineAgentToDOM times.
const liveLines = 1000

// BenchmarkLiveLineAgentToDOM measures a live log line's whole way: a real
// agent process's step prints 1,000 lines, one about every 6 ms, each with
// the time it was printed (date +%s%3N), and the job's log page in a
// browser notes when each line reaches its DOM (a MutationObserver); the
// difference is the line's latency (both clocks are this host's). It
// reports p50 and p99 in milliseconds, on SQLite and on PostgreSQL. The
// target is 250 ms for both.
func BenchmarkLiveLineAgentToDOM(b *testing.B) {
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			dbURL := ""
			if be.Name != "sqlite" {
				dbURL = be.URL(b)
			}
			benchLiveLines(b, dbURL)
		})
	}
}

func benchLiveLines(b *testing.B, dbURL string) {
	c := webtest.Tab(b)
	gate := filepath.Join(b.TempDir(), "gate")
	r := newRepo(b, map[string]string{workflow("live"): fmt.Sprintf(`name: live
on:
  push:
    branches: [main]
jobs:
  lines:
    checkout: false
    steps:
      - name: lines
        run: |
          while [ ! -f %s ]; do sleep 0.02; done
          for i in $(seq 1 %d); do echo "L $i $(date +%%s%%3N)"; sleep 0.005; done
`, gate, liveLines)})
	s := startServer(b, func(c *server.Config) { c.Database = dbURL })
	addLocalSource(b, s.Client, "app", r.dir)
	secret, _ := agentToken(b, s.Client, api.CreateTokenRequest{Name: "live"})
	startAgent(b, s.URL, secret, agentOpts{id: "live-agent"})
	run := triggerOne(b, s.Client, "app")
	job := run.Jobs[0].ID
	waittest.UntilState(b, time.Minute, "the job running", func() (bool, string) {
		r := getRun(b, s.Client, run.ID)
		return r.Jobs[0].Status == kiln.JobRunning, string(r.Jobs[0].Status)
	})
	webtest.Login(b, c, s.URL, s.AdminToken)
	webtest.Do(b, c, chromedp.Navigate(fmt.Sprintf("%s/runs/%d/jobs/%s", s.URL, run.Number, job)), chromedp.WaitReady(chromedp.ID("log")))
	webtest.WaitJS(b, c, "the live follow", `document.getElementById("live").textContent.startsWith("Live")`)
	webtest.Eval[bool](b, c, `(window.lat = [], new MutationObserver(ms => { const now = Date.now();
		for (const m of ms) for (const n of m.addedNodes) {
			const t = n.dataset && n.dataset.seq && /L \d+ (\d+)/.exec(n.textContent);
			if (t) window.lat.push(now - Number(t[1]));
		} }).observe(document.getElementById("log"), {childList: true, subtree: true}), true)`)

	b.ResetTimer()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	waittest.UntilState(b, 2*time.Minute, "every line in the page", func() (bool, string) {
		n, err := chromedp.Run(c, chromedp.Evaluate[int](`window.lat.length`))
		return err == nil && n >= liveLines, fmt.Sprint(n, err)
	})
	b.StopTimer()
	lat := webtest.Eval[[]int64](b, c, `window.lat`)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1]), "max-ms")
}
