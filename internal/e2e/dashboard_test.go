package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/forge/forgetest"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/waittest"
	"github.com/kilnci/kiln/internal/web/webtest"
)

// A push from a GitHub source (a fake GitHub API speaking GitHub's wire
// format) runs ci on a real agent; the commit status kiln posts carries
// target_url PUBLIC_URL/runs/N, and a browser opening exactly that URL is
// asked to log in, comes back to it, and sees the run's page with its job,
// which follows the run live to its end; the job's link opens its log,
// and the source's public badge says passing.
// Proves B319 (docs/behaviours.md).
func TestStatusLinkOpensTheRunPage(t *testing.T) {
	t.Parallel()
	c := webtest.Tab(t)
	gh := forgetest.NewGitHub(t)
	gh.Token = ghAPIToken
	gate := filepath.Join(t.TempDir(), "gate")
	gh.SetFiles(ghRepo, ghPushSHA, "master", ghWorkflows(gate))
	port := freePort(t)
	public := fmt.Sprintf("http://127.0.0.1:%d", port)
	s := startServer(t, func(c *server.Config) {
		c.Listen, c.PublicURL = fmt.Sprintf("127.0.0.1:%d", port), public
	})
	src := forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: gh.URL, Token: ghAPIToken, WebhookSecret: ghSecret}}
	if _, err := s.Client.AddSource(bg, src); err != nil {
		t.Fatalf("add the github source: %v", err)
	}
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "gh-agent"})
	startAgent(t, s.URL, secret, agentOpts{id: "gh-agent", maxJobs: 4})
	g := &ghServer{kilnServer: s, gh: gh, webhook: s.URL + "/webhook/github/gh", gate: gate}

	d := waitDelivery(t, s.Client, g.deliver(t, "push", "push-1", ghPayload(t, "push.with-new-branch.payload.json")))
	var ci api.Run
	for _, ref := range d.Runs {
		if r := getRun(t, s.Client, ref.ID); r.Workflow == "ci" {
			ci = r
		}
	}
	if d.Status != kiln.DeliveryProcessed || ci.ID == "" {
		t.Fatalf("push delivery: %s", describeDelivery(d))
	}
	var link string
	waittest.UntilState(t, 30*time.Second, "the pending status of kiln/ci", func() (bool, string) {
		sts := g.statusesOf(ghPushSHA, "kiln/ci (push)")
		if len(sts) > 0 {
			link = sts[0].TargetURL
		}
		return link != "", fmt.Sprint(gh.Statuses())
	})
	if want := fmt.Sprintf("%s/runs/%d", public, ci.Number); link != want {
		t.Fatalf("the status links to %q, want %q", link, want)
	}

	// Exactly the posted URL: the login form first, then back to the run.
	webtest.Do(t, c, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("token")))
	webtest.Do(t, c, chromedp.SendKeys(chromedp.ID("token"), s.AdminToken), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("jobs")))
	if got := webtest.Eval[string](t, c, `location.href`); got != link {
		t.Fatalf("after logging in the browser is at %q, want the status link %q", got, link)
	}
	webtest.WaitJS(t, c, "the run's job on its page, live",
		`document.querySelector("#jobs tbody a").textContent === "hello" && document.getElementById("runlive").textContent.startsWith("Live")`)
	webtest.Screenshot(t, c, "status-link-run-running")

	g.open(t) // the job finishes; the page follows the run to its end
	webtest.WaitJS(t, c, "the run's success on its page, reloaded at the end", `document.querySelector("#run-status .st").textContent === "success"
		&& document.querySelector("#jobs tbody .st").textContent === "success" && !document.getElementById("runlive")`)
	webtest.Screenshot(t, c, "status-link-run-success")

	// Its public badge says so too.
	if _, err := s.Client.UpdateSource(bg, "gh", map[string]any{"public_badges": true}); err != nil {
		t.Fatal(err)
	}
	webtest.Do(t, c, chromedp.Navigate(public+"/badge/gh/ci.svg?branch=master"), chromedp.WaitReady(chromedp.CSS("svg")))
	if got := webtest.Eval[string](t, c, `document.querySelector("svg title").textContent`); got != "ci: passing" {
		t.Fatalf("the badge says %q", got)
	}
	webtest.Screenshot(t, c, "badge-passing")
	webtest.Do(t, c, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("jobs")))

	webtest.Do(t, c, chromedp.Click(chromedp.CSS("#jobs tbody a")), chromedp.WaitReady(chromedp.ID("log")))
	webtest.WaitJS(t, c, "the job's log", `document.getElementById("log").textContent.includes("push refs/heads/master `+ghPushSHA+`")`)
	webtest.Eval[bool](t, c, `(document.querySelectorAll("#log details").forEach(d => d.open = true), true)`)
	webtest.Screenshot(t, c, "status-link-log")
}
