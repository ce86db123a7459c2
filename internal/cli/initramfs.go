package cli

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/scaler/agentimage"
)

// newInitramfsCmd builds a microvm scaler's initramfs (docs/scalers.md).
func newInitramfsCmd(e *env) *cobra.Command {
	var spec scaler.InitramfsSpec
	var out, git string
	cmd := &cobra.Command{
		Use:   "initramfs",
		Short: "Build the initramfs of a microvm scaler's guests",
		Long: `initramfs writes the initramfs a microvm scaler boots (docs/scalers.md): a static busybox,
a static kiln binary (this one unless --kiln; build it with CGO_ENABLED=0), git with the
libraries ldd lists (as in the docker agent image; --git - leaves it out), the virtio
modules of the kernel (virtio_ring, virtio, virtio_mmio, failover, net_failover,
virtio_net, found under --modules) and an /init that brings up the network and runs one
agent with the settings kiln appends for each VM.`,
		Example: "  kiln scalers initramfs --modules /lib/modules/6.1.0-57-cloud-amd64 -o /var/lib/kiln/microvm.cpio",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" || spec.ModulesDir == "" {
				return usageErrorf("give the output file (-o) and the kernel's modules directory (--modules)")
			}
			if spec.Kiln == "" {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				spec.Kiln = exe
			}
			var rootfs bytes.Buffer
			if _, err := (agentimage.Spec{Kiln: spec.Kiln, Busybox: spec.Busybox, Git: git}).Rootfs(&rootfs); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			spec.Rootfs = &rootfs
			if err := scaler.BuildInitramfs(out, spec); err != nil {
				return &exitError{code: ExitFailure, err: err}
			}
			fmt.Fprintf(e.stdout, "wrote %s\n", out)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "output", "o", "", "the initramfs to write (a newc cpio archive)")
	fl.StringVar(&spec.Busybox, "busybox", "/bin/busybox", "a static busybox (Debian's busybox-static)")
	fl.StringVar(&spec.Kiln, "kiln", "", "a static kiln binary (default: this one)")
	fl.StringVar(&git, "git", "", "the git to put in, with its libraries (default: git on PATH; - for none)")
	fl.StringVar(&spec.ModulesDir, "modules", "", "the guest kernel's modules directory (lib/modules/<version>)")
	return cmd
}
