package engine

import (
	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

func leaseOf(id string, epoch int64) store.Lease { return store.Lease{JobID: id, Epoch: epoch} }

func agentRecord(id string, labels kiln.AgentLabels) store.AgentRecord {
	return store.AgentRecord{ID: id, Labels: labels, Connected: true}
}
