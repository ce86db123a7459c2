package expr

import "testing"

// A typical job or step `if:`.
const benchIf = "${{ event.name == 'push' && (event.branch == 'main' || startsWith(event.ref, 'refs/tags/v')) && needs.build-linux.result == 'success' && !cancelled() }}"

func BenchmarkParseCondition(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCondition(benchIf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckCondition(b *testing.B) {
	e, err := ParseCondition(benchIf)
	if err != nil {
		b.Fatal(err)
	}
	s := stepScope()
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := e.Check(s); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

func BenchmarkEvalCondition(b *testing.B) {
	e, err := ParseCondition(benchIf)
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := e.EvalBool(env); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkSubstituteRunScript(b *testing.B) {
	t, err := ParseTemplate("set -e\necho \"${{ event.branch }}\"\n./deploy.sh \"${{ inputs.target || 'staging' }}\" \"${{ needs.build-linux.outputs.version }}\"\n")
	if err != nil {
		b.Fatal(err)
	}
	env := testEnv()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := t.Substitute(env, "KILN_EXPR_"); err != nil {
			b.Fatal(err)
		}
	}
}
