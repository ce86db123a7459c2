package scaler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	kilnci "github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// noIdleAgents is a fleet with no agent idle for anything.
type noIdleAgents struct{}

func (noIdleAgents) IdleAccepting(kilnci.Requirement) bool { return false }
func (noIdleAgents) Idle(string) bool                      { return false }
func (noIdleAgents) Drain(string) error                    { return nil }
func (noIdleAgents) RefreshReasons()                       {}

// On the real Docker Engine, the container a docker scaler starts for a
// job is limited to the job's resources (NanoCPUs, Memory), and one for a
// job that states none to the scaler's default_resources.
// Proves B197 (docs/behaviours.md).
func TestDockerContainerGetsTheJobsResources(t *testing.T) {
	d := newDocker(t)
	backend := &scaler.Docker{Client: d.Client, Instance: d.Instance, Image: d.Image, StopTimeout: 2 * time.Second}
	db := storetest.New(t)
	m, err := scaler.NewManager(db, scaler.ManagerConfig{
		Scalers: []scaler.Config{{Name: "boxes", Type: "docker", Image: d.Image, Labels: kilnci.Labels{"boxed"}, MaxAgents: 2,
			// Nothing listens there: the agents stay unregistered while
			// the test looks at their containers.
			ServerURL:        "http://127.0.0.1:9",
			DefaultResources: scaler.Resources{CPUs: 0.5, Memory: "256m"}}},
		Instance: "server-" + d.Instance, Backends: map[string]scaler.Backend{"docker": backend}, Tick: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.SetFleet(noIdleAgents{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	// The manager stops (and removes its containers) before the client
	// closes and the test's containers are swept.
	t.Cleanup(func() { cancel(); <-done })

	boxed := kilnci.NewLabels("boxed")
	spec := json.RawMessage(`{"agent":{"name":"x"}}`)
	if _, err := db.Runs().Create(ctx, store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main",
		SHA: "abc", Event: json.RawMessage(`{"name":"push"}`), Jobs: []store.NewJob{
			{Name: "sized", Spec: spec, Steps: []string{"s"},
				Requirement: kilnci.Requirement{RunsOn: boxed, Resources: kilnci.Resources{MilliCPUs: 1500, Memory: 384 << 20}}},
			{Name: "plain", Spec: spec, Steps: []string{"s"}, Requirement: kilnci.Requirement{RunsOn: boxed}},
		}}); err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprint(int64(15e8), "/", 384<<20), fmt.Sprint(int64(5e8), "/", 256<<20)} // sorted as text
	waittest.UntilState(t, 2*time.Minute, "a container per job, each with its limits", func() (bool, string) {
		ids, err := d.Containers(ctx, "boxes")
		if err != nil {
			return false, err.Error()
		}
		var got []string
		for _, id := range ids {
			info, err := d.Client.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
			if err != nil {
				return false, err.Error()
			}
			got = append(got, fmt.Sprint(info.Container.HostConfig.NanoCPUs, "/", info.Container.HostConfig.Memory))
		}
		slices.Sort(got)
		return slices.Equal(got, want), fmt.Sprint("containers' NanoCPUs/Memory: ", got, ", want ", want)
	})
}
