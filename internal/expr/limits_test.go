package expr

import (
	"errors"
	"strings"
	"testing"
)

func wantLimitErr(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, msg) {
		t.Errorf("%s: err = %v, want one containing %q", what, err, msg)
	}
}

// Proves B75 (docs/behaviours.md).
func TestLimitDeepNesting(t *testing.T) {
	for _, src := range []string{
		strings.Repeat("(", 10000) + "a" + strings.Repeat(")", 10000),
		strings.Repeat("!", 10000) + "a",
		strings.Repeat("f(", 10000) + strings.Repeat(")", 10000),
		strings.Repeat("a[", 10000) + "0" + strings.Repeat("]", 10000),
		strings.Repeat("a < ", 10000) + "a",
	} {
		_, err := Parse(src)
		wantLimitErr(t, src[:10], err, "nested too deeply")
		_, err = ParseTemplate("${{ " + src + " }}")
		wantLimitErr(t, src[:10], err, "nested too deeply")
	}
	// Exactly at the limit is fine.
	src := strings.Repeat("!", MaxDepth-1) + "a"
	if _, err := Parse(src); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
}

// Proves B75 (docs/behaviours.md).
func TestLimitSourceLength(t *testing.T) {
	long := strings.Repeat("x", MaxSourceBytes+1)
	_, err := ParseTemplate(long)
	wantLimitErr(t, "template", err, "too long")
	_, err = ParseCondition(long)
	wantLimitErr(t, "condition", err, "too long")
	if _, err := ParseTemplate(long[1:]); err != nil {
		t.Errorf("a template of exactly MaxSourceBytes: %v", err)
	}
}

func TestLimitHugeFormat(t *testing.T) {
	env := testEnv()
	env.Contexts["inputs"] = map[string]any{"kb": strings.Repeat("k", 1024)}
	// 2000 placeholders of 1 KiB: about 2 MiB, refused before it is built.
	src := "format('" + strings.Repeat("{0}", 2000) + "', inputs.kb)"
	_, err := mustParse(t, src).Eval(env)
	wantLimitErr(t, "wide format", err, "format() would produce more than the limit of 1048576 bytes")

	// Doubling 60 times would be 2^60 bytes.
	nested := "'xx'"
	for range 60 {
		nested = "format('{0}{0}', " + nested + ")"
	}
	_, err = mustParse(t, nested).Eval(env)
	wantLimitErr(t, "doubling format", err, "more than the limit")

	// A smaller configured limit applies.
	env.Limits.MaxStringBytes = 100
	_, err = mustParse(t, "format('{0}{0}', inputs.kb)").Eval(env)
	wantLimitErr(t, "small limit", err, "argument 1 is longer than the limit of 100 bytes")
}

// Proves B75 (docs/behaviours.md).
func TestLimitSteps(t *testing.T) {
	env := testEnv()
	// A chain of falsy operands evaluates every one of them.
	src := strings.Repeat("null||", 10500) + "null"
	_, err := mustParse(t, src).Eval(env)
	wantLimitErr(t, "long chain", err, "more than 10000 evaluation steps")

	env.Limits.MaxSteps = 10
	_, err = mustParse(t, strings.Repeat("null || ", 10)+"null").Eval(env)
	wantLimitErr(t, "custom budget", err, "more than 10 evaluation steps")

	// Data-driven work is charged too: scanning a huge array, comparing huge
	// arrays or objects, lower-casing huge strings.
	big := make([]any, 1_000_000)
	for i := range big {
		big[i] = float64(i)
	}
	bigObj := make(map[string]any, 200_000)
	for i := range 200_000 {
		bigObj[strings.Repeat("k", i%50)+string(rune('a'+i%26))+ToString(i)] = i
	}
	env = &Env{Contexts: map[string]any{"d": map[string]any{
		"big": big, "obj": bigObj, "str": strings.Repeat("x", 20<<20),
	}}}
	for _, src := range []string{
		"contains(d.big, -1)",
		"d.big == d.big",
		"d.obj == d.obj",
		"contains(d.str, 'y')",
	} {
		_, err := mustParse(t, src).Eval(env)
		wantLimitErr(t, src, err, "evaluation steps")
	}
}

// Proves B75 (docs/behaviours.md).
func TestLimitRenderedSize(t *testing.T) {
	env := testEnv()
	env.Contexts["inputs"] = map[string]any{"s": strings.Repeat("s", 100<<10)}
	_, err := mustTemplate(t, strings.Repeat("${{ inputs.s }}", 11)).Render(env)
	wantLimitErr(t, "render", err, "longer than the limit of 1048576 bytes")
	_, _, err = mustTemplate(t, strings.Repeat("${{ inputs.s }}", 11)).Substitute(env, "V")
	wantLimitErr(t, "substitute", err, "longer than the limit of 1048576 bytes")
	if _, err := mustTemplate(t, strings.Repeat("${{ inputs.s }}", 10)).Render(env); err != nil {
		t.Errorf("10 × 100 KiB: %v", err)
	}

	huge := make([]any, 300_000)
	for i := range huge {
		huge[i] = "abc"
	}
	env.Contexts["inputs"] = map[string]any{"huge": huge}
	_, err = mustTemplate(t, "${{ inputs.huge }}").Render(env)
	wantLimitErr(t, "huge JSON", err, "longer than the limit")
}
