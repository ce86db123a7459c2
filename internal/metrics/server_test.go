package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/server"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/waittest"
	"github.com/kilnci/kiln/internal/workflow"
)

// forEachBackend runs fn against a real server on SQLite and on PostgreSQL.
func forEachBackend(t *testing.T, fn func(t *testing.T, database func(testing.TB) string)) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			database := b.URL
			if b.Name == "sqlite" {
				// The server's own default: SQLite in data_dir.
				database = func(testing.TB) string { return "" }
			}
			fn(t, database)
		})
	}
}

// startServer runs server.Run in-process on 127.0.0.1:0 and returns the
// server once it accepts connections; it stops when the test ends.
func startServer(t *testing.T, database string, opts server.Options, tweak func(*server.Config)) *server.Server {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Listen, cfg.DataDir, cfg.LocalAgents, cfg.Database = "127.0.0.1:0", t.TempDir(), 0, database
	// Tests refresh the gauges themselves (Metrics.Refresh); the
	// refresher's own ticks must not interleave.
	cfg.Metrics.RefreshInterval = time.Hour
	if tweak != nil {
		tweak(&cfg)
	}
	opts.Out = io.Discard
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ready := make(chan *server.Server, 1)
	opts.Ready = func(s *server.Server) { ready <- s }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, cfg, opts) }()
	select {
	case s := <-ready:
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server.Run: %v", err)
			}
		})
		return s
	case err := <-done:
		cancel()
		t.Fatalf("the server did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the server did not start within 30s")
	}
	return nil
}

// families is one parsed scrape.
type families map[string]*dto.MetricFamily

// scrape GETs /metrics and parses the Prometheus text format.
func scrape(t *testing.T, s *server.Server) families {
	t.Helper()
	fams, _ := scrapeText(t, s)
	return fams
}

func scrapeText(t *testing.T, s *server.Server) (families, string) {
	t.Helper()
	req, err := http.NewRequest("GET", s.MetricsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	// On the main listener /metrics needs a token; on metrics.listen none.
	if strings.HasPrefix(s.MetricsURL, s.URL+"/") {
		req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	return fams, string(body)
}

// value is the sample of name{labels} (label pairs, exactly those), and
// whether the series exists. A histogram's value is its sample count.
func (f families) value(name string, labels ...string) (float64, bool) {
	fam, ok := f[name]
	if !ok {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !exactLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func exactLabels(m *dto.Metric, kv []string) bool {
	if len(m.GetLabel()) != len(kv)/2 {
		return false
	}
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if v, ok := have[kv[i]]; !ok || v != kv[i+1] {
			return false
		}
	}
	return true
}

func (f families) series(name string) int {
	if fam, ok := f[name]; ok {
		return len(fam.GetMetric())
	}
	return 0
}

// want fails the test unless name{labels} exists with value v.
func (f families) want(t *testing.T, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := f.value(name, labels...)
	if !ok {
		t.Fatalf("/metrics has no %s%s", name, fmtLabels(labels))
	}
	if got != v {
		t.Fatalf("%s%s = %v, want %v", name, fmtLabels(labels), got, v)
	}
}

func fmtLabels(kv []string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// scrapeUntil scrapes until ok holds (asynchronous work: the refresher
// reading finished runs, the ingress workers) and returns that scrape.
func scrapeUntil(t *testing.T, s *server.Server, what string, ok func(families) bool) families {
	t.Helper()
	var f families
	waittest.Until(t, waittest.Timeout, "/metrics to show "+what, func() bool {
		f = scrape(t, s)
		return ok(f)
	})
	return f
}

// startRun starts one run of src through the engine, as the ingress would.
func startRun(t *testing.T, s *server.Server, src string) store.CreatedRun {
	t.Helper()
	wf, err := workflow.Parse(".kiln/workflows/ci.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ev := &kiln.Event{Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: strings.Repeat("a", 40),
		Repository: "acme/app", Actor: "alice"}
	runs, err := s.Engine.Start(context.Background(), engine.StartRequest{Event: ev, Matches: []engine.Match{
		{Workflow: wf, Content: []byte(src), Decision: trigger.Match(wf, ev)},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return runs[0]
}

func refresh(t *testing.T, s *server.Server) {
	t.Helper()
	if err := s.Metrics.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// With metrics.listen set, /metrics is served there and only there: the
// main listener, which may face the internet for webhooks, does not
// expose it.
// Proves B62 (docs/behaviours.md).
func TestMetricsOnTheirOwnListener(t *testing.T) {
	s := startServer(t, "", server.Options{}, func(c *server.Config) { c.Metrics.Listen = "127.0.0.1:0" })
	if strings.HasPrefix(s.MetricsURL, s.URL) {
		t.Fatalf("metrics at %s, on the main listener %s", s.MetricsURL, s.URL)
	}
	scrape(t, s).want(t, 0, "kiln_dispatch_queue_depth", "status", "pending")
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "kiln_dispatch_queue_depth") {
		t.Fatalf("the main listener still serves metrics: %d %.100s", resp.StatusCode, body)
	}
}

// With metrics on the main listener, /metrics needs an admin or read-only
// token: it names sources and repositories, and the main listener may face
// the internet for webhooks.
// Proves B62 (docs/behaviours.md).
func TestMetricsOnTheMainListenerNeedAToken(t *testing.T) {
	s := startServer(t, "", server.Options{}, nil)
	if !strings.HasPrefix(s.MetricsURL, s.URL) {
		t.Fatalf("metrics at %s, not on the main listener %s", s.MetricsURL, s.URL)
	}
	_, ro, err := s.DB.Auth().AddAdminToken(context.Background(), store.AdminTokenSpec{Name: "prometheus", Role: store.RoleReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", s.MetricsURL, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, auth := range []string{"", "Bearer kadm_wrong", "Basic cHJvbTpwcm9t"} {
		if status, body := get(auth); status != http.StatusUnauthorized || strings.Contains(body, "kiln_") {
			t.Fatalf("/metrics with %q: %d %.100s", auth, status, body)
		}
	}
	if status, body := get("Bearer " + ro); status != http.StatusOK || !strings.Contains(body, "kiln_dispatch_queue_depth") {
		t.Fatalf("/metrics with a read-only token: %d %.100s", status, body)
	}
}
