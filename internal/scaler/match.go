package scaler

import (
	"runtime"

	"github.com/kilnci/kiln"
)

// offer is what a scaler's agents offer, as the dispatcher sees them once
// registered: its labels with the OS and architecture they add, and its
// mandatory labels.
func offer(c Config) kiln.AgentLabels {
	labels := kiln.NewLabels(c.Labels...).Union(c.MandatoryLabels...)
	switch c.Type {
	case "process":
		labels = labels.Union(runtime.GOOS, runtime.GOARCH)
	case "docker", "microvm", "firecracker", "kubernetes":
		labels = labels.Union("linux", runtime.GOARCH)
	}
	return kiln.AgentLabels{Labels: labels, Mandatory: kiln.NewLabels(c.MandatoryLabels...)}
}

// serves reports whether a scaler's agents could run a job requiring r.
func serves(c Config, r kiln.Requirement) bool {
	return offer(c).Accepts(r) && !r.RunsOn.Intersects(c.ExcludeLabels)
}

// match picks the scaler for a requirement (B168): of the scalers whose
// agents would accept it (its labels a subset of theirs, their mandatory
// labels all asked for, no excluded label asked for), the one with the
// smallest label set, the first configured on a tie. Retiring scalers
// never match. It returns -1 when none does.
func match(cs []Config, retiring func(string) bool, r kiln.Requirement) int {
	best := -1
	for i, c := range cs {
		if retiring(c.Name) || !serves(c, r) {
			continue
		}
		if best < 0 || len(cs[i].Labels) < len(cs[best].Labels) {
			best = i
		}
	}
	return best
}
