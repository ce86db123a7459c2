package executor

import (
	"fmt"
	"slices"
)

// stepFiles are the files one attempt of a step writes to hand values on:
// $KILN_ENV, $KILN_PATH and $KILN_OUTPUT, by their names in meta.
type stepFiles struct{ env, path, output string }

// applyStepFiles reads what the step's last attempt wrote and applies it
// for later steps and the job's outputs. A file that cannot be parsed is
// applied not at all and fails the step.
func (e *Execution) applyStepFiles(js *jobState, f *stepFiles) error {
	limit := e.x.cfg.MaxEnvFileBytes

	data, err := js.ws.readMeta(f.env, limit)
	if err != nil {
		return fmt.Errorf("$KILN_ENV: %v", err)
	}
	vars, err := parseEnvFile(data, validEnvName)
	if err != nil {
		return fmt.Errorf("$KILN_ENV: %v", err)
	}
	for _, v := range vars {
		if reservedEnv[v.Name] {
			return fmt.Errorf("$KILN_ENV: %s is set by kiln and cannot be changed", v.Name)
		}
	}

	data, err = js.ws.readMeta(f.path, limit)
	if err != nil {
		return fmt.Errorf("$KILN_PATH: %v", err)
	}
	dirs, err := parsePathFile(data, js.ws.dir)
	if err != nil {
		return fmt.Errorf("$KILN_PATH: %v", err)
	}

	data, err = js.ws.readMeta(f.output, limit)
	if err != nil {
		return fmt.Errorf("$KILN_OUTPUT: %v", err)
	}
	outs, err := parseEnvFile(data, validOutputName)
	if err != nil {
		return fmt.Errorf("$KILN_OUTPUT: %v", err)
	}
	merged := make(map[string]string, len(js.outputs)+len(outs))
	for k, v := range js.outputs {
		merged[k] = v
	}
	for _, o := range outs {
		merged[o.Name] = o.Value
	}
	size := 0
	for k, v := range merged {
		size += len(k) + len(v)
	}
	if size > e.x.cfg.MaxOutputBytes {
		return fmt.Errorf("$KILN_OUTPUT: the job's outputs would be %d bytes, more than the %s allowed", size, formatBytes(int64(e.x.cfg.MaxOutputBytes)))
	}

	for _, v := range vars {
		js.env[v.Name] = v.Value
	}
	slices.Reverse(dirs) // the last line written comes first in PATH
	js.paths = append(dirs, js.paths...)
	js.outputs = merged
	return nil
}
