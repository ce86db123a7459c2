package scaler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Labels on every container the docker backend creates, so a server finds
// its own containers again (adoption, orphan removal) and never touches
// another server's (B185).
const (
	DockerLabelScaler   = "io.kilnci.scaler"
	DockerLabelInstance = "io.kilnci.instance"
	DockerLabelAgent    = "io.kilnci.agent-id"
)

// DefaultDockerNetwork is the network of a docker scaler that names none:
// the host's, so the agent reaches a server_url on loopback.
const DefaultDockerNetwork = "host"

// Docker is the docker backend: each agent is a container of the scaler's
// image running `kiln agent` (the image's kiln on its PATH, see
// `kiln agent-image`) with the ephemeral token in its environment, CPU and
// memory limits from the request, labelled with the scaler, this server's
// instance id and the agent id. Its output is captured for the failure
// tail; Destroy stops it (SIGTERM, SIGKILL after StopTimeout) and removes
// it. Images are never pulled: the operator builds or loads them.
type Docker struct {
	Client *client.Client
	// Instance is this server's instance id (the containers' label).
	Instance string
	// Image is used when the scaler names none (tests).
	Image string
	// StopTimeout is how long Destroy waits after SIGTERM (default 5s).
	StopTimeout time.Duration
}

// NewDockerClient connects to the Docker Engine of the environment
// (DOCKER_HOST, else the local socket); the API version is negotiated.
func NewDockerClient() (*client.Client, error) {
	return client.New(client.FromEnv)
}

// Spawn creates and starts the agent's container (B185).
func (d *Docker) Spawn(ctx context.Context, req SpawnRequest) (Instance, error) {
	image := req.Scaler.Image
	if image == "" {
		image = d.Image
	}
	network := req.Scaler.Network
	if network == "" {
		network = DefaultDockerNetwork
	}
	args := []string{"agent", "--server", req.ServerURL, "--id", req.AgentID, "--labels", strings.Join(req.Labels, ","),
		"--max-jobs", "1", "--state-dir", "/var/lib/kiln-agent", "--log-format", "json",
		// The container is the isolation boundary; namespaces inside it
		// would need privileges it does not have.
		"--isolation", "off"}
	env := []string{"KILN_AGENT_TOKEN=" + req.Token}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	labels := map[string]string{DockerLabelScaler: req.Scaler.Name, DockerLabelInstance: d.Instance, DockerLabelAgent: req.AgentID}
	host := &container.HostConfig{NetworkMode: container.NetworkMode(network)}
	host.NanoCPUs = int64(req.CPUs * 1e9)
	host.Memory = req.MemoryBytes
	req.Event(EventProvisioning, fmt.Sprintf("creating container kiln-%s from image %s", req.AgentID, image))
	created, err := d.Client.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "kiln-" + req.AgentID,
		Config: &container.Config{Image: image, Entrypoint: []string{"kiln"}, Cmd: args, Env: env, Labels: labels,
			WorkingDir: "/"},
		HostConfig: host,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("agent container error: image %q is not on this Docker engine (kiln never pulls; build it with `kiln agent-image --tag %s` or load it): %v", image, image, err)
		}
		return nil, fmt.Errorf("agent container error: create: %v", err)
	}
	id := created.ID
	inst := &dockerInstance{d: d, id: id, capture: &Capture{}, exited: make(chan struct{})}
	// Waiting is set up before the start so an agent that dies at once
	// is still seen ending.
	wctx, wcancel := context.WithCancel(context.Background())
	inst.cancel = wcancel
	wait := d.Client.ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	req.Event(EventNetwork, fmt.Sprintf("container %s on network %s, dialing %s", short(id), network, req.ServerURL))
	if _, err := d.Client.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		wcancel()
		d.remove(context.WithoutCancel(ctx), id)
		return nil, fmt.Errorf("agent container error: start: %v", err)
	}
	logs, err := d.Client.ContainerLogs(wctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	logsDone := make(chan struct{})
	if err != nil {
		close(logsDone)
		fmt.Fprintf(inst.capture, "kiln: reading the container's output failed: %v\n", err)
	} else {
		go func() {
			defer close(logsDone)
			defer logs.Close()
			_, _ = stdcopy.StdCopy(inst.capture, inst.capture, logs)
		}()
	}
	go inst.watch(wait, logsDone)
	req.Event(EventReady, fmt.Sprintf("container %s started (image %s)", short(id), image))
	return inst, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// remove force-removes a container; gone already is fine.
func (d *Docker) remove(ctx context.Context, id string) error {
	_, err := d.Client.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
		return err
	}
	return nil
}

