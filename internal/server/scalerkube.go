//go:build kubernetes

package server

import (
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/kube"
)

// addKubernetes adds the kubernetes backend (this kiln was built with
// -tags kubernetes). It connects to nothing until a kubernetes scaler
// spawns or sweeps; the pods of every configured kubernetes scaler's
// namespace are its to sweep.
func addKubernetes(backends map[string]scaler.Backend, cfg Config, instance string) error {
	var ks []scaler.Config
	for _, c := range cfg.Scalers {
		if c.Type == "kubernetes" {
			ks = append(ks, c)
		}
	}
	backends["kubernetes"] = &kube.Backend{Instance: instance, Scalers: ks}
	return nil
}

// unbuiltScalers is empty: every scaler type is built in.
func unbuiltScalers([]scaler.Config) []error { return nil }
