package server

import (
	"github.com/kilnci/kiln/internal/scaler"
)

// addDocker adds the docker backend. Its client talks to the Docker
// Engine of DOCKER_HOST (default: the local socket) and connects on first
// use, and the manager sweeps only the backends its scalers use, so a
// server without docker scalers never touches the engine — and a reload
// can add one. A DOCKER_HOST the client cannot use stops the start only
// when a docker scaler is configured.
func addDocker(backends map[string]scaler.Backend, cfg Config, instance string) error {
	cli, err := scaler.NewDockerClient()
	if err != nil {
		for _, c := range cfg.Scalers {
			if c.Type == "docker" {
				return err
			}
		}
		return nil
	}
	backends["docker"] = &scaler.Docker{Client: cli, Instance: instance}
	return nil
}
