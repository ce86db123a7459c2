package expr

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	cases := []struct{ src, want string }{
		{"", ""},
		{"plain $HOME {{x}}", "plain $HOME {{x}}"},
		{"deploy-${{ event.branch }}", "deploy-main"},
		{"${{event.pr.number}}/${{ run.number }}", "7/42"},
		{"[${{ env.MISSING }}]", "[]"},
		{"${{ inputs.dry_run }} ${{ !inputs.dry_run }}", "true false"},
		{"${{ event.pr }}", `{"number":7,"title":"Expressions"}`},
		{"${{ needs.numbers.list }}", "[1,2,3]"},
		{"golang:${{ matrix.go }}", "golang:1.26"},
		{"${{ 'a }} b' }}", "a }} b"},
		{"gomod-${{ hashFiles('go.sum') }}", "gomod-hash:go.sum"},
		{"${{ 1.5 }} ${{ 1e21 }} ${{ 0x10 }}", "1.5 1e+21 16"},
	}
	for _, c := range cases {
		got, err := mustTemplate(t, c.src).Render(testEnv())
		if err != nil || got != c.want {
			t.Errorf("Render(%q) = %q, %v; want %q", c.src, got, err, c.want)
		}
	}
	_, err := mustTemplate(t, "ok ${{ true < 1 }}").Render(testEnv())
	var e *Error
	if !errors.As(err, &e) || e.Offset != 12 {
		t.Errorf("Render error = %v, want one at offset 12", err)
	}
}

func TestSubstitute(t *testing.T) {
	tm := mustTemplate(t, "echo \"${{ event.branch }}\" ${{ event.pr.number }}\ncd ${{ env.MISSING }}")
	text, vars, err := tm.Substitute(testEnv(), "KILN_EXPR_")
	if err != nil {
		t.Fatal(err)
	}
	if want := "echo \"${KILN_EXPR_1}\" ${KILN_EXPR_2}\ncd ${KILN_EXPR_3}"; text != want {
		t.Errorf("text = %q, want %q", text, want)
	}
	want := []Var{{"KILN_EXPR_1", "main"}, {"KILN_EXPR_2", "7"}, {"KILN_EXPR_3", ""}}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("vars = %v, want %v", vars, want)
	}

	text, vars, err = mustTemplate(t, "no expressions: ${HOME}").Substitute(testEnv(), "P")
	if err != nil || text != "no expressions: ${HOME}" || len(vars) != 0 {
		t.Errorf("literal: %q %v %v", text, vars, err)
	}

	for _, prefix := range []string{"", "1X", "A-B", "A B", "$A", "é"} {
		if _, _, err := tm.Substitute(testEnv(), prefix); err == nil {
			t.Errorf("prefix %q accepted", prefix)
		}
	}
	env := testEnv()
	env.Contexts["inputs"] = map[string]any{"x": "a\x00b"}
	if _, _, err := mustTemplate(t, "${{ inputs.x }}").Substitute(env, "P"); err == nil || !strings.Contains(err.Error(), "NUL") {
		t.Errorf("NUL value: %v", err)
	}
}

