package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/moby/moby/client"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
)

// dockerScalerConfig is the docker half of the scaler scenario: a docker
// scaler (host network) running the agent image built from the bench's
// own kiln binary.
const dockerScalerConfig = `scalers:
  - name: bench
    type: docker
    image: %s
    labels: [bench-docker]
    max_agents: 4
    spawn_timeout: 2m
`

var dockerScalerWorkflows = map[string]string{
	".kiln/workflows/push.yml": `name: push
on: push
jobs:
  noop:
    runs_on: [bench-docker]
    checkout: false
    steps:
      - run: "true"
`,
}

// scalerDocker measures what scaler measures with a docker scaler: spawn
// start → the agent in its fresh container registered and sent its job,
// and webhook → job running. It is skipped, saying why, when no Docker
// Engine answers or the bench's kiln is not static (the image is FROM
// scratch: build kiln with CGO_ENABLED=0).
func (b *bench) scalerDocker(ctx context.Context) error {
	cli, err := scaler.NewDockerClient()
	if err != nil {
		b.progress("   docker: skipped (%v)", err)
		return nil
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
	cancel()
	if err != nil {
		b.progress("   docker: skipped, no Docker Engine answers (%v)", err)
		return nil
	}
	img, err := agentimage.Build(ctx, cli, "", agentimage.Spec{Kiln: b.cfg.Binary})
	if err != nil {
		b.progress("   docker: skipped, the agent image could not be built: %v", err)
		return nil
	}
	toSent, toRunning, err := b.timeSpawns(ctx, "docker", fmt.Sprintf(dockerScalerConfig, img.Tag), dockerScalerWorkflows, b.cfg.Spawns)
	if err != nil {
		return err
	}
	b.add(ScenarioScaler, "docker: spawn → agent registered and sent its job, p50", ms(percentile(toSent, 0.5)), "ms", atMost(1000))
	b.add(ScenarioScaler, "docker: spawn → agent registered and sent its job, p99", ms(percentile(toSent, 0.99)), "ms", nil)
	b.add(ScenarioScaler, "webhook → job running on a fresh docker container, p50", ms(percentile(toRunning, 0.5)), "ms", nil)
	return nil
}
