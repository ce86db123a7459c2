package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/waittest"
)

// pgBinDirs are where the PostgreSQL server programs are looked for (the
// Debian packages' layout first).
var pgBinDirs = []string{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"}

// ownPostgres is a PostgreSQL instance this test started in a directory of
// its own, so it can stop and start it without disturbing anyone else's.
type ownPostgres struct {
	bin, data, logFile string
	port               int
	asUser             string // run its programs as this user ("" : as this process)
}

// startOwnPostgres initdb's a cluster in a t.TempDir() and starts it on a
// free loopback port, trusting local connections as user kiln. It skips
// the test — loudly — when the server programs are not installed. As root
// the programs run as the postgres user (initdb refuses root), which then
// owns the directory.
func startOwnPostgres(t *testing.T) *ownPostgres {
	t.Helper()
	pg := &ownPostgres{}
	for _, d := range pgBinDirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			pg.bin = d
			break
		}
	}
	if pg.bin == "" {
		t.Skipf("SKIPPED: no PostgreSQL server programs (initdb, pg_ctl) in %v; install postgresql to run this fault test", pgBinDirs)
	}
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("SKIPPED: running as root and there is no postgres user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		// The postgres user must reach the directory through the test's
		// private temporary directory above it.
		for d := filepath.Dir(dir); d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		pg.asUser = "postgres"
	}
	pg.data, pg.logFile, pg.port = filepath.Join(dir, "data"), filepath.Join(dir, "postgres.log"), freePort(t)
	pg.run(t, "initdb", "-D", pg.data, "-U", "kiln", "--auth=trust", "--no-sync", "-E", "UTF8")
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nmax_connections = 60\n", pg.port)
	f, err := os.OpenFile(filepath.Join(pg.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pg.start(t)
	t.Cleanup(func() {
		// Whatever the test did, the instance goes with it.
		_ = pg.command("pg_ctl", "-D", pg.data, "-m", "immediate", "-w", "stop").Run()
	})
	return pg
}

// URL is the database the server uses (the instance is the test's own).
func (pg *ownPostgres) URL() string {
	return fmt.Sprintf("postgres://kiln@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

func (pg *ownPostgres) command(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(pg.bin, prog)
	if pg.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", pg.asUser, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (pg *ownPostgres) run(t *testing.T, prog string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	cmd := pg.command(prog, args...)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(pg.logFile)
		t.Fatalf("%s %v: %v\n%s\n%s", prog, args, err, out.String(), tail(string(log), 20))
	}
}

// start starts the instance and returns once it accepts connections.
func (pg *ownPostgres) start(t *testing.T) {
	t.Helper()
	pg.run(t, "pg_ctl", "-D", pg.data, "-l", pg.logFile, "-w", "-t", "60", "start")
}

// stop shuts the instance down as an operator restarting it does: fast
// (open connections are cut, nothing is waited for).
func (pg *ownPostgres) stop(t *testing.T) {
	t.Helper()
	pg.run(t, "pg_ctl", "-D", pg.data, "-m", "fast", "-w", "-t", "60", "stop")
}

// readyCode is /ready's status code (0 when the server did not answer).
func readyCode(url string) int {
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/ready", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// PostgreSQL itself is restarted (pg_ctl stop -m fast, then start) while a
// real agent runs a job of a server on it. While the database is down the
// server says so on /ready (503) and keeps its agent; once it is back the
// job goes on where it was: the run ends successful, the job ran once on
// its one agent (the step's timestamped marks show a single copy), and
// every log line the step printed — those acknowledged before, during and
// after the outage — is stored exactly once, in order.
//
// B132.
func TestPostgresRestartedMidJobLosesNothingAndRunsNothingTwice(t *testing.T) {
	t.Parallel()
	pg := startOwnPostgres(t)
	dir := t.TempDir()
	pids, marks := filepath.Join(dir, "pids"), filepath.Join(dir, "marks")
	if err := os.Mkdir(pids, 0o755); err != nil {
		t.Fatal(err)
	}
	killLeftovers(t, pids)
	// The outage is held until the step has stamped 30 more marks (3 s
	// or more); the job runs long enough to outlast it on a loaded
	// machine, and stale_after is well past the outage.
	const n = 300
	srv := startServerProc(t, t.TempDir(), 0, "--database", pg.URL(),
		"--set", "agents.recovery_window=30s", "--set", "agents.stale_after=60s")
	c := procClient(t, srv)
	r := newRepo(t, map[string]string{workflow("long"): `on: push
jobs:
  long:
    steps:
      - run: |
          ` + stampStep(pids, marks, n) + `
`})
	addLocalSource(t, c, "app", r.dir)
	secret, _ := agentToken(t, c, api.CreateTokenRequest{})
	agent := startAgent(t, srv.URL, secret, agentOpts{id: "steady"})
	run := triggerOne(t, c, "app")
	waittest.UntilState(t, time.Minute, "the job to tick", func() (bool, string) {
		return countLines(marks) >= 10, fmt.Sprint(countLines(marks))
	})
	if code := readyCode(srv.URL); code != http.StatusOK {
		t.Fatalf("/ready answered %d before the outage", code)
	}

	pg.stop(t)
	down := time.Now()
	before := countLines(marks)
	waittest.UntilState(t, 30*time.Second, "/ready to say the database is down", func() (bool, string) {
		code := readyCode(srv.URL)
		return code == http.StatusServiceUnavailable, fmt.Sprint(code)
	})
	waittest.UntilState(t, time.Minute, "the step to go on through the outage", func() (bool, string) {
		return countLines(marks) >= before+30, fmt.Sprint(countLines(marks) - before)
	})
	if code := readyCode(srv.URL); code != http.StatusServiceUnavailable {
		t.Fatalf("/ready answered %d while the database was down", code)
	}
	pg.start(t)
	t.Logf("PostgreSQL was down for %s", time.Since(down).Round(time.Millisecond))
	waittest.UntilState(t, 30*time.Second, "/ready to say ok again", func() (bool, string) {
		code := readyCode(srv.URL)
		return code == http.StatusOK, fmt.Sprint(code)
	})
	if countLines(marks) >= n {
		t.Fatal("the step ended before the database came back: the test proves nothing")
	}

	run = waitRun(t, c, run.ID, 3*time.Minute)
	j := mustJob(t, run, "long")
	if run.Status != kiln.RunSuccess || j.AgentID != "steady" || j.Attempt != 1 || j.Dispatches != 1 {
		t.Fatalf("the job did not finish where it ran: %s", describeRun(run))
	}
	noOverlap(t, marks, 1)
	lines := logLines(t, c, run.ID, "long", intp(0))
	got := texts(lines)
	if len(got) != n {
		t.Fatalf("the step's log holds %d lines, want %d:\n%s", len(got), n, strings.Join(got, "\n"))
	}
	for i, l := range got {
		if want := fmt.Sprintf("tick %d", i+1); l != want {
			t.Fatalf("line %d is %q, want %q", i+1, l, want)
		}
	}
	if agent.exited() {
		t.Fatal("the agent process exited")
	}
	if srv.exited() {
		t.Fatal("the server exited")
	}
	// What the server said about the outage, for whoever reads -v.
	var said []string
	for _, l := range strings.Split(srv.log.String(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			said = append(said, l)
		}
	}
	t.Logf("the server logged %d warnings and errors:\n%s", len(said), tail(strings.Join(said, "\n"), 15))
}
