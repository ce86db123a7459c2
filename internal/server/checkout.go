package server

import (
	"context"
	"fmt"

	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
)

// sourceCredentials are the server's fleet.CloneCredentials: the clone URL
// and read-only credentials of a job's source for its repository (forge
// Repo.Clone: a GitHub App's token minted for the one repository with
// contents: read, a token source's clone credential, or none — never the
// source's own token), minted when the job is sent (an installation token
// is short-lived; nothing secret waits in the queue). A fork pull
// request's job gets the same read-only credentials: they open nothing
// its author could not read in the fork. A job from no configured source
// is cloned as its event named it. The source's configuration comes from
// the Sources cache, not its row: a write of the source drops it on this
// server before the write returns, and on the others when its
// notification arrives (ingress.SourceTrust bounds a missed one), so a
// rotated or removed credential does not reach a job sent after it.
type sourceCredentials struct{ sources *ingress.Sources }

// Checkout returns the checkout of src with the source's credentials.
func (s sourceCredentials) Checkout(ctx context.Context, src jobspec.Checkout) (*proto.Checkout, error) {
	co := &proto.Checkout{URL: src.URL, Ref: src.Ref, SHA: src.SHA}
	if src.Source == "" {
		return co, nil
	}
	_, repo, err := s.sources.Repo(ctx, src.Source)
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", src.Source, err)
	}
	ci, err := repo.Clone(ctx, src.Repository)
	if err != nil {
		return nil, fmt.Errorf("clone credentials for %s: %w", src.Repository, err)
	}
	co.URL, co.Hint = ci.URL, ci.Hint
	if ci.Username != "" || ci.Password != "" || ci.SSHKey != "" {
		co.Auth = &proto.GitAuth{Username: ci.Username, Password: ci.Password, SSHKey: ci.SSHKey, KnownHosts: ci.KnownHosts}
	}
	return co, nil
}
