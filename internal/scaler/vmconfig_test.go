package scaler

import (
	"errors"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// A microvm scaler needs its kernel and initramfs and an accel of kvm,
// tcg or auto; a firecracker scaler its kernel and rootfs and at most 32
// vCPUs: each refusal names the key.
// Proves B195, B194 (docs/behaviours.md).
func TestVMScalerConfigRefusals(t *testing.T) {
	base := Config{Name: "vms", Labels: kiln.Labels{"vm"}, MaxAgents: 1}
	cases := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Type = "microvm"; c.Initrd = "i" }, "needs kernel and initrd"},
		{func(c *Config) { c.Type = "microvm"; c.Kernel, c.Initrd, c.Accel = "k", "i", "hvf" }, `accel: "hvf" is not kvm, tcg or auto`},
		{func(c *Config) { c.Type = "firecracker"; c.Kernel = "k" }, "needs kernel (an uncompressed vmlinux) and rootfs"},
		{func(c *Config) { c.Type = "firecracker"; c.Kernel, c.Rootfs, c.VCPUs = "k", "r", 33 }, "vcpus must be between 1 and 32"},
	}
	for _, tc := range cases {
		c := base
		tc.mod(&c)
		err := errors.Join(Validate([]Config{c}, DefaultCaps())...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "scalers[0] (vms)") {
			t.Errorf("%+v: %v, want %q", c, err, tc.want)
		}
	}
	ok := base
	ok.Type, ok.Kernel, ok.Initrd, ok.Accel = "microvm", "k", "i", "auto"
	if errs := Validate([]Config{ok}, DefaultCaps()); len(errs) != 0 {
		t.Fatalf("a good microvm scaler: %v", errs)
	}
}
