package scaler

import (
	"fmt"
	"math"
	"strings"

	"github.com/kilnci/kiln"
)

// What one agent is given and reserves (B197, B198). A job's `resources:`
// travel in its routing key (kiln.Requirement.Resources); each dimension
// it states is what the agent started for it gets — its container's
// limits, its VM's size — and what is reserved against resource_cap and
// scaler_caps. A dimension it leaves out is the scaler's own: the type's
// key (docker cpus/memory, a VM's vcpus/memory), else default_resources.
// An agent reserves exactly what it is given, and takes only jobs within
// it (kiln.AgentLabels.Limit), so the budgets count what agents can use.

// milli converts a configuration's CPUs to millicpus.
func milli(cpus float64) int64 { return int64(math.Round(cpus * 1000)) }

// AgentSize is what one agent of the scaler started for a job asking for
// r is given (and reserves).
func (c Config) AgentSize(r kiln.Resources) kiln.Resources { return given(c, r) }

// given is what one agent of c started for a job asking for r gets.
func given(c Config, r kiln.Resources) kiln.Resources {
	g := kiln.Resources{MilliCPUs: milli(c.DefaultResources.CPUs)}
	g.Memory, _ = ParseMemory(c.DefaultResources.Memory)
	if c.CPUs > 0 {
		g.MilliCPUs = milli(c.CPUs)
	}
	if c.VCPUs > 0 {
		g.MilliCPUs = int64(c.VCPUs) * 1000
	}
	if mem, _ := ParseMemory(c.Memory); mem > 0 {
		g.Memory = mem
	}
	if r.MilliCPUs > 0 {
		g.MilliCPUs = r.MilliCPUs
	}
	if r.Memory > 0 {
		g.Memory = r.Memory
	}
	return g
}

// bound is one ceiling on what a single agent can be given, and the key
// that sets it.
type bound struct {
	limit int64
	key   string
}

// ceilings are the bounds no agent of c can ever exceed, whatever else
// runs: its resource_cap, the global scaler_caps, and a firecracker VM's
// 32 vCPUs.
func ceilings(c Config, caps Caps) (cpus, mem []bound) {
	if c.ResourceCap.CPUs > 0 {
		cpus = append(cpus, bound{milli(c.ResourceCap.CPUs), "resource_cap.cpus"})
	}
	if caps.CPUs > 0 {
		cpus = append(cpus, bound{milli(caps.CPUs), "scaler_caps.cpus"})
	}
	if c.Type == "firecracker" {
		cpus = append(cpus, bound{32000, "a Firecracker VM's 32 vCPUs"})
	}
	if v, _ := ParseMemory(c.ResourceCap.Memory); v > 0 {
		mem = append(mem, bound{v, "resource_cap.memory"})
	}
	if v, _ := ParseMemory(caps.Memory); v > 0 {
		mem = append(mem, bound{v, "scaler_caps.memory"})
	}
	return cpus, mem
}

// tooBig says why an agent of c can never be given what a job asking for
// r needs ("" when it can).
func tooBig(c Config, caps Caps, r kiln.Resources) string {
	g := given(c, r)
	cpus, mem := ceilings(c, caps)
	for _, b := range cpus {
		if g.MilliCPUs > b.limit {
			return fmt.Sprintf("%s: at most %s CPUs (%s)", c.Name, kiln.FormatCPUs(b.limit), b.key)
		}
	}
	for _, b := range mem {
		if g.Memory > b.limit {
			return fmt.Sprintf("%s: at most %s (%s)", c.Name, kiln.FormatMemory(b.limit), b.key)
		}
	}
	return ""
}

// fits reports whether the amount can be reserved now, beside what the
// scaler (st) and all scalers (all) have reserved; when it cannot, it
// says which budget is full.
func fits(c Config, caps Caps, st, all, amount kiln.Resources) (bool, string) {
	capMem, _ := ParseMemory(c.ResourceCap.Memory)
	globalMem, _ := ParseMemory(caps.Memory)
	for _, b := range []struct {
		cap, used, want int64
		what            func(int64) string
		scope           string
	}{
		{milli(c.ResourceCap.CPUs), st.MilliCPUs, amount.MilliCPUs, cpuText, "scaler " + c.Name},
		{capMem, st.Memory, amount.Memory, kiln.FormatMemory, "scaler " + c.Name},
		{milli(caps.CPUs), all.MilliCPUs, amount.MilliCPUs, cpuText, "scaler_caps"},
		{globalMem, all.Memory, amount.Memory, kiln.FormatMemory, "scaler_caps"},
	} {
		if b.cap > 0 && b.used+b.want > b.cap {
			return false, fmt.Sprintf("%s: %s of %s reserved, the job needs %s", b.scope, b.what(b.used), b.what(b.cap), b.what(b.want))
		}
	}
	return true, ""
}

func cpuText(m int64) string { return kiln.FormatCPUs(m) + " CPUs" }

// tooBigReason is the pending reason of jobs no serving scaler can ever
// give what they ask for.
func tooBigReason(r kiln.Resources, why []string) string {
	return fmt.Sprintf("no scaler can start an agent with %s (%s)", r, strings.Join(why, "; "))
}
