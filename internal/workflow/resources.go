package workflow

import (
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Resources are the CPU and memory a job asks for (`resources:`): a
// scaler reserves them against its budgets and gives the agent it starts
// for the job exactly that much (a container's limits, a VM's size); see
// docs/workflow.md#resources. Each value is either literal, read into
// Amount when the workflow is parsed, or an expression, evaluated when
// the job is queued (like a job's timeout).
type Resources struct {
	Amount     kiln.Resources
	CPUsExpr   *expr.Template
	MemoryExpr *expr.Template
}

// Literal reports whether no value holds an expression: the amount is
// then known when the run is created.
func (r *Resources) Literal() bool { return r == nil || r.CPUsExpr == nil && r.MemoryExpr == nil }

// MinMemory is the least memory a job may ask for: a number without a
// unit is bytes, and `memory: 512` is always a forgotten unit.
const MinMemory = 1 << 20

// ReadCPUs reads what a job's resources.cpus is or evaluated to.
func ReadCPUs(s string) (int64, error) {
	v, err := kiln.ParseCPUs(s)
	if err != nil {
		return 0, fmt.Errorf("%s", kiln.ErrorMessage(err))
	}
	return v, nil
}

// ReadMemory reads what a job's resources.memory is or evaluated to.
func ReadMemory(s string) (int64, error) {
	v, err := kiln.ParseMemory(s)
	if err != nil {
		return 0, fmt.Errorf("%s", kiln.ErrorMessage(err))
	}
	if v < MinMemory {
		return 0, fmt.Errorf("%q is %d bytes, less than 1 MiB; write a unit, like %sm or %sg", strings.TrimSpace(s), v, strings.TrimSpace(s), strings.TrimSpace(s))
	}
	return v, nil
}

// parseResources reads `resources: {cpus: 2, memory: 4g}`.
func (p *parser) parseResources(n *yaml.Node, j *Job) *Resources {
	pairs, ok := p.mapping(n, "resources")
	if !ok {
		return nil
	}
	f := p.fields(pairs, "resources", resourcesKeys)
	r := &Resources{}
	if len(pairs) == 0 {
		p.errorf(n, "resources: state cpus, memory or both, like {cpus: 2, memory: 4g}")
		return nil
	}
	if x, has := f["cpus"]; has {
		if s, ok := p.str(x.v, "resources.cpus"); ok {
			if strings.Contains(s, "${{") {
				r.CPUsExpr = p.text(x.v, "resources.cpus", LocJob, j)
			} else if v, err := ReadCPUs(s); err != nil {
				p.errorf(x.v, "resources.cpus: %v", err)
			} else {
				r.Amount.MilliCPUs = v
			}
		}
	}
	if x, has := f["memory"]; has {
		if s, ok := p.str(x.v, "resources.memory"); ok {
			if strings.Contains(s, "${{") {
				r.MemoryExpr = p.text(x.v, "resources.memory", LocJob, j)
			} else if v, err := ReadMemory(s); err != nil {
				p.errorf(x.v, "resources.memory: %v", err)
			} else {
				r.Amount.Memory = v
			}
		}
	}
	return r
}
