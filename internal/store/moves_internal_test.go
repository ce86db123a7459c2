package store

import (
	"testing"

	"github.com/kilnci/kiln"
)

// Every transition the store makes is legal per kiln.CanTransition.
func TestMovesAreLegal(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range allMoves {
		if seen[m.name] {
			t.Errorf("move %q listed twice", m.name)
		}
		seen[m.name] = true
		if len(m.from) == 0 {
			t.Errorf("move %q has no from statuses", m.name)
		}
		for _, f := range m.from {
			if !kiln.CanTransition(f, m.to) {
				t.Errorf("move %q: %s → %s is not legal", m.name, f, m.to)
			}
		}
		if err := m.legal(); err != nil {
			t.Error(err)
		}
	}
	illegal := move{"bad", []kiln.JobStatus{kiln.JobSuccess}, kiln.JobQueued}
	if illegal.legal() == nil {
		t.Error("an illegal move passed the check")
	}
}

// Every status a job can reach is reached by some move.
func TestMovesReachEveryStatus(t *testing.T) {
	reached := map[kiln.JobStatus]bool{kiln.JobPending: true}
	for _, m := range allMoves {
		reached[m.to] = true
	}
	for _, s := range kiln.JobStatuses {
		if !reached[s] {
			t.Errorf("no move reaches %s", s)
		}
	}
}

func TestRebind(t *testing.T) {
	got := rebind("SELECT '?', x FROM t WHERE a = ? AND b IN (?, ?) AND c = 'it''s ?'")
	want := "SELECT '?', x FROM t WHERE a = $1 AND b IN ($2, $3) AND c = 'it''s ?'"
	if got != want {
		t.Fatalf("rebind:\n got %s\nwant %s", got, want)
	}
}

func TestFindCycle(t *testing.T) {
	if c := findCycle(map[string][]string{"b": {"a"}, "c": {"a", "b"}}); c != "" {
		t.Fatalf("acyclic graph reported a cycle: %s", c)
	}
	c := findCycle(map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}})
	if c != "a → b → c → a" {
		t.Fatalf("cycle %q", c)
	}
}

func TestSQLitePath(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite:///var/lib/kiln/kiln.db": "/var/lib/kiln/kiln.db",
		"/tmp/x.db":                      "/tmp/x.db",
		"file:/tmp/y.db?mode=rwc":        "/tmp/y.db",
	} {
		got, err := sqlitePath(in)
		if err != nil || got != want {
			t.Errorf("sqlitePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := sqlitePath("sqlite://:memory:"); err == nil {
		t.Error("an in-memory database was accepted")
	}
}
