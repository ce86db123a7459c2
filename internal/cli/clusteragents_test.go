package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/store"
)

// An agent connected to another server sharing the database is listed
// with its real job slots — the jobs the database says it holds and the
// max_jobs it registered with — not 0/0; one registered before kiln
// recorded max_jobs shows "-" rather than a false number.
//
// B135.
func TestAgentsListShowsAnotherServersAgentsJobs(t *testing.T) {
	o := newOp(t)
	ctx := context.Background()
	if err := o.DB.Cluster().Beat(ctx, "other", "http://other.example:4000"); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.AgentRecord{
		{ID: "far", Coordinator: "other", Labels: apitest.Linux, MaxJobs: 3, Hostname: "far-host"},
		{ID: "older", Coordinator: "other", Labels: apitest.Linux, Hostname: "old-host"},
	} {
		if err := o.DB.Auth().UpsertAgent(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	o.Dispatch(t)
	o.Dispatch(t)
	running := o.Claim(t, "far") // started
	o.Dispatched(t, "far")       // sent, not started
	out := o.ok(t, "agents", "list")
	row := func(id string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == id {
				return f
			}
		}
		t.Fatalf("no row for %s:\n%s", id, out)
		return nil
	}
	if f := row("far"); !hasField(f, "2/3") || !hasField(f, "http://other.example:4000") {
		t.Fatalf("far's row %q, want 2/3 jobs on http://other.example:4000\n%s", f, out)
	}
	if f := row("older"); hasField(f, "0/0") || !hasField(f, "-") {
		t.Fatalf("older's row %q, want no job numbers\n%s", f, out)
	}
	o.Finish(t, running, kiln.JobSuccess)
	out = o.ok(t, "agents", "list")
	if f := row("far"); !hasField(f, "1/3") {
		t.Fatalf("far's row after a job ended %q\n%s", f, out)
	}
}

func hasField(fields []string, want string) bool {
	for _, f := range fields {
		if f == want {
			return true
		}
	}
	return false
}