// Reap removes the containers of an agent id a previous process of this
// server started (B187).
func (d *Docker) Reap(ctx context.Context, agentID string) error {
	ids, err := d.list(ctx, DockerLabelAgent+"="+agentID)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		errs = append(errs, d.remove(ctx, id))
	}
	return errors.Join(errs...)
}

// Containers lists the ids of this server's agent containers (running or
// not), optionally only those of one scaler.
func (d *Docker) Containers(ctx context.Context, scaler string) ([]string, error) {
	filters := []string{DockerLabelInstance + "=" + d.Instance}
	if scaler != "" {
		filters = append(filters, DockerLabelScaler+"="+scaler)
	}
	return d.list(ctx, filters...)
}

func (d *Docker) list(ctx context.Context, labels ...string) ([]string, error) {
	f := client.Filters{}
	f.Add("label", labels...)
	res, err := d.Client.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

type dockerInstance struct {
	d       *Docker
	id      string
	capture *Capture
	exited  chan struct{}
	err     error
	cancel  context.CancelFunc
	once    sync.Once
	dErr    error
}

// watch waits for the container to end and its output to be read.
func (x *dockerInstance) watch(w client.ContainerWaitResult, logsDone <-chan struct{}) {
	select {
	case r := <-w.Result:
		switch {
		case r.Error != nil && r.Error.Message != "":
			x.err = errors.New(r.Error.Message)
		case r.StatusCode != 0:
			x.err = fmt.Errorf("exit status %d", r.StatusCode)
		}
	case err := <-w.Error:
		if !errors.Is(err, context.Canceled) {
			x.err = fmt.Errorf("waiting for the container: %v", err)
		}
	}
	// The output reaches its end with the container; a stuck stream
	// does not hold the exit up.
	t := time.NewTimer(2 * time.Second)
	select {
	case <-logsDone:
	case <-t.C:
	}
	t.Stop()
	x.cancel()
	<-logsDone
	if x.err != nil {
		if info, err := x.d.Client.ContainerInspect(context.Background(), x.id, client.ContainerInspectOptions{}); err == nil &&
			info.Container.State != nil && info.Container.State.OOMKilled {
			x.err = fmt.Errorf("%v (killed: out of memory)", x.err)
		}
	}
	close(x.exited)
}

func (x *dockerInstance) Exited() <-chan struct{} { return x.exited }
func (x *dockerInstance) ExitErr() error          { return x.err }
func (x *dockerInstance) Tail() string            { return x.capture.Tail() }

// Destroy stops the container (SIGTERM, then SIGKILL after StopTimeout)
// and removes it (B185).
func (x *dockerInstance) Destroy(ctx context.Context, _ string) error {
	x.once.Do(func() {
		timeout := x.d.StopTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		secs := int(max(timeout.Round(time.Second)/time.Second, 1))
		_, err := x.d.Client.ContainerStop(ctx, x.id, client.ContainerStopOptions{Timeout: &secs})
		if err != nil && !cerrdefs.IsNotFound(err) {
			x.dErr = err
		}
		select {
		case <-x.exited:
		case <-ctx.Done():
			x.cancel()
			<-x.exited
		}
		if err := x.d.remove(context.WithoutCancel(ctx), x.id); err != nil {
			x.dErr = err
		}
	})
	return x.dErr
}

// Sweep removes this server's containers whose agent id keep does not
// know: a previous process started them and crashed before it recorded
// them, or they outlived their spawn row (B187). Containers of other
// servers (another instance label) are never touched.
func (d *Docker) Sweep(ctx context.Context, keep func(agentID string) bool) error {
	f := client.Filters{}
	f.Add("label", DockerLabelInstance+"="+d.Instance)
	res, err := d.Client.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range res.Items {
		if !keep(c.Labels[DockerLabelAgent]) {
			errs = append(errs, d.remove(ctx, c.ID))
		}
	}
	return errors.Join(errs...)
}

// ContainersOf lists the containers of one agent id, whichever server
// started them.
func (d *Docker) ContainersOf(ctx context.Context, agentID string) ([]string, error) {
	return d.list(ctx, DockerLabelAgent+"="+agentID)
}

// Close closes the client's idle connections once the manager stopped.
func (d *Docker) Close() error {
	if d.Client == nil {
		return nil
	}
	return d.Client.Close()
}
