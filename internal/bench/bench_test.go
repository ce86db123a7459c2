package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln/internal/bench"
	"github.com/kilnci/kiln/internal/cli"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// asKiln makes this test binary behave as the kiln binary: the bench
// starts it as `kiln server`, and the server starts it as `kiln agent`.
const asKiln = "BENCHTEST_AS_KILN" // not KILN_: the server keeps those from its local agents

func TestMain(m *testing.M) {
	if os.Getenv(asKiln) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	goleak.VerifyTestMain(storetest.M(m))
}

// tiny is every scenario at the smallest size that still exercises it.
func tiny(t *testing.T) bench.Config {
	t.Setenv(asKiln, "1")
	return bench.Config{
		Binary: os.Args[0], Startups: 1, Webhooks: 3, Agents: []int{3}, Jobs: 256,
		LogLines: 2000, LogAgents: 2, IdleAgents: 20, Spawns: 2, Timeout: 2 * time.Minute,
		Progress: testWriter{t},
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestBenchMeasuresEveryScenario(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend.Name, func(t *testing.T) {
			cfg := tiny(t)
			if backend.Name == "postgres" {
				cfg.Database = storetest.PostgresURL(t)
			}
			report, err := bench.Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if report.Database != backend.Name {
				t.Errorf("report database %q, want %q", report.Database, backend.Name)
			}
			seen := map[string]int{}
			targets := 0
			for _, r := range report.Results {
				seen[r.Scenario]++
				if r.Value <= 0 {
					t.Errorf("%s / %s measured %v %s, want a positive number", r.Scenario, r.Name, r.Value, r.Unit)
				}
				if (r.Target == nil) != (r.Met == nil) {
					t.Errorf("%s / %s: a target must come with its verdict", r.Scenario, r.Name)
				}
				if r.Target != nil {
					targets++
				}
			}
			for _, s := range bench.Scenarios {
				if s == bench.ScenarioCluster && backend.Name == "sqlite" {
					continue // several servers need PostgreSQL
				}
				if seen[s] == 0 {
					t.Errorf("no result for scenario %s", s)
				}
			}
			// Every PRODUCT.md target the bench answers at these sizes.
			if targets < 10 {
				t.Errorf("%d results carry a target, want at least 10", targets)
			}
			var out bytes.Buffer
			bench.Print(&out, report)
			met, missed := report.Tally()
			for _, want := range []string{"SCENARIO", "webhook sent → job received by idle agent, p99", "on its own database again (a restart)", "jobs/s", "lines/s", "KiB"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the table lacks %q:\n%s", want, out.String())
				}
			}
			if !strings.Contains(out.String(), "targets met") || met+missed != targets {
				t.Errorf("tally %d met + %d missed, want %d targets:\n%s", met, missed, targets, out.String())
			}
			if _, err := json.Marshal(report); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBenchRefusesWhatItCannotBound(t *testing.T) {
	cases := []struct {
		name string
		edit func(*bench.Config)
		want string
	}{
		{"no binary", func(c *bench.Config) { c.Binary = "" }, "kiln binary"},
		{"too many agents", func(c *bench.Config) { c.Agents = []int{10, bench.MaxAgents + 1} }, "agents must be between 1 and 10000"},
		{"no agents", func(c *bench.Config) { c.Agents = nil }, "at least one agent count"},
		{"too many idle agents", func(c *bench.Config) { c.IdleAgents = 20000 }, "idle agents must be between"},
		{"unknown scenario", func(c *bench.Config) { c.Scenarios = []string{"webhook", "fast"} }, `unknown scenario "fast"`},
		{"mysql", func(c *bench.Config) { c.Database = "mysql://x" }, "postgres:// URL"},
		{"no time", func(c *bench.Config) { c.Timeout = 0 }, "timeout must be positive"},
		{"few log lines", func(c *bench.Config) { c.LogLines = 10 }, "log lines must be between"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := bench.DefaultConfig()
			cfg.Binary = "kiln"
			tc.edit(&cfg)
			_, err := bench.Run(t.Context(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestBenchReportsAServerThatCannotStart(t *testing.T) {
	cfg := tiny(t)
	cfg.Scenarios = []string{bench.ScenarioWebhook}
	cfg.Binary = "/nonexistent/kiln"
	_, err := bench.Run(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "webhook: start /nonexistent/kiln") {
		t.Fatalf("got %v, want the start failure named", err)
	}
}

// TestBenchProfilesAndRunsTheRawLoop: --cpuprofile and --memprofile make
// every server write its profiles, and on PostgreSQL the dispatch scenario
// also drains the raw SKIP LOCKED loop and reports kiln as a ratio of it.
// Proves B250 (docs/behaviours.md).
func TestBenchProfilesAndRunsTheRawLoop(t *testing.T) {
	for _, backend := range storetest.Backends {
		t.Run(backend.Name, func(t *testing.T) {
			cfg := tiny(t)
			cfg.Scenarios = []string{bench.ScenarioDispatch}
			cfg.Agents = []int{2}
			dir := t.TempDir()
			cfg.CPUProfile, cfg.MemProfile = filepath.Join(dir, "cpu"), filepath.Join(dir, "mem")
			if backend.Name == "postgres" {
				cfg.Database = storetest.PostgresURL(t)
			}
			report, err := bench.Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"cpu.dispatch.1", "cpu.dispatch.2", "mem.dispatch.1", "mem.dispatch.2"} {
				if st, err := os.Stat(filepath.Join(dir, p)); err != nil || st.Size() == 0 {
					t.Errorf("profile %s: %v (want a non-empty file)", p, err)
				}
			}
			var raw, ratio bool
			for _, r := range report.Results {
				raw = raw || (strings.HasPrefix(r.Name, "raw SKIP LOCKED loop") && r.Value > 0)
				ratio = ratio || (strings.Contains(r.Name, "/ raw SKIP LOCKED loop") && r.Value > 0 && r.Unit == "ratio")
			}
			if want := backend.Name == "postgres"; raw != want || ratio != want {
				t.Errorf("raw loop measured %v, ratio %v; want both %v", raw, ratio, want)
			}
		})
	}
}
