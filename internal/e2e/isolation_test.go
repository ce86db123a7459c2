package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/waittest"
)

// nobody is the unprivileged user the non-root agent runs as when the
// tests run as root.
const nobody = 65534

// attackStep is a step script that tries to reach what a step must not:
// every process's environment and command line (looking for agent
// tokens), the files named in files (the server's database, the local
// agents' token, the agents' ids), the entries of the directories in dirs
// (the agents' state directories), and the processes in pids (agents and
// server): whether it sees them in /proc and can signal them. It prints a
// line for each success, which the test reads back.
func attackStep(files, dirs []string, pids map[string]int) string {
	var b strings.Builder
	b.WriteString(`set +e
echo "attacker uid $(id -u)"
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  for tok in $( (tr '\0' '\n' < "$f") 2>/dev/null | grep -o 'kat_[a-z0-9]\{16,\}' | sort -u); do
    echo "FOUND TOKEN in $f: $tok"
  done
done
`)
	for _, f := range files {
		fmt.Fprintf(&b, "if head -c 1 %q >/dev/null 2>&1; then echo \"OPENED %s\"; fi\n", f, f)
	}
	for _, d := range dirs {
		fmt.Fprintf(&b, "for e in $(ls -A %q 2>/dev/null); do echo \"LISTED %s: $e\"; done\n", d, d)
		fmt.Fprintf(&b, "for tok in $(cat $(find %q -type f 2>/dev/null) 2>/dev/null | grep -ao 'kat_[a-z0-9]\\{16,\\}' | sort -u); do echo \"FOUND TOKEN under %s: $tok\"; done\n", d, d)
	}
	for name, pid := range pids {
		fmt.Fprintf(&b, "if grep -q kiln /proc/%d/cmdline 2>/dev/null; then echo \"SEES %s %d\"; fi\n", pid, name, pid)
		fmt.Fprintf(&b, "if kill -0 %d 2>/dev/null; then echo \"SIGNALS %s %d\"; fi\n", pid, name, pid)
	}
	b.WriteString("echo attack finished\n")
	return b.String()
}

// The trust boundary between a job's steps and the host that runs them:
// a step that walks /proc and the file system finds no agent token in any
// process's environment or command line, cannot open the server's
// database, the local agents' token file or an agent's state, and can
// neither see nor signal the agent and server processes — on the
// server's own local agent (root when the tests run as root) and on a
// separate agent running as an unprivileged user. The data directory is
// made the way `mkdir` leaves it (0755), as an operator's would be.
func TestStepsCannotReachAgentOrServerSecrets(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		// Said on stderr, so it shows without -v: half of the invariant
		// goes untested here.
		fmt.Fprintln(os.Stderr, "TestStepsCannotReachAgentOrServerSecrets: NOT RUN AS ROOT, so the root-agent case is SKIPPED: both agents run as this user")
	}
	parent := scratchDir(t)
	dataDir := filepath.Join(parent, "kiln-data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := startServerProc(t, dataDir, 0, "--local-agents", "1")
	client, err := api.NewClient(srv.URL, srv.adminToken(t))
	if err != nil {
		t.Fatal(err)
	}
	waitConnected(t, client, "local-1")

	secret, _ := agentToken(t, client, api.CreateTokenRequest{Name: "nobody"})
	stateDir := scratchDir(t)
	other := startAgentAs(t, srv.URL, secret, stateDir)
	waitConnected(t, client, agentIDIn(t, stateDir))

	localToken, err := os.ReadFile(filepath.Join(dataDir, "local-agent.token"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{"the local agent's": strings.TrimSpace(string(localToken)), "the unprivileged agent's": secret}
	localPid := findProc(t, "--id", "local-1")
	pids := map[string]int{"server": srv.pid(), "local-agent": localPid, "unprivileged-agent": other.pid()}
	localStates := []string{filepath.Join(dataDir, "agents", "local-1"), filepath.Join(dataDir+"-agents", "local-1")}
	serverFiles := []string{filepath.Join(dataDir, "kiln.db"), filepath.Join(dataDir, "local-agent.token")}
	// Each job attacks its own agent's state, the server's files and
	// every process. (Another agent's state on the same host is that
	// agent's to hide: a root step reads what root reads, but for what
	// its own agent hides; docs/security.md says to --hide it.)
	rootScript := attackStep(append(serverFiles, filepath.Join(localStates[0], "agent-id"), filepath.Join(localStates[1], "agent-id")),
		append([]string{dataDir}, localStates...), pids)
	otherScript := attackStep(append(serverFiles, filepath.Join(stateDir, "agent-id")), []string{dataDir, stateDir}, pids)

	r := newRepo(t, map[string]string{workflow("attack"): `on: push
jobs:
  root:
    runs_on: [local]
    steps:
      - run: |
` + indent(rootScript, "          ") + `
  unprivileged:
    runs_on: [unprivileged]
    steps:
      - run: |
` + indent(otherScript, "          ") + `
`})
	// The repository must be readable by the unprivileged agent's git.
	for d := r.dir; d != filepath.Dir(os.TempDir()) && d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o055); err != nil {
				t.Fatal(err)
			}
		}
	}
	addLocalSource(t, client, "app", r.dir)
	run := triggerOne(t, client, "app")
	run = waitRun(t, client, run.ID, 2*time.Minute)
	if run.Status != kiln.RunSuccess {
		t.Fatalf("%s", describeRun(run))
	}
	for _, job := range []string{"root", "unprivileged"} {
		lines := texts(logLines(t, client, run.ID, job, intp(0)))
		log := strings.Join(lines, "\n")
		t.Logf("%s job's attack:\n%s", job, log)
		if !strings.Contains(log, "attack finished") {
			t.Fatalf("the %s job's attack did not finish", job)
		}
		for whose, tok := range tokens {
			if strings.Contains(log, tok) {
				t.Errorf("%s step found %s token", job, whose)
			}
		}
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "OPENED "):
				t.Errorf("%s step opened %s", job, strings.TrimPrefix(l, "OPENED "))
			case strings.HasPrefix(l, "LISTED ") && !strings.HasSuffix(l, ": work"):
				// The job's own work directory is the one thing a
				// step may see in its agent's state directory.
				t.Errorf("%s step listed %s", job, strings.TrimPrefix(l, "LISTED "))
			case strings.HasPrefix(l, "SEES "), strings.HasPrefix(l, "SIGNALS "):
				t.Errorf("%s step %s", job, strings.ToLower(l))
			}
		}
	}
}

