package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// outputKeyPattern is what `needs.<job>.outputs.KEY` can name.
var outputKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// envVar is one NAME=value pair, in file order.
type envVar struct{ Name, Value string }

// parseEnvFile reads the $KILN_ENV / $KILN_OUTPUT format: one `NAME=value`
// per line (the value is the rest of the line, taken as it is), or a
// multi-line value in GitHub's heredoc form
//
//	NAME<<DELIMITER
//	line one
//	line two
//	DELIMITER
//
// Empty lines are ignored; CRLF line ends are accepted. Errors name the
// line but never quote it: the file may hold a secret.
func parseEnvFile(data string, validName func(string) bool) ([]envVar, error) {
	lines := strings.Split(data, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var vars []envVar
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSuffix(lines[i], "\r")
		if line == "" {
			continue
		}
		eq := strings.IndexByte(line, '=')
		hd := strings.Index(line, "<<")
		if hd >= 0 && (eq < 0 || hd < eq) {
			name, delim := line[:hd], line[hd+2:]
			if !validName(name) {
				return nil, fmt.Errorf("line %d: %q is not a valid name", i+1, name)
			}
			if delim == "" {
				return nil, fmt.Errorf("line %d: %s<< needs a delimiter after <<", i+1, name)
			}
			start := i + 1
			end := -1
			for j := start; j < len(lines); j++ {
				if strings.TrimSuffix(lines[j], "\r") == delim {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, fmt.Errorf("line %d: the value of %s is not closed by a line holding only its delimiter", i+1, name)
			}
			value := make([]string, 0, end-start)
			for _, l := range lines[start:end] {
				value = append(value, strings.TrimSuffix(l, "\r"))
			}
			vars = append(vars, envVar{name, strings.Join(value, "\n")})
			i = end
			continue
		}
		if eq < 0 {
			return nil, fmt.Errorf("line %d: expected NAME=value or NAME<<DELIMITER", i+1)
		}
		name := line[:eq]
		if !validName(name) {
			return nil, fmt.Errorf("line %d: %q is not a valid name", i+1, name)
		}
		vars = append(vars, envVar{name, line[eq+1:]})
	}
	return vars, nil
}

func validEnvName(s string) bool    { return envKeyPattern.MatchString(s) }
func validOutputName(s string) bool { return outputKeyPattern.MatchString(s) }

// parsePathFile reads $KILN_PATH: one directory per line, relative ones
// taken from the workspace. It returns them in file order.
func parsePathFile(data, workspace string) ([]string, error) {
	var dirs []string
	for i, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" {
			continue
		}
		if strings.ContainsRune(line, os.PathListSeparator) {
			return nil, fmt.Errorf("line %d: a directory may not contain %q", i+1, os.PathListSeparator)
		}
		if !filepath.IsAbs(line) {
			line = filepath.Join(workspace, line)
		}
		dirs = append(dirs, filepath.Clean(line))
	}
	return dirs, nil
}
