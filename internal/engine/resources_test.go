package engine

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// A job's resources are part of its routing key: literal ones from the
// start, expressions evaluated when the job is released with the matrix it
// sees; what an expression evaluates to must read as a CPU amount or a
// memory size, or the job fails saying so.
// Proves B196, B197 (docs/behaviours.md).
func TestJobResourcesReachTheRequirement(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
jobs:
  fixed:
    runs_on: [linux]
    resources: {cpus: 2, memory: 4g}
    steps: [{run: make}]
  sized:
    runs_on: ["${{ matrix.os }}"]
    include:
      - {os: linux, n: "1", mem: 512m}
      - {os: linux, n: "lots", mem: 1g}
      - {os: arm64, n: "0.5", mem: "512"}
    fail_fast: false
    resources: {cpus: "${{ matrix.n }}", memory: "${{ matrix.mem }}"}
    steps: [{run: make}]
`, pushEvent(), nil)
		for name, want := range map[string]kiln.Resources{
			"fixed":                  {MilliCPUs: 2000, Memory: 4 << 30},
			"sized (linux, 1, 512m)": {MilliCPUs: 1000, Memory: 512 << 20},
		} {
			j := job(t, b, run.ID, name)
			if j.Status != kiln.JobQueued || j.Requirement.Resources != want || j.Requirement.RunsOn.Key() != "linux" {
				t.Fatalf("%s: %s, requirement %q", name, j.Status, j.Requirement.Key())
			}
		}
		for name, want := range map[string]string{
			"sized (linux, lots, 1g)": `resources.cpus: ${{ matrix.n }} evaluated to "lots": "lots" is not a CPU amount`,
			"sized (arm64, 0.5, 512)": `resources.memory: ${{ matrix.mem }} evaluated to "512": "512" is 512 bytes, less than 1 MiB`,
		} {
			if j := job(t, b, run.ID, name); j.Status != kiln.JobFailed || !strings.Contains(j.Error, want) {
				t.Fatalf("%s: %s %q, want an error with %q", name, j.Status, j.Error, want)
			}
		}
	})
}
