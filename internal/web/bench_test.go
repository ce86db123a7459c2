package web_test

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/web"
)

// bigWorkflow is a dispatchable workflow of 256 jobs: a setup job and a
// 15×17 matrix needing it.
const bigWorkflow = `name: big
on:
  dispatch: {}
jobs:
  setup:
    runs_on: [linux]
    steps: [{run: echo}]
  test:
    needs: [setup]
    runs_on: [linux]
    matrix:
      a: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
      b: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
    steps: [{run: echo}]
`

// benchBackends runs fn on a dashboard over SQLite and over PostgreSQL.
func benchBackends(b *testing.B, fn func(b *testing.B, d *dash)) {
	for _, be := range storetest.Backends {
		b.Run(be.Name, func(b *testing.B) {
			open := storetest.New
			if be.Name != "sqlite" {
				open = storetest.NewPostgres
			}
			fn(b, newDash(b, open(b, storetest.ReleaseWith(engine.Release)), web.Config{}))
		})
	}
}

// BenchmarkRunPage256Jobs times the run page of a run of 256 jobs (15×17
// matrix children and their setup), served over loopback HTTP, on SQLite
// and PostgreSQL.
func BenchmarkRunPage256Jobs(b *testing.B) {
	benchBackends(b, benchRunPage256)
}

func benchRunPage256(b *testing.B, d *dash) {
	d.Commit(b, ".kiln/workflows/big.yml", bigWorkflow)
	del, err := d.Client.Dispatch(ctx, api.DispatchRequest{Source: apitest.SourceName, Workflow: "big.yml"}, true)
	if err != nil || len(del.Runs) != 1 {
		b.Fatalf("dispatch: %v %+v", err, del)
	}
	run, _ := d.Client.GetRun(ctx, del.Runs[0].ID)
	if len(run.Jobs) != 256 {
		b.Fatalf("the run has %d jobs", len(run.Jobs))
	}
	c := d.login(b, d.Token)
	u := fmt.Sprintf("%s/runs/%d", d.URL, run.Number)
	b.ResetTimer()
	for b.Loop() {
		code, page := get(b, c, u)
		if code != http.StatusOK || strings.Count(page, "<rect") != 256 {
			b.Fatalf("%d", code)
		}
	}
}

// BenchmarkLogFirstPage100k times a 100,000-line log's page (its first
// window of 1,000 lines), served over loopback HTTP, on SQLite and
// PostgreSQL.
func BenchmarkLogFirstPage100k(b *testing.B) {
	benchBackends(b, benchLogFirstPage)
}

func benchLogFirstPage(b *testing.B, d *dash) {
	d.Dispatch(b)
	l := d.Claim(b, "agent-1")
	appendLines(b, d, l, 0, 100000)
	d.Finish(b, l, kiln.JobSuccess)
	c := d.login(b, d.Token)
	u := fmt.Sprintf("%s/runs/1/jobs/%s", d.URL, l.JobID)
	b.ResetTimer()
	for b.Loop() {
		code, page := get(b, c, u)
		if code != http.StatusOK || !strings.Contains(page, `id="s0-L1000"`) {
			b.Fatalf("%d", code)
		}
	}
}

func appendLines(tb testing.TB, d *dash, l apitest.Lease, step, n int) {
	texts := make([]string, 0, 10000)
	for seq := 1; seq <= n; seq++ {
		texts = append(texts, fmt.Sprintf("line %d of a long log", seq))
		if len(texts) == cap(texts) || seq == n {
			d.Log(tb, l, step, uint64(seq-len(texts)+1), texts...)
			texts = texts[:0]
		}
	}
}

// BenchmarkLiveLineLatency measures a live line's way from the log store
// (where the fleet puts an agent's lines) to the browser's DOM over 1,000
// lines, one every 5 ms, and reports p50 and p99 in milliseconds. Both
// clocks are this host's. The whole way from a real agent process is
// internal/e2e's BenchmarkLiveLineAgentToDOM.
func BenchmarkLiveLineLatency(b *testing.B) {
	d := newSQLiteDash(b, web.Config{})
	c := tab(b)
	d.Dispatch(b)
	l := d.Claim(b, "agent-1")
	if err := d.DB.Jobs().UpdateSteps(ctx, l.Lease, store.StepUpdate{Index: 0, Status: kiln.StepRunning}); err != nil {
		b.Fatal(err)
	}
	d.Log(b, l, 0, 1, "first")
	secret := d.Token
	if err := chromedp.Do(c, chromedp.Navigate(d.URL+"/login"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), secret), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/queue"]`)),
		chromedp.Navigate(fmt.Sprintf("%s/runs/1/jobs/%s", d.URL, l.JobID)), chromedp.WaitVisible(chromedp.ID("s0-L1"))); err != nil {
		b.Fatal(err)
	}
	// The page records when each line reached the DOM.
	if _, err := chromedp.Run(c, chromedp.Evaluate[chromedp.Void](`window.seen = {};
		new MutationObserver(ms => { const now = Date.now(); for (const m of ms) for (const n of m.addedNodes)
			if (n.dataset && n.dataset.seq) window.seen[n.dataset.seq] = now; })
		.observe(document.getElementById("log"), {childList: true, subtree: true});`)); err != nil {
		b.Fatal(err)
	}
	for {
		live, err := chromedp.Run(c, chromedp.Evaluate[bool](`document.getElementById("live").textContent.startsWith("Live")`))
		if err != nil {
			b.Fatal(err)
		}
		if live {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	const n = 1000
	sent := make(map[int]int64, n)
	b.ResetTimer()
	for i := 2; i <= n+1; i++ {
		sent[i] = time.Now().UnixMilli()
		d.Log(b, l, 0, uint64(i), fmt.Sprintf("live line %d", i))
		time.Sleep(5 * time.Millisecond)
	}
	var seen map[string]int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		seen, err = chromedp.Run(c, chromedp.Evaluate[map[string]int64](`window.seen`))
		if err == nil && len(seen) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	var lat []int64
	for i := 2; i <= n+1; i++ {
		if at, ok := seen[fmt.Sprint(i)]; ok {
			lat = append(lat, at-sent[i])
		}
	}
	if len(lat) < n {
		b.Fatalf("%d of %d lines reached the page", len(lat), n)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ms")
}

// BenchmarkFollow50kLines times a page's live follow (server-sent events)
// delivering a job's 50,000 lines that are all there when it connects, as
// after a reconnect to a chatty job: what the server spends per line of a
// follow. SQLite.
func BenchmarkFollow50kLines(b *testing.B) {
	d := newSQLiteDash(b, web.Config{})
	run := d.Dispatch(b)
	l := d.Claim(b, "agent-1")
	appendLines(b, d, l, 0, 50000)
	d.Finish(b, l, kiln.JobSuccess)
	c := d.login(b, d.Token)
	u := fmt.Sprintf("%s/runs/%d/jobs/%s/follow", d.URL, run.Number, l.JobID)
	b.ResetTimer()
	for b.Loop() {
		code, body := get(b, c, u)
		if n := strings.Count(body, "\ndata: {\"s\":"); code != http.StatusOK || n != 50000 || !strings.Contains(body, "event: end") {
			b.Fatalf("%d: %d lines", code, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/50000, "ns/line")
}
