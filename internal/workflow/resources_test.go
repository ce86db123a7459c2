package workflow

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// A job's resources: {cpus, memory}, each a literal read when the file
// is parsed or an expression evaluated when the job is queued; every
// mistake is an error with its line and column and a sentence saying how
// to write it.
// Proves B196 (docs/behaviours.md).
func TestResources(t *testing.T) {
	good := []struct {
		src  string
		want kiln.Resources
	}{
		{"{cpus: 2, memory: 4g}", kiln.Resources{MilliCPUs: 2000, Memory: 4 << 30}},
		{"{cpus: 0.5}", kiln.Resources{MilliCPUs: 500}},
		{"{cpus: 250m, memory: 4GiB}", kiln.Resources{MilliCPUs: 250, Memory: 4 << 30}},
		{"{memory: 1.5g}", kiln.Resources{Memory: 3 << 29}},
		{"{memory: 512Mi}", kiln.Resources{Memory: 512 << 20}},
	}
	for _, g := range good {
		w, err := Parse("r.yml", []byte(job("    resources: "+g.src+"\n"+okSteps)))
		if err != nil {
			t.Fatalf("%s: %v", g.src, err)
		}
		r := w.Job("a").Resources
		if r == nil || r.Amount != g.want || !r.Literal() {
			t.Errorf("%s: %+v, want %+v", g.src, r, g.want)
		}
	}
	w, err := Parse("r.yml", []byte("on: push\njobs:\n  a:\n    matrix: {size: [1, 2]}\n"+
		"    resources: {cpus: \"${{ matrix.size }}\", memory: \"${{ matrix.size }}g\"}\n"+okSteps))
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Job("a").Resources; r.Literal() || r.CPUsExpr == nil || r.MemoryExpr == nil || !r.Amount.IsZero() {
		t.Fatalf("expressions: %+v", r)
	}
	if w, _ := Parse("r.yml", []byte(job(okSteps))); w.Job("a").Resources != nil {
		t.Fatal("a job without resources: has some")
	}

	bad := []struct{ name, src, want string }{
		{"resources in another system's shape", job("    resources: {requests: {cpus: 2, memory: 4g}}\n" + okSteps), `4:17: unknown key "requests" in resources; a job states one amount`},
		{"resources memory", job("    resources: {memory: lots}\n" + okSteps), `4:25: resources.memory: "lots" is not a memory size; write it like 512m, 4g or 4GiB`},
		{"resources memory without a unit", job("    resources: {memory: 512}\n" + okSteps), `4:25: resources.memory: "512" is 512 bytes, less than 1 MiB; write a unit, like 512m`},
		{"resources cpus", job("    resources: {cpus: two}\n" + okSteps), `4:23: resources.cpus: "two" is not a CPU amount; write it like 2, 0.5 or 500m`},
		{"resources cpus zero", job("    resources: {cpus: 0}\n" + okSteps), `4:23: resources.cpus: "0" is not a CPU amount`},
		{"resources typo", job("    resources: {cpu: 2}\n" + okSteps), `4:17: unknown key "cpu" in resources; did you mean "cpus"?`},
		{"resources empty", job("    resources: {}\n" + okSteps), `4:16: resources: state cpus, memory or both`},
		{"resources not a mapping", job("    resources: 2\n" + okSteps), `4:16: resources must be a mapping`},
		{"resources list", job("    resources: {cpus: [2]}\n" + okSteps), `4:23: resources.cpus: expected a string, found a list`},
		{"resources expression context", job("    resources: {cpus: \"${{ steps.x }}\"}\n" + okSteps), `4:28: resources.cpus: "steps" is not available here`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			errs := parseErrors(t, c.src)
			for _, e := range errs {
				if strings.HasPrefix(e, c.want) {
					return
				}
			}
			t.Errorf("want an error starting %q, got:\n%s", c.want, strings.Join(errs, "\n"))
		})
	}
}
