package executor

import (
	"path/filepath"
	"strings"
)

// exprVarPrefix names the environment variables that carry the values of
// `${{ }}` expressions found in a step's run: script.
const exprVarPrefix = "KILN_EXPR_"

// shellArgv is the command that runs a step's script file:
//
//	"" or "sh"  sh -e <script>
//	"bash"      bash --noprofile --norc -eo pipefail <script>
//	other       the value split on spaces, "{0}" replaced by the script
//	            path, or the path appended when there is no "{0}"
//	            (e.g. "python3 {0}", "node", "bash -x {0}"; "{0}" alone runs
//	            the script itself, by its #! line)
func shellArgv(shell, script string) []string {
	switch strings.TrimSpace(shell) {
	case "", "sh":
		return []string{"sh", "-e", script}
	case "bash":
		return []string{"bash", "--noprofile", "--norc", "-eo", "pipefail", script}
	}
	fields := strings.Fields(shell)
	replaced := false
	for i, f := range fields {
		if strings.Contains(f, "{0}") {
			fields[i] = strings.ReplaceAll(f, "{0}", script)
			replaced = true
		}
	}
	if !replaced {
		fields = append(fields, script)
	}
	return fields
}

// shFamily reports whether the step's shell reads `${NAME}` as a variable
// reference, which is how expressions in run: reach the script.
func shFamily(shell string) bool {
	fields := strings.Fields(shell)
	if len(fields) == 0 {
		return true
	}
	switch filepath.Base(fields[0]) {
	case "sh", "bash", "dash", "ash", "ksh", "mksh", "zsh", "busybox":
		return true
	}
	return false
}
