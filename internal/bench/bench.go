package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Scenario names, in the order they run.
const (
	ScenarioStartup  = "startup"
	ScenarioWebhook  = "webhook"
	ScenarioDispatch = "dispatch"
	ScenarioLogs     = "logs"
	ScenarioIdle     = "idle"
	ScenarioScaler   = "scaler"
	ScenarioCluster  = "cluster"
)

// Scenarios lists every scenario in running order.
var Scenarios = []string{ScenarioStartup, ScenarioWebhook, ScenarioDispatch, ScenarioLogs, ScenarioIdle, ScenarioScaler, ScenarioCluster}

// Bounds on what one bench may ask for: loopback has room for these on a
// small machine, and nobody waits hours for a number.
const (
	MaxAgents     = 10000
	MaxSpawns     = 1000
	MaxJobs       = 100000
	MaxWebhooks   = 10000
	MaxLogLines   = 50_000_000
	MaxLogAgents  = 64
	MaxStartups   = 50
	jobsPerRun    = 256 // the matrix of the dispatch workflow: 16 × 16
	logLineBytes  = 100
	logFrameLines = 500
)

// Config says what to measure.
type Config struct {
	// Binary is the kiln executable started as the server (required).
	Binary string
	// Database is empty for SQLite in a temporary data directory, or a
	// postgres:// URL of a role that may CREATE DATABASE: every server
	// gets a scratch database there, dropped afterwards.
	Database string
	// Scenarios to run; empty runs them all.
	Scenarios []string
	// Startups is how many times the server is started (startup).
	Startups int
	// Webhooks is how many push deliveries are timed (webhook).
	Webhooks int
	// Agents are the agent counts dispatch runs with; Jobs the no-op jobs
	// each count dispatches (rounded up to whole runs of 256).
	Agents []int
	Jobs   int
	// LogLines is how many lines each log agent sends; LogAgents how many
	// agents send at once in the aggregate measurement (logs).
	LogLines  int
	LogAgents int
	// IdleAgents is how many idle agents connect (idle).
	IdleAgents int
	// Spawns is how many jobs run each on an agent a scaler starts (scaler;
	// at most 5 of them on micro-VMs).
	Spawns int
	// MicroVMKernel is a directory holding Debian's cloud kernel package
	// unpacked (boot/vmlinuz-*, lib/modules/*); empty skips the microvm
	// half of the scaler scenario.
	MicroVMKernel string
	// Timeout bounds each scenario.
	Timeout time.Duration
	// Env is added to the server's environment.
	Env []string
	// Progress receives a line per step of the bench; nil discards.
	Progress io.Writer
	// CPUProfile and MemProfile, when set, are path prefixes: every server
	// the bench starts writes its CPU (heap) profile to
	// PREFIX.<scenario>.<n> when it stops, for `go tool pprof`.
	CPUProfile string
	MemProfile string
}

// DefaultConfig is what `kiln bench` runs without flags: every target of
// PRODUCT.md at a size a 2-core machine finishes in a few minutes.
func DefaultConfig() Config {
	return Config{
		Startups: 5, Webhooks: 200, Agents: []int{10, 100, 1000}, Jobs: 5120,
		LogLines: 1_000_000, LogAgents: 4, IdleAgents: 2000, Spawns: 20, Timeout: 3 * time.Minute,
	}
}

