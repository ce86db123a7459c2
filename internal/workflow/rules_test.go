package workflow

import (
	"strings"
	"testing"
)

// job wraps steps-level YAML into a minimal valid workflow around one job.
func job(body string) string {
	return "on: push\njobs:\n  a:\n" + body
}

const okSteps = "    steps: [{run: x}]\n"

// TestRules checks one validation rule per case: the error's position and
// message. Every rule of docs/workflow.md has a case here.
// Proves B74, B207, B211 and B271 (docs/behaviours.md).
func TestRules(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		// structure and types
		{"root not a mapping", "- a\n", "1:1: a workflow file is a mapping"},
		{"missing on", "jobs: {a: {steps: [{run: x}]}}\n", "1:1: on: is missing"},
		{"missing jobs", "on: push\n", "1:1: jobs: is missing"},
		{"empty jobs", "on: push\njobs: {}\n", "2:7: jobs: a workflow needs at least one job"},
		{"unknown top key", "on: push\nnmae: x\njobs: {a: {steps: [{run: x}]}}\n", `2:1: unknown key "nmae" in the workflow; did you mean "name"?`},
		{"unknown job key", job("    stpes: []\n" + okSteps), `4:5: unknown key "stpes" in job "a"; did you mean "steps"?`},
		{"github key hint", job("    runs-on: linux\n" + okSteps), `4:5: unknown key "runs-on" in job "a"; write runs_on`},
		{"unknown step key", job("    steps: [{run: x, uses: actions/checkout}]\n"), `4:22: unknown key "uses" in step 1 of job "a"; kiln steps run shell commands`},
		{"wrong type jobs", "on: push\njobs: [a]\n", "2:7: jobs must be a mapping, not a list"},
		{"wrong type bool", job("    checkout: nope\n" + okSteps), "4:15: checkout: expected true or false, found a string"},
		{"wrong type int", job("    matrix: {a: [x]}\n    max_parallel: two\n" + okSteps), "5:19: max_parallel: expected a whole number"},
		{"wrong type env", job("    env: {A: [1]}\n" + okSteps), "4:14: env: the value of A must be a string, not a list"},
		{"step as string", job("    steps: [make]\n"), "4:13: step 1 of job \"a\" is a string; write it as - run: make"},
		{"step without run", job("    steps: [{name: x}]\n"), `4:13: step 1 of job "a" needs run:`},
		{"empty run", job("    steps: [{run: \" \"}]\n"), "4:19: run: the script is empty"},
		{"no steps", job("    runs_on: linux\n"), `3:3: job "a" needs steps:`},
		{"empty steps", job("    steps: []\n"), "4:12: steps: the list is empty"},
		// ids and names
		{"bad job id", "on: push\njobs:\n  1st: {steps: [{run: x}]}\n", `3:3: jobs: job id "1st" must start with a letter`},
		{"bad matrix key", job("    matrix: {a.b: [x]}\n" + okSteps), `4:14: matrix: matrix key "a.b" must start`},
		{"bad input name", "on: {dispatch: {inputs: {\"my input\": {}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:26: on.dispatch.inputs: input name "my input"`},
		{"bad env name", "on: push\nenv: {1A: x}\njobs: {a: {steps: [{run: x}]}}\n", `2:7: env: "1A" is not a valid variable name`},
		{"reserved env", "on: push\nenv: {KILN_X: x}\njobs: {a: {steps: [{run: x}]}}\n", "2:7: env: variables starting with KILN_ are reserved"},
		{"empty name", "name: \"\"\non: push\njobs: {a: {steps: [{run: x}]}}\n", "1:7: name: the name is empty"},
		{"duplicate job", "on: push\njobs:\n  a: {steps: [{run: x}]}\n  a: {steps: [{run: y}]}\n", `4:3: "a" is defined twice in jobs (first on line 3)`},
		{"duplicate key", job("    steps: [{run: x}]\n    steps: [{run: y}]\n"), `5:5: "steps" is defined twice in job "a" (first on line 4)`},
		// durations
		{"duration no unit", job("    timeout: 10\n" + okSteps), "4:14: timeout: 10 has no unit"},
		{"duration garbage", job("    timeout: soon\n" + okSteps), `4:14: timeout: "soon" is not a duration`},
		{"duration zero", job("    timeout: 0s\n" + okSteps), "4:14: timeout: must be longer than zero"},
		{"duration negative", job("    steps: [{run: x, timeout: -5m}]\n"), "4:31: timeout: must be longer than zero"},
		{"step duration expression", job("    steps: [{run: x, timeout: \"${{ inputs.t }}\"}]\n"), "4:31: timeout: expressions are not supported here yet (only a job's timeout may be one)"},
		{"workflow duration expression", "on: push\ntimeout: ${{ inputs.t }}\njobs: {a: {steps: [{run: x}]}}\n", "2:10: timeout: expressions are not supported here yet"},
		{"job timeout expression context", job("    timeout: ${{ steps.a.outputs.t }}\n" + okSteps), "4:18: timeout: \"steps\" is not available here"},
		{"days are not a unit", "on: push\ntimeout: 2d\njobs: {a: {steps: [{run: x}]}}\n", `2:10: timeout: "2d" is not a duration`},
		// retry and step enums
		{"retry range", job("    steps: [{run: x, retry: 0}]\n"), "4:29: retry: 0 is out of range"},
		{"retry missing attempts", job("    steps: [{run: x, retry: {delay: 1s}}]\n"), "4:29: retry: max_attempts: is missing"},
		{"retry backoff", job("    steps: [{run: x, retry: {max_attempts: 2, backoff: linear}}]\n"), `4:56: backoff: "linear" is not a backoff`},
		{"retry max below delay", job("    steps: [{run: x, retry: {max_attempts: 2, delay: 1m, max_delay: 10s}}]\n"), "4:69: max_delay: 10s is shorter than delay"},
		{"shell", job("    steps: [{run: x, shell: pwsh}]\n"), `4:29: shell: "pwsh" is not supported; use sh or bash`},
		{"workdir escapes", job("    steps: [{run: x, working_directory: ../up}]\n"), `4:41: working_directory: "../up" is outside the workspace`},
		{"workdir absolute", job("    steps: [{run: x, working_directory: /etc}]\n"), `4:41: working_directory: "/etc" is outside the workspace`},
		{"on_agent_lost", job("    on_agent_lost: ignore\n" + okSteps), `4:20: on_agent_lost: "ignore" is not a policy`},
		{"label with space", job("    runs_on: [\"linux box\"]\n" + okSteps), `4:15: runs_on: label "linux box" contains`},
		// triggers
		{"unknown trigger", "on: [push, workflow_dispatch]\njobs: {a: {steps: [{run: x}]}}\n", `1:12: on: unknown trigger "workflow_dispatch"; kiln has push, pull_request, tag, schedule, dispatch; manual runs use the dispatch trigger`},
		{"trigger twice", "on: [push, push]\njobs: {a: {steps: [{run: x}]}}\n", "1:12: on: trigger push is listed twice"},
		{"no triggers", "on: []\njobs: {a: {steps: [{run: x}]}}\n", "1:5: on: names no trigger"},
		{"bad glob", "on: {push: {branches: [\"a[\"]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:24: on.push.branches: "a[" is not a valid glob`},
		{"bad regex", "on: {push: {paths: [\"re:a(\"]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:21: on.push.paths: "a(" is not a valid regular expression`},
		{"perl regex", "on: {tag: [\"re:^(?=v)\"]}\njobs: {a: {steps: [{run: x}]}}\n", `1:12: on.tag: "^(?=v)" is not a valid regular expression`},
		{"empty pattern", "on: {push: {branches: [\"!\"]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:24: on.push.branches: pattern "!" is empty`},
		{"expression in filter", "on: {push: {branches: [\"${{ inputs.b }}\"]}}\njobs: {a: {steps: [{run: x}]}}\n", "1:24: on.push.branches: expressions are not allowed in on: filters"},
		{"pattern twice", "on: {push: {branches: [main, main]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:30: on.push.branches: "main" is listed twice`},
		{"pr action", "on: {pull_request: {types: [synchronized]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:29: on.pull_request.types: unknown action "synchronized"; did you mean "synchronize"?`},
		{"push tags key", "on: {push: {tags: [v1]}}\njobs: {a: {steps: [{run: x}]}}\n", `1:13: unknown key "tags" in the push trigger; tags have their own trigger`},
		{"cron never fires", "on: {schedule: [{cron: \"0 0 31 4 *\"}]}\njobs: {a: {steps: [{run: x}]}}\n", `1:24: on.schedule: cron "0 0 31 4 *" never fires`},
		{"cron fields", "on: {schedule: [{cron: \"0 3 * *\"}]}\njobs: {a: {steps: [{run: x}]}}\n", `1:24: on.schedule: cron "0 3 * *" is not valid`},
		{"cron every", "on: {schedule: [\"@every 5m\"]}\njobs: {a: {steps: [{run: x}]}}\n", "1:17: on.schedule: cron \"@every 5m\": @every is not supported"},
		{"cron tz prefix", "on: {schedule: [\"CRON_TZ=UTC\"]}\njobs: {a: {steps: [{run: x}]}}\n", "1:17: on.schedule: cron \"CRON_TZ=UTC\": set the time zone with timezone:"},
		{"cron missing", "on: {schedule: [{timezone: UTC}]}\njobs: {a: {steps: [{run: x}]}}\n", "1:17: on.schedule: cron: is missing"},
		{"schedule empty", "on: [schedule]\njobs: {a: {steps: [{run: x}]}}\n", "1:6: on.schedule: needs at least one cron line"},
		{"bad timezone", "on: {schedule: [{cron: \"@daily\", timezone: Mars/Base}]}\njobs: {a: {steps: [{run: x}]}}\n", `1:44: timezone: "Mars/Base" is not a time zone`},
		{"local timezone", "on: {schedule: [{cron: \"@daily\", timezone: Local}]}\njobs: {a: {steps: [{run: x}]}}\n", `1:44: timezone: "Local" is not a time zone`},
		{"input type", "on: {dispatch: {inputs: {a: {type: bool}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:36: input "a": unknown type "bool"; types are string, choice, boolean, number; did you mean "boolean"?`},
		{"choice without options", "on: {dispatch: {inputs: {a: {type: choice}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:26: input "a": a choice input needs options`},
		{"choice default", "on: {dispatch: {inputs: {a: {type: choice, options: [x, y], default: z}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:70: input "a": the default "z" is not one of the options (x, y)`},
		{"boolean default", "on: {dispatch: {inputs: {a: {type: boolean, default: \"yes\"}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:54: input "a" default: expected true or false`},
		{"number default", "on: {dispatch: {inputs: {a: {type: number, default: many}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:53: input "a": the default must be a number`},
		{"options on string", "on: {dispatch: {inputs: {a: {options: [x]}}}}\njobs: {a: {steps: [{run: x}]}}\n", `1:30: input "a": only a choice input has options`},
		// needs
		{"unknown need", "on: push\njobs:\n  test: {steps: [{run: x}]}\n  b: {needs: tset, steps: [{run: x}]}\n", `4:14: needs: job "tset" does not exist; did you mean "test"?`},
		{"need on child", "on: push\njobs:\n  test: {matrix: {v: [\"1\"]}, steps: [{run: x}]}\n  b: {needs: [\"test (1)\"], steps: [{run: x}]}\n", `4:15: needs: job "test (1)" does not exist; needs names whole jobs`},
		{"self need", "on: push\njobs:\n  a: {needs: [a], steps: [{run: x}]}\n", `3:15: needs: job "a" cannot need itself`},
		{"need twice", "on: push\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: [a, {job: a, when: always}], steps: [{run: x}]}\n", `4:24: needs: job "a" is listed twice`},
		{"cycle", "on: push\njobs:\n  a: {needs: c, steps: [{run: x}]}\n  b: {needs: a, steps: [{run: x}]}\n  c: {needs: b, steps: [{run: x}]}\n", "4:14: needs: cycle a → c → b → a"},
		{"when word", "on: push\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: [{job: a, when: sucess}], steps: [{run: x}]}\n", `4:30: when: "sucess" is not a result; use success, failure, cancelled, skipped, always; did you mean "success"?`},
		{"need without job", "on: push\njobs:\n  a: {steps: [{run: x}]}\n  b: {needs: [{when: always}], steps: [{run: x}]}\n", "4:15: needs: job: is missing"},
		// matrix
		{"matrix empty", job("    matrix: {}\n" + okSteps), "4:13: matrix: needs at least one key"},
		{"matrix not list", job("    matrix: {go: \"1.26\"}\n" + okSteps), "4:18: matrix: go needs a non-empty list of values"},
		{"matrix dup value", job("    matrix: {go: [a, a]}\n" + okSteps), `4:22: matrix: value "a" of go is listed twice`},
		{"matrix include inside", job("    matrix: {go: [a], include: [{go: b}]}\n" + okSteps), "4:23: matrix: write include: next to matrix:"},
		{"matrix too big", job("    matrix: {a: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17], b: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}\n" + okSteps), "4:5: matrix: 272 children; a job expands to at most 256"},
		{"matrix way too big", job("    matrix: {a: [1,2,3,4,5,6,7,8,9,10], b: [1,2,3,4,5,6,7,8,9,10], c: [1,2,3,4,5,6,7,8,9,10], d: [1,2,3,4,5,6,7,8,9,10]}\n" + okSteps), "4:5: matrix: 10000 combinations; a job expands to at most 256 children"},
		{"exclude unknown key", job("    matrix: {go: [a]}\n    exclude: [{og: a}]\n" + okSteps), `5:16: exclude: "og" is not a matrix key; did you mean "go"?`},
		{"exclude matches nothing", job("    matrix: {go: [a, b]}\n    exclude: [{go: c}]\n" + okSteps), "5:15: exclude: {go: c} matches no combination"},
		{"exclude everything", job("    matrix: {go: [a]}\n    exclude: [{go: a}]\n" + okSteps), "4:5: matrix: exclude removes every combination"},
		{"exclude without matrix", job("    exclude: [{go: a}]\n" + okSteps), "4:5: exclude: only a matrix job has exclude"},
		{"fail_fast without matrix", job("    fail_fast: false\n" + okSteps), "4:5: fail_fast: only a matrix job has fail_fast"},
		{"max_parallel range", job("    matrix: {go: [a]}\n    max_parallel: 0\n" + okSteps), "5:19: max_parallel: 0 is out of range"},
		{"duplicate child names", job("    matrix: {go: [a]}\n    include: [{go: b}, {go: b}]\n" + okSteps), `4:5: matrix: two children are both named "a (b)"`},
		// not supported yet
		{"concurrency", "on: push\nconcurrency: {group: x}\njobs: {a: {steps: [{run: x}]}}\n", "2:1: `concurrency` is not supported yet: runs are not grouped yet"},
		{"workflow approval", "on: push\napproval: {}\njobs: {a: {steps: [{run: x}]}}\n", "2:1: `approval` is not supported yet"},
		{"context", job("    context: production\n" + okSteps), "4:5: `context` is not supported yet"},
		{"secrets", job("    secrets: [TOKEN]\n" + okSteps), "4:5: `secrets` is not supported yet"},
		{"approval", job("    approval: {}\n" + okSteps), "4:5: `approval` is not supported yet"},
		{"cache without key", job("    cache: [{paths: [x]}]\n" + okSteps), "4:13: cache: key: is missing"},
		{"cache in the home directory", job("    cache: [{key: k, paths: [~/go/pkg/mod]}]\n" + okSteps), "4:30: cache: paths: \"~/go/pkg/mod\" must be relative to the workspace"},
		{"cache key expression", job("    cache: [{key: \"${{ nope }}\", paths: [x]}]\n" + okSteps), "4:24: cache.key: \"nope\" is not available here"},
		{"artifact without paths", job("    artifacts: [{name: a}]\n" + okSteps), "4:17: artifacts: paths: is missing"},
		{"artifact outside the workspace", job("    artifacts: [{name: a, paths: [../x]}]\n" + okSteps), "4:35: artifacts: paths: \"../x\" must not climb out of the workspace (..)"},
		{"artifact name in two jobs", "on: push\njobs:\n  a:\n    artifacts: [{name: d, paths: [x]}]\n" + okSteps +
			"  b:\n    artifacts: [{name: d, paths: [y]}]\n" + okSteps, `6:3: artifacts: jobs a and b both upload an artifact named "d"`},
		{"artifact name with a slash", job("    artifacts: [{name: a/b, paths: [x]}]\n" + okSteps), "4:24: artifacts: name: must not hold / or \\"},
		{"container", job("    container: golang:1.26\n" + okSteps), "4:5: `container` is not supported yet"},
		// limits
		{"too many jobs' children", "on: push\njobs:\n" + manyMatrixJobs(5), "3:3: jobs: the workflow expands to 1280 jobs"},
	}
	for _, c := range cases {
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

// manyMatrixJobs returns n jobs of 256 children each.
func manyMatrixJobs(n int) string {
	var vals []string
	for i := range 16 {
		vals = append(vals, string(rune('a'+i)))
	}
	list := "[" + strings.Join(vals, ", ") + "]"
	var b strings.Builder
	for i := range n {
		b.WriteString("  j" + string(rune('a'+i)) + ":\n    matrix: {x: " + list + ", y: " + list + "}\n    steps: [{run: x}]\n")
	}
	return b.String()
}

// All the errors of a file are reported, sorted by position.
func TestAllErrorsReportedInOrder(t *testing.T) {
	errs := parseErrors(t, "on: [push, nope]\njobs:\n  a:\n    timeout: x\n    steps: [{run: x, shell: zsh}]\n  b: {needs: zz, steps: [{run: y}]}\n")
	want := []string{"1:12: on: unknown trigger", "4:14: timeout:", "5:29: shell:", "6:14: needs: job \"zz\""}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, errs[i], w)
		}
	}
}

func TestErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("on: push\njobs:\n  a:\n    steps:\n")
	for range 150 {
		b.WriteString("      - {run: x, shell: zsh}\n")
	}
	errs := parseErrors(t, b.String())
	if len(errs) != MaxErrors+1 || !strings.Contains(errs[len(errs)-1], "too many errors") {
		t.Fatalf("%d errors, last %q", len(errs), errs[len(errs)-1])
	}
}
