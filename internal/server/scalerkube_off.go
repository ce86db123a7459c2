//go:build !kubernetes

package server

import (
	"fmt"

	"github.com/kilnci/kiln/internal/scaler"
)

// addKubernetes adds nothing: this kiln was built without the kubernetes
// backend (unbuiltScalers refuses its scalers first).
func addKubernetes(map[string]scaler.Backend, Config, string) error { return nil }

// unbuiltScalers refuses the kubernetes scalers of a kiln built without
// them (B254): client-go adds about 30 MB to the binary, so the backend is
// behind the kubernetes build tag.
func unbuiltScalers(scalers []scaler.Config) []error {
	var errs []error
	for i, c := range scalers {
		if c.Type == "kubernetes" {
			errs = append(errs, fmt.Errorf("scalers[%d] (%s).type: this kiln was built without the kubernetes backend "+
				"(client-go adds about 30 MB, so it is left out unless asked for); build one with it: "+
				"go build -tags kubernetes ./cmd/kiln (docs/scalers.md#kubernetes-scalers)", i, c.Name))
		}
	}
	return errs
}