// Validate reports every problem with c.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Binary == "" {
		add("the kiln binary to start as the server is not set")
	}
	if c.Database != "" && !strings.HasPrefix(c.Database, "postgres://") && !strings.HasPrefix(c.Database, "postgresql://") {
		add("--database must be empty (SQLite) or a postgres:// URL")
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(Scenarios, s) {
			add("unknown scenario %q (have %s)", s, strings.Join(Scenarios, ", "))
		}
	}
	bound := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			add("%s must be between %d and %d, got %d", name, lo, hi, v)
		}
	}
	bound("startups", c.Startups, 1, MaxStartups)
	bound("webhooks", c.Webhooks, 1, MaxWebhooks)
	bound("jobs", c.Jobs, 1, MaxJobs)
	bound("log lines", c.LogLines, logFrameLines, MaxLogLines)
	bound("log agents", c.LogAgents, 1, MaxLogAgents)
	bound("idle agents", c.IdleAgents, 1, MaxAgents)
	bound("spawns", c.Spawns, 1, MaxSpawns)
	if len(c.Agents) == 0 {
		add("give at least one agent count for dispatch")
	}
	for _, n := range c.Agents {
		bound("agents", n, 1, MaxAgents)
	}
	if c.Timeout <= 0 {
		add("timeout must be positive, got %s", c.Timeout)
	}
	return errors.Join(errs...)
}

func (c *Config) wants(s string) bool {
	return len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, s)
}

// Report is what a bench measured.
type Report struct {
	Database  string    `json:"database"` // sqlite or postgres
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	Started   time.Time `json:"started"`
	Results   []Result  `json:"results"`
}

// Result is one number, with the PRODUCT.md target it answers if any.
type Result struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Target   *Target `json:"target,omitempty"`
	Met      *bool   `json:"met,omitempty"`
}

// Target is a bound on a result: Value is a maximum, or a minimum when
// AtLeast.
type Target struct {
	Value   float64 `json:"value"`
	AtLeast bool    `json:"at_least,omitempty"`
}

func (t Target) String() string {
	if t.AtLeast {
		return "≥ " + formatValue(t.Value)
	}
	return "≤ " + formatValue(t.Value)
}

// bench is one run of Run.
type bench struct {
	cfg      Config
	dialect  string
	report   *Report
	scenario string // the one running, naming profile files
	servers  int    // servers started in it
}

// Run runs the configured scenarios and returns what they measured. A
// scenario that fails stops the bench; the report holds what was measured
// before it.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	b := &bench{cfg: cfg, dialect: "sqlite"}
	if cfg.Database != "" {
		b.dialect = "postgres"
	}
	b.report = &Report{Database: b.dialect, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Started: time.Now().UTC()}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{ScenarioStartup, b.startup}, {ScenarioWebhook, b.webhook}, {ScenarioDispatch, b.dispatch},
		{ScenarioLogs, b.logs}, {ScenarioIdle, b.idle}, {ScenarioScaler, b.scaler}, {ScenarioCluster, b.cluster},
	}
	for _, s := range steps {
		if !cfg.wants(s.name) {
			continue
		}
		b.progress("== %s (%s)", s.name, b.dialect)
		b.scenario, b.servers = s.name, 0
		sctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		err := s.run(sctx)
		if err != nil && ctx.Err() == nil && sctx.Err() != nil {
			err = fmt.Errorf("%w (the scenario's limit is %s; raise it with --timeout)", err, cfg.Timeout)
		}
		cancel()
		if err != nil {
			return b.report, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return b.report, nil
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
}

// add records a result, judged against target when it has one.
func (b *bench) add(scenario, name string, v float64, unit string, target *Target) {
	r := Result{Scenario: scenario, Name: name, Value: v, Unit: unit, Target: target}
	if target != nil {
		met := v <= target.Value
		if target.AtLeast {
			met = v >= target.Value
		}
		r.Met = &met
	}
	b.report.Results = append(b.report.Results, r)
	b.progress("   %-52s %12s %-8s %s", name, formatValue(v), unit, judge(r))
}

// pick returns the SQLite or the PostgreSQL target.
func (b *bench) pick(sqlite, postgres Target) *Target {
	if b.dialect == "postgres" {
		return &postgres
	}
	return &sqlite
}

func atMost(v float64) *Target   { return &Target{Value: v} }
func atLeast(v float64) *Target  { return &Target{Value: v, AtLeast: true} }
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
func perSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}
