package engine

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

func leaseOf(id string, epoch int64) store.Lease { return store.Lease{JobID: id, Epoch: epoch} }

func agentRecord(id string, labels kiln.AgentLabels) store.AgentRecord {
	return store.AgentRecord{ID: id, Labels: labels, Connected: true}
}

func storeFilterAll() store.RunFilter { return store.RunFilter{Limit: 10} }

func mustRun(t interface {
	Helper()
	Fatal(...any)
}, b bundle, id string) store.Run {
	t.Helper()
	r, err := b.db.Runs().Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
