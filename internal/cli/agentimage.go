package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
)

// newAgentImageCmd builds the image docker scalers run, into the local
// Docker Engine (docs/scalers.md).
func newAgentImageCmd(e *env) *cobra.Command {
	var spec agentimage.Spec
	var tag, rootfs string
	cmd := &cobra.Command{
		Use:   "agent-image",
		Short: "Build the agent image of docker scalers into the local Docker Engine",
		Long: `agent-image builds the container image a docker scaler runs (docs/scalers.md): FROM scratch,
the static kiln binary at /usr/local/bin/kiln, busybox at /bin/busybox with its applets (the steps'
shell and tools), and git with the shared libraries ldd lists (the checkout), imported into the
Docker Engine of DOCKER_HOST (default: the local socket) as --tag. Nothing is pulled or pushed.

The kiln binary must be static: build it with CGO_ENABLED=0 go build ./cmd/kiln (scripts/agent-image
does both). busybox comes from Debian's busybox-static. An image already tagged --tag with the
same content is kept as it is. With --rootfs it writes the root filesystem as a tar to that file
instead, and needs no Docker Engine (scripts/image adds it to the server image's Dockerfile).`,
		Example: "  CGO_ENABLED=0 go build -o /tmp/kiln ./cmd/kiln\n  /tmp/kiln agent-image --tag kiln-agent:latest",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if spec.Kiln == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				spec.Kiln = exe
			}
			if rootfs != "" {
				return writeRootfs(e, rootfs, spec)
			}
			cli, err := scaler.NewDockerClient()
			if err != nil {
				return err
			}
			defer cli.Close()
			res, err := agentimage.Build(cmd.Context(), cli, tag, spec)
			if err != nil {
				return err
			}
			what := "built"
			if !res.Imported {
				what = "up to date"
			}
			fmt.Fprintf(e.stdout, "%s %s (%s)\n", res.Tag, what, res.ID)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tag, "tag", "kiln-agent:latest", "the image's name; empty: kiln-agent:<content hash>")
	fl.StringVar(&rootfs, "rootfs", "", "write the root filesystem as a tar to this file instead of importing it")
	fl.StringVar(&spec.Kiln, "kiln", "", "the static kiln binary to put in (default: this one)")
	fl.StringVar(&spec.Busybox, "busybox", "/bin/busybox", "a static busybox (Debian's busybox-static)")
	fl.StringVar(&spec.Git, "git", "", "the git to put in, with its libraries (default: git on PATH; - for none)")
	fl.StringVar(&spec.CACerts, "ca-certs", "", "the CA bundle for https clones (default /etc/ssl/certs/ca-certificates.crt when present)")
	return cmd
}

// writeRootfs writes the image's root filesystem to path as a tar.
func writeRootfs(e *env, path string, spec agentimage.Spec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	sum, err := spec.Rootfs(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return err
	}
	fmt.Fprintf(e.stdout, "%s written (content sha256:%s)\n", path, sum)
	return nil
}