// The rule from workflow.md: a hostile branch name in `run:` is printed,
// never executed. The script runs in a real /bin/sh.
// Proves B76 (docs/behaviours.md).
func TestSubstituteHostileBranchShell(t *testing.T) {
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	hostile := []string{
		"$(touch " + pwned + ")",
		"`touch " + pwned + "`",
		"\"; touch " + pwned + "; echo \"",
		"main\"\ntouch " + pwned + "\necho \"",
	}
	run := func(script string, vars []Var) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for _, v := range vars {
			cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sh -c %q: %v: %s", script, err, out)
		}
		return string(out)
	}
	tm := mustTemplate(t, `echo "${{ event.branch }}"`)
	for _, branch := range hostile {
		env := testEnv()
		env.Contexts["event"] = map[string]any{"branch": branch}

		// The control: pasting the value into the script would run it.
		pasted, err := tm.Render(env)
		if err != nil {
			t.Fatal(err)
		}
		run(pasted, nil)
		if _, err := os.Stat(pwned); err != nil {
			t.Fatalf("control: pasting %q did not execute it, so this test proves nothing", branch)
		}
		os.Remove(pwned)

		text, vars, err := tm.Substitute(env, "KILN_EXPR_")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "touch") {
			t.Fatalf("the value was pasted into the script: %q", text)
		}
		out := run(text, vars)
		if _, err := os.Stat(pwned); !os.IsNotExist(err) {
			t.Fatalf("branch %q was executed (stat: %v)", branch, err)
		}
		if out != branch+"\n" {
			t.Errorf("output = %q, want the literal branch %q", out, branch)
		}
	}
	// Unquoted, the value is split into words but still never executed.
	env := testEnv()
	env.Contexts["event"] = map[string]any{"branch": hostile[0]}
	text, vars, err := mustTemplate(t, "echo ${{ event.branch }}").Substitute(env, "V")
	if err != nil {
		t.Fatal(err)
	}
	run(text, vars)
	if _, err := os.Stat(pwned); !os.IsNotExist(err) {
		t.Fatal("unquoted reference was executed")
	}
}

// The examples in docs/expressions.md parse, check and evaluate as the page
// says.
func TestDocExamples(t *testing.T) {
	s := stepScope()
	s.HashFiles = true
	for _, src := range []string{
		"deploy-${{ event.branch }}",
		"${{ event.branch == 'main' && needs.build.outputs.version != '' }}",
		"./deploy.sh \"${{ inputs.target || 'staging' }}\" \"${{ needs.build.outputs.version }}\"",
		"golang:${{ matrix.go }}", "gomod-${{ hashFiles('go.sum') }}",
		"${{ format('{0}}}', event.sha) }}",
		"${{ env[format('{0}_TOKEN', matrix.target)] }}",
		"${{ needs['build (1.26)'].outputs.version }} ${{ needs.build-linux.result }}",
		"${{ contains(event.message, '[deploy]') }} ${{ contains(event.changed_files, 'go.sum') }}",
		"${{ startsWith(event.ref, 'refs/tags/v') }}",
		"${{ format('registry.example.com/{0}:{1}', event.repository, event.sha) }}",
		"${{ env.OPTIONAL || 'default' }}",
	} {
		tm := mustTemplate(t, src)
		if errs := tm.Check(s); len(errs) != 0 {
			t.Errorf("Check(%q): %v", src, errs)
		}
		if _, err := tm.Render(testEnv()); err != nil {
			t.Errorf("Render(%q): %v", src, err)
		}
	}
	for src, want := range map[string]string{
		"${{ format('{0}}}', 'x') }}":                                    "x}",
		"${{ 1 == '1' }} ${{ 0 == false }} ${{ null == '' }}":            "false false false",
		"${{ 'Main' == 'main' }} ${{ 1 == 1.0 }} ${{ 0x10 == 16 }}":      "false true true",
		"${{ 'B' < 'a' }} ${{ '10' < '9' }} ${{ startsWith(1234, 12) }}": "true true true",
		"${{ !'false' }} ${{ !'0' }} ${{ !needs.test.outputs }}":         "false false false",
		"${{ 3 }} ${{ -42 }} ${{ 1.5 }} ${{ 0.1 }} ${{ 0.0000001 }}":     "3 -42 1.5 0.1 1e-07",
	} {
		got, err := mustTemplate(t, src).Render(testEnv())
		if err != nil || got != want {
			t.Errorf("Render(%q) = %q, %v; want %q", src, got, err, want)
		}
	}
	e := mustParse(t, "event.Branch")
	if _, errs := e.Check(s); len(errs) != 1 {
		t.Error("property names are not case-sensitive to the checker")
	}
	if v, _ := e.Eval(testEnv()); v != nil {
		t.Errorf("event.Branch = %v, want null", v)
	}
}
