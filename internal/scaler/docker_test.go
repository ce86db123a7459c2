package scaler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/moby/moby/client"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/scalertest"
)

// newDocker is a docker backend with an instance id of the test's own; the
// test's containers are removed at its end whatever happened.
func newDocker(t *testing.T) *scaler.Docker {
	cli := scalertest.DockerClient(t)
	d := &scaler.Docker{Client: cli, Instance: "test-" + uuid.NewString()[:8], Image: scalertest.AgentImage(t, cli), StopTimeout: 2 * time.Second}
	t.Cleanup(func() { scalertest.RemoveContainers(t, cli, d.Instance) })
	return d
}

// The docker backend passes the conformance suite on the real Docker
// Engine: a container of the agent image running `kiln agent` with the
// request's token (in its environment), id and labels, on the host's
// network so it dials the server on loopback, gone once destroyed.
// Proves B185 (docs/behaviours.md).
func TestDockerBackendConformance(t *testing.T) {
	scalertest.Run(t, func(t *testing.T) scaler.Backend { return newDocker(t) })
}

// The containers carry the scaler, the server's instance id and the agent
// id; a destroyed agent's container is gone, not only stopped; limits
// reach the container.
// Proves B185 (docs/behaviours.md).
func TestDockerBackendLabelsLimitsAndRemoval(t *testing.T) {
	d := newDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := d.Spawn(ctx, scaler.SpawnRequest{AgentID: "scaler-docker-labels01", Labels: []string{"scaled"},
		ServerURL: "http://127.0.0.1:9", Token: "kat_unused", CPUs: 0.5, MemoryBytes: 256 << 20,
		Event: func(string, string) {}, Scaler: scaler.Config{Name: "builders"}})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	ids, err := d.Containers(ctx, "builders")
	if err != nil || len(ids) != 1 {
		t.Fatalf("containers of scaler builders: %v, %v", ids, err)
	}
	info, err := d.Client.ContainerInspect(ctx, ids[0], client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := info.Container
	if c.Config.Labels[scaler.DockerLabelInstance] != d.Instance || c.Config.Labels[scaler.DockerLabelAgent] != "scaler-docker-labels01" {
		t.Fatalf("labels %v", c.Config.Labels)
	}
	if c.HostConfig.NanoCPUs != 5e8 || c.HostConfig.Memory != 256<<20 || string(c.HostConfig.NetworkMode) != "host" {
		t.Fatalf("limits %d CPU, %d bytes, network %s", c.HostConfig.NanoCPUs, c.HostConfig.Memory, c.HostConfig.NetworkMode)
	}
	for _, e := range c.Config.Env {
		if strings.Contains(strings.Join(c.Config.Cmd, " "), "kat_unused") {
			t.Fatalf("the token is on the command line: %v (env %s)", c.Config.Cmd, e)
		}
	}
	if err := inst.Destroy(ctx, "job-complete"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if ids, _ := d.Containers(ctx, ""); len(ids) != 0 {
		t.Fatalf("containers left after destroy: %v", ids)
	}
}

// At start a server removes its own containers no spawn row knows, and
// Reap removes one by agent id; another server's containers (another
// instance label) are never touched.
// Proves B187 (docs/behaviours.md).
func TestDockerSweepRemovesOnlyThisServersUnknownContainers(t *testing.T) {
	mine := newDocker(t)
	other := &scaler.Docker{Client: mine.Client, Instance: "test-other-" + uuid.NewString()[:8], Image: mine.Image}
	t.Cleanup(func() { scalertest.RemoveContainers(t, other.Client, other.Instance) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spawn := func(d *scaler.Docker, id string) {
		if _, err := d.Spawn(ctx, scaler.SpawnRequest{AgentID: id, Labels: []string{"scaled"}, ServerURL: "http://127.0.0.1:9",
			Token: "kat_unused", Event: func(string, string) {}, Scaler: scaler.Config{Name: "s"}}); err != nil {
			t.Fatalf("spawn %s: %v", id, err)
		}
	}
	spawn(mine, "scaler-docker-known001")
	spawn(mine, "scaler-docker-orphan01")
	spawn(mine, "scaler-docker-reaped01")
	spawn(other, "scaler-docker-others01")
	if err := mine.Sweep(ctx, func(id string) bool { return id != "scaler-docker-orphan01" }); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if err := mine.Reap(ctx, "scaler-docker-reaped01"); err != nil {
		t.Fatalf("reap: %v", err)
	}
	if ids, _ := mine.Containers(ctx, ""); len(ids) != 1 {
		t.Fatalf("this server's containers after the sweep and the reap: %v, want the known one only", ids)
	}
	if ids, _ := other.Containers(ctx, ""); len(ids) != 1 {
		t.Fatalf("the other server's containers: %v, want its one untouched", ids)
	}
}
