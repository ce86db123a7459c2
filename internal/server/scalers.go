package server

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/store"
)

// newScalers builds the scaler manager, with the scalers configured — none
// is fine: a reload may add some (SIGHUP, B227), and until then it does
// nothing. Its agents dial the server's own address unless a scaler names
// a server_url (SetServerURL, once the server listens).
func newScalers(cfg Config, db *store.DB, opts Options, log *slog.Logger) (*scaler.Manager, error) {
	instance, err := instanceID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	la := &localAgents{cfg: cfg}
	backends := map[string]scaler.Backend{
		"process": &scaler.Process{Binary: opts.AgentBinary, StateRoot: cfg.DataDir + "-scaled", Hide: la.hidden()},
		"event":   &scaler.EventBackend{DB: db, Clock: opts.Clock},
		// The VMs' API sockets live in a short directory: a unix socket
		// path has at most 108 bytes.
		"firecracker": &scaler.Firecracker{StateRoot: cfg.DataDir + "-vms"},
		"microvm":     &scaler.MicroVM{StateRoot: cfg.DataDir + "-vms"},
	}
	if err := addDocker(backends, cfg, instance); err != nil {
		return nil, err
	}
	if err := addKubernetes(backends, cfg, instance); err != nil {
		return nil, err
	}
	return scaler.NewManager(db, scaler.ManagerConfig{
		Scalers: cfg.Scalers, Caps: cfg.ScalerCaps, Instance: instance, RecoveryWindow: cfg.Agents.RecoveryWindow,
		Backends: backends, Clock: opts.Clock, Logger: log,
	})
}

// instanceID is this server's id, kept in the data directory so a restart
// is the same instance: a spawn carries the id of the server that started
// it, and only that server removes it.
func instanceID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "instance-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	id := uuid.NewString()
	if err := writeSecret(path, id); err != nil {
		return "", err
	}
	return id, nil
}

// fleetScaler is the manager as the fleet's Scaler, nil when there is none
// (a nil *Manager in the interface would not be nil).
func fleetScaler(m *scaler.Manager) fleet.Scaler {
	if m == nil {
		return nil
	}
	return m
}

func engineScalers(m *scaler.Manager) engine.Scalers {
	if m == nil {
		return nil
	}
	return m
}
