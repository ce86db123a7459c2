package executor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
)

// This file is the executor's only contact with the expression language.
// Until the expr package lands it understands just the status functions,
// true/false and `${{ a.b.c }}` look-ups, which is enough to exercise
// everything around it.

// evalEnv is what step expressions see.
type evalEnv struct {
	contexts  map[string]any
	status    kiln.Result // the job's status for success(), failure(), cancelled()
	hashFiles func([]string) (string, error)
}

// evalCondition evaluates a step's if: (bare, or wrapped whole in ${{ }}).
func evalCondition(src string, env *evalEnv) (bool, error) {
	s := strings.TrimSpace(src)
	if strings.HasPrefix(s, "${{") && strings.HasSuffix(s, "}}") {
		s = strings.TrimSpace(s[3 : len(s)-2])
	}
	switch s {
	case "success()":
		return env.status == kiln.ResultSuccess, nil
	case "failure()":
		return env.status == kiln.ResultFailure, nil
	case "cancelled()":
		return env.status == kiln.ResultCancelled, nil
	case "always()":
		return true, nil
	case "true":
		return env.status != kiln.ResultCancelled, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("unsupported condition %q", src)
}

// renderTemplate evaluates a template (an env value, working_directory)
// to text.
func renderTemplate(src string, env *evalEnv) (string, error) {
	text, vars, err := substituteTemplate(src, env, "")
	if err != nil {
		return "", err
	}
	_ = vars
	return text, nil
}

// substituteRun replaces each `${{ }}` of a run: script with a reference
// "${<prefix><n>}" and returns the values as environment variables, so a
// value is never pasted into the script as code.
func substituteRun(src string, env *evalEnv, prefix string) (string, []envVar, error) {
	return substituteTemplate(src, env, prefix)
}

// substituteTemplate with prefix "" renders values in place.
func substituteTemplate(src string, env *evalEnv, prefix string) (string, []envVar, error) {
	var b strings.Builder
	var vars []envVar
	rest := src
	for {
		i := strings.Index(rest, "${{")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return "", nil, fmt.Errorf("${{ is not closed by }}")
		}
		b.WriteString(rest[:i])
		path := strings.TrimSpace(rest[i+3 : i+j])
		v, err := lookup(env.contexts, path)
		if err != nil {
			return "", nil, err
		}
		if prefix == "" {
			b.WriteString(v)
		} else {
			name := prefix + strconv.Itoa(len(vars)+1)
			vars = append(vars, envVar{name, v})
			b.WriteString("${" + name + "}")
		}
		rest = rest[i+j+2:]
	}
	return b.String(), vars, nil
}

func lookup(ctx map[string]any, path string) (string, error) {
	var cur any = ctx
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("unsupported expression %q", path)
		}
		cur = m[part]
	}
	switch v := cur.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		b, err := json.Marshal(v)
		return string(b), err
	}
}
