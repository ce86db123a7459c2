package fleet

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

var errRolledBack = errors.New("test: rolled back")

// createAndClaim creates a run of one job in a transaction that also
// claims for the idle agents (ClaimInline, as the engine does), and
// commits it unless rollback; it retries while a dispatcher pass holds the
// claim (ClaimInline then claims nothing). It returns the run's job id and
// the jobs the claim reported.
func createAndClaim(t *testing.T, h *harness, name string, rollback bool) (jobID string, claimed []string) {
	t.Helper()
	nr := store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main", SHA: "abc",
		Event: json.RawMessage(`{"name":"push"}`), Jobs: []store.NewJob{{Name: name,
			Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")}, Spec: specJSON(name), Steps: []string{"build"}}}}
	waittest.Until(t, waittest.Timeout, "a claim in the run's transaction", func() bool {
		var done func(bool) ([]string, store.Effects)
		err := h.db.Update(bg, func(tx *store.Tx) error {
			if done != nil {
				done(false)
				done = nil
			}
			cr, err := tx.Runs().Create(bg, nr)
			if err != nil {
				return err
			}
			jobID = cr.Jobs[name]
			if done, err = h.f.ClaimInline(bg, tx); err != nil {
				return err
			}
			if done == nil || rollback {
				return errRolledBack
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRolledBack) {
			t.Fatalf("create the run: %v", err)
		}
		if done == nil {
			return false
		}
		claimed, _ = done(err == nil)
		return true
	})
	return jobID, claimed
}

// A run created while an agent is idle has its job claimed for that agent
// in the transaction that creates it, and the job is sent once it commits:
// one commit, no dispatcher pass. A transaction that rolls back claims
// nothing: the agent is sent nothing and stays free.
// Proves B260 (docs/behaviours.md).
func TestRunTransactionClaimsForAnIdleAgent(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a"})

		gone, claimed := createAndClaim(t, h, "gone", true)
		if len(claimed) != 0 {
			t.Fatalf("a rolled-back claim reported %v", claimed)
		}
		c.quiet(100 * time.Millisecond)
		if _, err := h.db.Jobs().Get(bg, gone); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the rolled-back run's job: %v, want not found", err)
		}
		if n := h.f.reg.get("a").freeSlots(); n != 1 {
			t.Fatalf("the agent has %d free slots after a rolled-back claim, want 1", n)
		}

		one, claimed := createAndClaim(t, h, "one", false)
		if !slices.Equal(claimed, []string{one}) {
			t.Fatalf("claimed %v, want [%s]", claimed, one)
		}
		d := expect[*proto.Dispatch](c)
		if d.JobID != one {
			t.Fatalf("dispatch %+v, want job one", d)
		}
		if got := h.f.Stats().ClaimedWithRun; got != 1 {
			t.Fatalf("%d jobs claimed with their run, want 1", got)
		}
		if j := h.job(one); j.Status != kiln.JobDispatched || j.AgentID != "a" {
			t.Fatalf("job one is %s on %q, want dispatched on a", j.Status, j.AgentID)
		}
		c.runJob(d, kiln.JobSuccess)
		h.waitStatus(one, kiln.JobSuccess)
	})
}
