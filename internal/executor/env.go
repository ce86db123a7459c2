package executor

import (
	"os"
	"slices"
	"strings"
)

// AgentOnlyEnv reports whether an environment variable of the agent's own
// process must never reach a step: every KILN_* variable (the agent's and
// server's settings and credentials, such as KILN_AGENT_TOKEN, KILN_TOKEN,
// KILN_ADMIN_TOKEN and KILN_SERVER_URL; and the KILN_* variables of an
// outer job when kiln itself runs inside a step). The executor sets the
// KILN_* variables a step should see itself.
func AgentOnlyEnv(name string) bool {
	return strings.HasPrefix(name, "KILN_")
}

// SanitizeEnv returns env ("NAME=value" entries) without the variables
// AgentOnlyEnv rejects and without malformed entries.
func SanitizeEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || AgentOnlyEnv(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// envMap is an environment under construction; later sets win.
type envMap map[string]string

func newEnvMap(base []string) envMap {
	m := make(envMap, len(base)+16)
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func (m envMap) setAll(vars map[string]string) {
	for k, v := range vars {
		m[k] = v
	}
}

// list returns the environment as sorted "NAME=value" entries.
func (m envMap) list() []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// clone copies m.
func (m envMap) clone() envMap {
	c := make(envMap, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// prependPath puts dirs (most recent first) in front of PATH.
func (m envMap) prependPath(dirs []string) {
	if len(dirs) == 0 {
		return
	}
	parts := slices.Clone(dirs)
	if p := m["PATH"]; p != "" {
		parts = append(parts, p)
	}
	m["PATH"] = strings.Join(parts, string(os.PathListSeparator))
}

// reservedEnv are the KILN variables the executor sets for every step; workflow,
// job and step env and $KILN_ENV cannot change them.
var reservedEnv = map[string]bool{
	"KILN": true, "KILN_WORKSPACE": true, "KILN_RUN_ID": true, "KILN_JOB": true,
	"KILN_JOB_ID": true, "KILN_TEMP": true, "KILN_ENV": true, "KILN_PATH": true, "KILN_OUTPUT": true,
	cookieVar: true,
}

// stepUserEnv makes the environment the step user's: its HOME, USER and
// LOGNAME rather than the agent's.
func stepUserEnv(env []string, u *User) []string {
	m := newEnvMap(env)
	home := u.Home
	if home == "" {
		home = "/"
	}
	m["HOME"], m["USER"], m["LOGNAME"] = home, u.Name, u.Name
	return m.list()
}
