package executor

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// gitFailure is a failed git command with what its stderr says went wrong,
// in words a person reads: "could not connect to git.example.com:443"
// rather than "git fetch failed with exit code 128".
type gitFailure struct {
	cmd      string
	exitCode int
	cause    string // "" when stderr named nothing kiln recognises
	// transient: the failure may pass (a refused or broken connection, a
	// 5xx or 429 answer, a name that did not resolve), so a fetch is
	// tried again; the server answered and refused otherwise.
	transient bool
}

func (f *gitFailure) Error() string {
	if f.cause == "" {
		return fmt.Sprintf("git %s failed with exit code %d", f.cmd, f.exitCode)
	}
	return fmt.Sprintf("git %s failed: %s", f.cmd, f.cause)
}

var (
	reResolve = regexp.MustCompile(`Could not resolve host: ([^\s;,]+)`)
	reConnect = regexp.MustCompile(`Failed to connect to ([^\s]+) port (\d+)`)
	reStatus  = regexp.MustCompile(`The requested URL returned error: (\d{3})`)
	reSSH     = regexp.MustCompile(`ssh: connect to host ([^\s]+) port (\d+): (.+)`)
)

// classifyGit reads a failed command's last stderr lines; remote is the
// URL it talked to (credentials removed), for the host when git's own
// words do not name it.
func classifyGit(cmd string, exitCode int, stderr []string, remote string) *gitFailure {
	f := &gitFailure{cmd: cmd, exitCode: exitCode}
	remote = strings.Join(strings.Fields(remote), " ") // one line, whatever it held
	host := hostOf(remote)
	text := strings.Join(stderr, "\n")
	switch {
	case reResolve.MatchString(text):
		f.cause, f.transient = "could not resolve host "+reResolve.FindStringSubmatch(text)[1], true
	case reConnect.MatchString(text):
		m := reConnect.FindStringSubmatch(text)
		f.cause, f.transient = fmt.Sprintf("could not connect to %s:%s", m[1], m[2]), true
		if r := afterLast(text, ": "); strings.Contains(strings.ToLower(r), "refused") || strings.Contains(strings.ToLower(r), "timed out") {
			f.cause += " (" + strings.ToLower(strings.TrimSpace(r)) + ")"
		}
	case reSSH.MatchString(text):
		m := reSSH.FindStringSubmatch(text)
		f.cause, f.transient = fmt.Sprintf("could not connect to %s:%s (%s)", m[1], m[2], strings.ToLower(m[3])), true
	case reStatus.MatchString(text):
		code := reStatus.FindStringSubmatch(text)[1]
		f.cause = fmt.Sprintf("%s answered HTTP %s", host, code)
		f.transient = code[0] == '5' || code == "429"
	case strings.Contains(text, "Connection timed out") || strings.Contains(text, "Operation timed out"):
		f.cause, f.transient = "timed out connecting to "+host, true
	case strings.Contains(text, "early EOF") || strings.Contains(text, "RPC failed") ||
		strings.Contains(text, "remote end hung up unexpectedly") || strings.Contains(text, "Connection reset"):
		f.cause, f.transient = "the connection to "+host+" broke off", true
	case strings.Contains(text, "not our ref") || strings.Contains(text, "couldn't find remote ref") ||
		strings.Contains(text, "unadvertised object"):
		f.cause = host + " does not serve that commit or ref"
	case strings.Contains(text, "Authentication failed") || strings.Contains(text, "could not read Username") ||
		strings.Contains(text, "Permission denied"):
		f.cause = host + " refused the credentials (or asked for some and kiln has none)"
	case strings.Contains(text, "does not appear to be a git repository") || strings.Contains(text, "Repository not found"):
		f.cause = "no repository at " + remote
	}
	return f
}

func afterLast(s, sep string) string {
	line := s[strings.LastIndexByte(s, '\n')+1:]
	if i := strings.LastIndex(line, sep); i >= 0 {
		return line[i+len(sep):]
	}
	return ""
}

// hostOf is the host (and port) a remote names, or the remote itself.
func hostOf(remote string) string {
	if u, err := url.Parse(remote); err == nil && u.Host != "" {
		return u.Host
	}
	if at := strings.IndexByte(remote, '@'); at >= 0 { // git@host:path
		if host, _, ok := strings.Cut(remote[at+1:], ":"); ok {
			return host
		}
	}
	return remote
}
