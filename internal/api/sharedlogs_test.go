package api_test

import (
	"sort"
	"time"

	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// B201, B202: two servers on one database with shared storage answer the
// same logs, and a follow on the server the agent is not connected to
// streams the running job's lines and ends with it.
func TestLogsOnAnotherServerReadAndFollowTheSame(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		archive, err := fs.Open(fs.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		h := apitest.NewShared(t, db, archive)
		peer := h.Peer(t)
		h.Dispatch(t)
		l := h.Claim(t, "agent-1")
		h.Log(t, l, -1, 1, "clone")
		h.Log(t, l, 0, 1, "c1", "c2")

		var followed []api.LogLine
		done := make(chan error, 1)
		got := make(chan api.LogLine, 100)
		go func() {
			done <- peer.Logs(ctx, "1", api.LogQuery{Job: "build", Follow: true}, func(l api.LogLine) error {
				got <- l
				return nil
			})
		}()
		next := func(n int) {
			t.Helper()
			for range n {
				select {
				case l := <-got:
					followed = append(followed, l)
				case err := <-done:
					t.Fatalf("the follow ended early (%v) after %s", err, texts(followed))
				case <-timeout(t):
					t.Fatalf("the follow on the other server got only %s", texts(followed))
				}
			}
		}
		next(3)
		h.Log(t, l, 0, 3, "live3")
		h.Log(t, l, 1, 1, "vet1")
		next(2)
		h.Finish(t, l, kiln.JobSuccess)
		h.Logs.CloseStep(refOf(l, 0))
		h.Logs.CloseStep(refOf(l, 1))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		close(got)
		for l := range got {
			followed = append(followed, l)
		}
		// Lines of one step arrive in order; steps interleave as they ran.
		sort.SliceStable(followed, func(a, b int) bool { return followed[a].Step < followed[b].Step })
		if texts(followed) != "clone,c1,c2,live3,vet1" {
			t.Fatalf("followed on the other server: %s", texts(followed))
		}
		var here, there []api.LogLine
		if err := h.Client.Logs(ctx, "1", api.LogQuery{}, func(l api.LogLine) error { here = append(here, l); return nil }); err != nil {
			t.Fatal(err)
		}
		if err := peer.Logs(ctx, "1", api.LogQuery{}, func(l api.LogLine) error { there = append(there, l); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(here) != len(there) || texts(here) != texts(there) {
			t.Fatalf("this server: %s; the other: %s", texts(here), texts(there))
		}
		for i := range here {
			if here[i] != there[i] {
				t.Fatalf("line %d: %+v here, %+v there", i, here[i], there[i])
			}
		}
	}, storetest.ReleaseWith(engine.Release))
}

func refOf(l apitest.Lease, step int) logstore.Ref {
	return logstore.Ref{RunID: l.RunID, JobID: l.JobID, Epoch: l.Epoch, Step: step}
}

func timeout(t *testing.T) <-chan time.Time {
	t.Helper()
	return time.After(20 * time.Second)
}
