package fleet

import (
	"context"

	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
)

// CloneCredentials makes the checkout an agent is sent for a job: asked
// once per dispatch with where the job's code lives (the run's source and
// repository, the commit), so credentials are minted when the job is sent —
// a forge's tokens are short-lived, and may be scoped to one repository —
// and never stored in the queue. An error requeues the job (its attempt
// counted).
type CloneCredentials interface {
	// Checkout returns the checkout to send for code at src; nil sends the
	// job without one.
	Checkout(ctx context.Context, src jobspec.Checkout) (*proto.Checkout, error)
}

// NoCredentials clones what the event named, as it named it, without
// credentials: for tests and for code anyone may read.
type NoCredentials struct{}

// Checkout returns src's clone URL, ref and commit.
func (NoCredentials) Checkout(_ context.Context, src jobspec.Checkout) (*proto.Checkout, error) {
	return &proto.Checkout{URL: src.URL, Ref: src.Ref, SHA: src.SHA}, nil
}