// Where steps are not isolated (here on purpose: --isolation off), a step
// of the agent's own unprivileged user still cannot read the agent's
// environment, where its token is: the agent is undumpable. (It can see
// the agent; that is what isolation adds.)
func TestUnisolatedStepCannotReadTheAgentEnvironment(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	secret, _ := agentToken(t, s.Client, api.CreateTokenRequest{Name: "unisolated"})
	stateDir := scratchDir(t)
	agent := startAgentAs(t, s.URL, secret, stateDir, "--isolation", "off")
	waitConnected(t, s.Client, agentIDIn(t, stateDir))
	r := newRepo(t, map[string]string{workflow("peek"): `on: push
jobs:
  peek:
    runs_on: [unprivileged]
    steps:
      - run: |
          set +e
          echo "uid $(id -u)"
          grep -q kiln /proc/` + strconv.Itoa(agent.pid()) + `/cmdline && echo "sees the agent"
          tr '\0' '\n' < /proc/` + strconv.Itoa(agent.pid()) + `/environ | grep -o 'kat_[a-z0-9]\{16,\}' | sed 's/^/FOUND /'
          echo done
`})
	for d := r.dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o055)
		}
	}
	addLocalSource(t, s.Client, "app", r.dir)
	run := waitRun(t, s.Client, triggerOne(t, s.Client, "app").ID, time.Minute)
	log := strings.Join(texts(logLines(t, s.Client, run.ID, "peek", intp(0))), "\n")
	t.Logf("the step:\n%s", log)
	if run.Status != kiln.RunSuccess || !strings.Contains(log, "done") || !strings.Contains(log, "sees the agent") {
		t.Fatalf("%s", describeRun(run))
	}
	if strings.Contains(log, secret) || strings.Contains(log, "FOUND") {
		t.Fatalf("an unisolated step of the agent's user read the agent's environment")
	}
	if !strings.Contains(agent.log.String(), "steps are NOT isolated (isolation off)") {
		t.Fatalf("the agent did not warn that steps are not isolated:\n%s", agent.log.String())
	}
}

// startAgentAs starts `kiln agent` (label "unprivileged", its id kept in
// stateDir) as an unprivileged user: nobody when the tests run as
// root, else the tests' own user.
func startAgentAs(t testing.TB, url, token, stateDir string, extra ...string) *proc {
	t.Helper()
	home := scratchDir(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + home, "LANG=C",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "KILN_AGENT_TOKEN=" + token}
	args := append([]string{"agent", "--server", url, "--state-dir", stateDir, "--labels", "unprivileged"}, extra...)
	p := &proc{name: "agent-unprivileged", log: newLogFile(t, "agent-unprivileged"), done: make(chan struct{})}
	p.cmd = exec.Command(kilnBin, args...)
	p.cmd.Env = env
	p.cmd.Dir = home
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		for _, d := range []string{home, stateDir} {
			if err := os.Chown(d, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}
		// The binary's directory is private to the tests' user.
		if err := os.Chmod(filepath.Dir(kilnBin), 0o755); err != nil {
			t.Fatal(err)
		}
		p.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start the unprivileged agent: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	return p
}

// agentIDIn waits for an agent to write its id into its state directory
// and returns it.
func agentIDIn(t testing.TB, stateDir string) string {
	t.Helper()
	var id string
	waittest.UntilState(t, 30*time.Second, "the agent to write its id", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(stateDir, "agent-id"))
		id = strings.TrimSpace(string(b))
		return err == nil && id != "", fmt.Sprint(err)
	})
	return id
}

// findProc is the pid of the kiln process whose command line holds the
// arguments want (in order, adjacent).
func findProc(t testing.TB, want ...string) int {
	t.Helper()
	needle := strings.Join(want, "\x00")
	var found int
	waittest.UntilState(t, 10*time.Second, "a process with "+strings.Join(want, " "), func() (bool, string) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && strings.Contains(string(b), needle) && strings.Contains(string(b), "agent\x00") {
				found = pid
				return true, ""
			}
		}
		return false, "none"
	})
	return found
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}
