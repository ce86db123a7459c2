package store_test

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// FuzzNeedsOutputs feeds agent-reported outputs (a stranger's data: any
// KEY=value a step wrote) of three matrix children through the agreement
// rule and checks its invariants: a key is either defined or conflicting,
// never both; it is defined exactly when every child that set it agrees;
// a conflict names the disagreeing children.
func FuzzNeedsOutputs(f *testing.F) {
	f.Add("version=1\nimage=a", "version=1\nimage=b", "")
	f.Add("k=", "k=x", "k=")
	f.Add("a=1", "b=2", "c=3")
	f.Add("=\n=\n", "\x00=\xff", "é=ü")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		parse := func(s string) map[string]string {
			m := map[string]string{}
			for _, line := range strings.Split(s, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					m[k] = v
				}
			}
			return m
		}
		children := []store.UpstreamJob{
			{Name: "t (1)", Base: "t", Result: kiln.ResultSuccess, Outputs: parse(a)},
			{Name: "t (2)", Base: "t", Result: kiln.ResultSuccess, Outputs: parse(b)},
			{Name: "t (3)", Base: "t", Result: kiln.ResultSkipped, Outputs: parse(c)},
		}
		n := store.ReadyJob{Upstream: children}.Needs()["t"]
		if n.Result != kiln.ResultSuccess {
			t.Fatalf("group result %s", n.Result)
		}
		keys := map[string]bool{}
		for _, ch := range children {
			for k := range ch.Outputs {
				keys[k] = true
			}
		}
		for k := range keys {
			var vals []string
			for _, ch := range children {
				if v, ok := ch.Outputs[k]; ok {
					vals = append(vals, v)
				}
			}
			agree := true
			for _, v := range vals[1:] {
				agree = agree && v == vals[0]
			}
			v, err := n.Output(k)
			_, defined := n.Outputs[k]
			_, conflicting := n.Conflicts[k]
			if defined == conflicting {
				t.Fatalf("key %q: defined %v, conflicting %v", k, defined, conflicting)
			}
			if agree != defined || (agree && (err != nil || v != vals[0])) || (!agree && err == nil) {
				t.Fatalf("key %q: values %q gave %q, %v", k, vals, v, err)
			}
		}
		if len(n.Outputs)+len(n.Conflicts) != len(keys) {
			t.Fatalf("merged %d+%d keys of %d", len(n.Outputs), len(n.Conflicts), len(keys))
		}
	})
}
