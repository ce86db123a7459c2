//go:build linux

package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/waittest"
)

// isolatedExecutor is an executor whose steps are isolated, with a secret
// directory (holding the work root, as an agent's state directory does)
// and a secret file hidden from them. It skips, saying why, where this
// host cannot isolate steps.
func isolatedExecutor(t *testing.T) (x *Executor, secretDir, secretFile string) {
	t.Helper()
	base := t.TempDir()
	secretDir = filepath.Join(base, "state")
	secretFile = filepath.Join(base, "token")
	writeFile(t, filepath.Join(secretDir, "agent-id"), "kat_in_the_state_dir\n")
	writeFile(t, secretFile, "kat_in_a_file\n")
	var logged bytes.Buffer
	x, err := New(Config{
		WorkRoot:      filepath.Join(secretDir, "work"),
		GracePeriod:   500 * time.Millisecond,
		BatchInterval: 20 * time.Millisecond,
		BaseEnv:       testEnv(),
		Isolation:     Isolation{Mode: IsolationRequired, Hide: []string{secretDir, secretFile}},
		Logger:        slog.New(slog.NewTextHandler(&logged, nil)),
	})
	if err != nil {
		t.Skipf("SKIPPED: this host cannot isolate steps: %v", err)
	}
	if !strings.Contains(logged.String(), "steps run in their own PID, mount and user namespaces") {
		t.Fatalf("New did not say steps are isolated; it logged:\n%s", logged.String())
	}
	return x, secretDir, secretFile
}

// An isolated step sees only its own processes (the test process is
// neither visible nor signalable, nor is any process of the host), reads
// the hidden directory as empty and the hidden file as empty, cannot undo
// the covers even as root, finds no block device to read, and still works
// in its own job directory under the hidden one: $KILN_ENV and
// $KILN_OUTPUT carry values on.
func TestIsolatedStepCannotSeeTheHost(t *testing.T) {
	t.Parallel()
	x, secretDir, secretFile := isolatedExecutor(t)
	self := os.Getpid()
	res, rec := runJob(t, x, &Job{JobID: "iso", Steps: []Step{
		{Name: "attack", Run: `
set +e
echo "procs: $(ls /proc | grep -c '^[0-9]')"
if [ -e /proc/` + strconv.Itoa(self) + `/cmdline ] && grep -q executor /proc/` + strconv.Itoa(self) + `/cmdline; then echo "SEES the agent"; fi
if kill -0 ` + strconv.Itoa(self) + ` 2>/dev/null; then echo "SIGNALS the agent"; fi
p=kat
if grep -rqs "${p}_in_" ` + secretDir + ` ` + secretFile + `; then echo "READS a secret"; fi
for e in $(ls -A ` + secretDir + `); do [ "$e" = work ] || echo "LISTS $e"; done
umount ` + secretDir + ` 2>/dev/null && echo "UNMOUNTED the cover"
umount -l ` + secretFile + ` 2>/dev/null && echo "UNMOUNTED the file cover"
if grep -rqs "${p}_in_" ` + secretDir + ` ` + secretFile + `; then echo "READS a secret after umount"; fi
for d in $(find /dev -type b 2>/dev/null); do
  if [ -n "$(head -c 512 $d 2>/dev/null | tr -d '\0')" ]; then echo "READS block device $d"; fi
done
echo "uid $(id -u)"
echo "FOO=bar" >> "$KILN_ENV"
echo "v=1" >> "$KILN_OUTPUT"
echo finished
`},
		{Name: "next", Run: `test "$FOO" = bar && echo "env carried"`},
	}})
	wantStatuses(t, res, success, success)
	log := rec.text(0)
	t.Logf("the step saw:\n%s", log)
	for _, bad := range []string{"SEES", "SIGNALS", "READS", "LISTS", "UNMOUNTED"} {
		if strings.Contains(log, bad) {
			t.Errorf("the isolated step %s", log[strings.Index(log, bad):])
		}
	}
	if !strings.Contains(log, "finished") || !strings.Contains(rec.text(1), "env carried") || res.Outputs["v"] != "1" {
		t.Fatalf("the job did not run as usual: outputs %v, logs %q %q", res.Outputs, log, rec.text(1))
	}
	if !strings.Contains(log, "uid "+strconv.Itoa(os.Geteuid())) {
		t.Errorf("the step does not run as the agent's user: %q", log)
	}
	if n := procCount(log); n < 1 || n > 5 {
		t.Errorf("the step sees %d processes, want only its own few", n)
	}
}

func procCount(log string) int {
	for _, l := range strings.Split(log, "\n") {
		if s, ok := strings.CutPrefix(l, "procs: "); ok {
			n, _ := strconv.Atoi(s)
			return n
		}
	}
	return -1
}

// A root agent's isolated steps stay root for what root does to files —
// chown to any user, write root's files — so jobs that install packages
// keep working.
func TestIsolatedRootStepKeepsRootOverFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root")
	}
	x, _, _ := isolatedExecutor(t)
	dir := t.TempDir()
	res, rec := runJob(t, x, &Job{JobID: "root", Steps: []Step{{Run: `
touch ` + dir + `/f
chown 1234:5678 ` + dir + `/f
id -u
`}}})
	wantStatuses(t, res, success)
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1234 || st.Gid != 5678 {
		t.Fatalf("the file belongs to %d:%d, want 1234:5678", st.Uid, st.Gid)
	}
	if !strings.Contains(rec.text(0), "0\n") {
		t.Fatalf("id -u said %q", rec.text(0))
	}
}

// A working directory the step names in a hidden directory leads to the
// cover, not under it: the supervisor enters it again by name once the
// covers are in place.
func TestIsolatedWorkingDirectoryCannotReachUnderACover(t *testing.T) {
	t.Parallel()
	x, secretDir, _ := isolatedExecutor(t)
	res, rec := runJob(t, x, &Job{JobID: "wd", Steps: []Step{
		{Run: "ls -A; cat agent-id 2>&1 || true", WorkingDirectory: secretDir},
	}})
	wantStatuses(t, res, success)
	if log := rec.text(0); strings.Contains(log, "kat_") || strings.Contains(log, "agent-id\n") {
		t.Fatalf("the step read the hidden directory through its working directory: %q", log)
	}
}

// $KILN_OUTPUT, $KILN_ENV and $KILN_PATH are read only while they are
// still regular files: a FIFO in their place (which would block the read,
// and the agent's slot, forever) or a symlink to a file the step may not
// read fails the step with the reason, and the job ends.
func TestStepFilesMustStayRegularFiles(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, "version=kat_secret\n")
	for name, script := range map[string]string{
		"fifo output": `rm "$KILN_OUTPUT"; mkfifo "$KILN_OUTPUT"`,
		"fifo env":    `rm "$KILN_ENV"; mkfifo "$KILN_ENV"`,
		"fifo path":   `rm "$KILN_PATH"; mkfifo "$KILN_PATH"`,
		"symlink":     `ln -sf ` + secret + ` "$KILN_OUTPUT"`,
		"dir symlink": `m=$(dirname "$KILN_OUTPUT"); mv "$m" "$m.real"; ln -s ` + filepath.Dir(secret) + ` "$m"; cp ` + secret + ` ` + filepath.Dir(secret) + `/$(basename "$KILN_OUTPUT")`,
		"device":      `rm "$KILN_OUTPUT"; ln -s /dev/zero "$KILN_OUTPUT"`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			x := newExecutor(t)
			done := make(chan Result, 1)
			var rec *recorder
			go func() {
				res, r := runJob(t, x, &Job{JobID: "files", Steps: []Step{{Run: script}}})
				rec = r
				done <- res
			}()
			var res Result
			select {
			case res = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the job hangs on the step's file")
			}
			if strings.Contains(rec.allText(), "kat_secret") || res.Outputs["version"] != "" {
				t.Fatalf("the agent followed the step's link: outputs %v", res.Outputs)
			}
			if name == "dir symlink" {
				return // the agent reads the real, empty file: nothing to refuse
			}
			if res.Status != kiln.JobFailed || !strings.Contains(res.Error, "regular file") {
				t.Fatalf("job %s (%s), want a failure saying the file is not a regular file", res.Status, res.Error)
			}
		})
	}
}

// hashFiles() skips nothing silently and hangs on nothing: a FIFO among
// the matches fails the expression instead of blocking the job.
func TestHashFilesRefusesAFIFO(t *testing.T) {
	t.Parallel()
	x := newExecutor(t)
	done := make(chan Result, 1)
	go func() {
		res, _ := runJob(t, x, &Job{JobID: "hash", Steps: []Step{
			{Run: "mkfifo pipe.lock"},
			{Run: "echo ${{ hashFiles('*.lock') }}"},
		}})
		done <- res
	}()
	select {
	case res := <-done:
		if res.Status != kiln.JobFailed || !strings.Contains(res.Error, "not a regular file") {
			t.Fatalf("job %s (%s)", res.Status, res.Error)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hashFiles hangs on a FIFO")
	}
}

// The work root must be the agent user's own: one another user made (and
// so controls) is refused, and a wider mode is narrowed to 0700.
func TestWorkRootMustBelongToTheAgentUser(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	newExecutor(t, func(c *Config) { c.WorkRoot = dir })
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the work root's mode: %v %v, want 0700", fi.Mode(), err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{WorkRoot: link, BaseEnv: testEnv()}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a symlinked work root: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{WorkRoot: dir, BaseEnv: testEnv()}); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("a work root of another user: %v", err)
	}
}

// With a step user, the checkout and the steps run as that user, in a job
// directory it owns, with its HOME; the meta directory stays the agent's
// (the step uses the files made for it but cannot add any), and files only
// the agent's user may read stay out of reach — with and without
// namespaces.
func TestStepUserRunsStepsAsAnotherUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: a step user needs a root agent")
	}
	nobody := &User{Name: "nobody", UID: 65534, GID: 65534, Home: "/"}
	for _, mode := range []IsolationMode{IsolationOff, IsolationRequired} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			for d := base; d != "/"; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
					os.Chmod(d, fi.Mode().Perm()|0o011)
				}
			}
			private := filepath.Join(base, "private")
			writeFile(t, private, "kat_private\n")
			os.Chmod(private, 0o600)
			x, err := New(Config{
				WorkRoot: filepath.Join(base, "work"), BaseEnv: testEnv(), GracePeriod: 500 * time.Millisecond,
				Isolation: Isolation{Mode: mode, StepUser: nobody},
			})
			if err != nil {
				if mode == IsolationRequired {
					t.Skipf("SKIPPED: %v", err)
				}
				t.Fatal(err)
			}
			if fi, err := os.Stat(filepath.Join(base, "work")); err != nil || fi.Mode().Perm() != 0o711 {
				t.Fatalf("the work root with a step user: %v %v, want 0711", fi.Mode(), err)
			}
			res, rec := runJob(t, x, &Job{JobID: "u", Steps: []Step{{Run: `
set +e
echo "uid $(id -u) home $HOME"
cat ` + private + ` 2>/dev/null && echo "READ the agent's file"
touch "$(dirname "$KILN_OUTPUT")/planted" 2>/dev/null && echo "PLANTED in meta"
touch "$KILN_WORKSPACE/built" && echo "built"
echo "v=1" >> "$KILN_OUTPUT"
`}}})
			wantStatuses(t, res, success)
			log := rec.text(0)
			if !strings.Contains(log, "uid 65534 home /") || !strings.Contains(log, "built") || res.Outputs["v"] != "1" {
				t.Fatalf("outputs %v, log:\n%s", res.Outputs, log)
			}
			if strings.Contains(log, "READ") || strings.Contains(log, "PLANTED") {
				t.Fatalf("the step user reached the agent's files:\n%s", log)
			}
		})
	}
}

func TestHiddenPathsAreCleanAndMinimal(t *testing.T) {
	got, err := hiddenPaths([]string{"/srv/state/work", "/srv/state", "/srv/state/", "/srv/data/../data2", "", "/srv/statefile"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/srv/data2", "/srv/state", "/srv/statefile"}; !slices.Equal(got, want) {
		t.Fatalf("hidden %v, want %v", got, want)
	}
	if _, err := hiddenPaths([]string{"/"}); err == nil {
		t.Fatal("hiding / was accepted")
	}
}

// A step sees its own job's directory in the work root, not the other
// jobs' (which belong to the same user).
func TestIsolatedStepSeesOnlyItsOwnJobDirectory(t *testing.T) {
	t.Parallel()
	work := filepath.Join(t.TempDir(), "work")
	x, err := New(Config{WorkRoot: work, BaseEnv: testEnv(), Isolation: Isolation{Mode: IsolationRequired}})
	if err != nil {
		t.Skipf("SKIPPED: this host cannot isolate steps: %v", err)
	}
	first, _ := runJob(t, x, &Job{JobID: "first", KeepWorkspace: true, Steps: []Step{{Run: "echo secret > notes"}}})
	if first.Workspace == "" {
		t.Fatalf("the first job kept no workspace: %+v", first)
	}
	res, rec := runJob(t, x, &Job{JobID: "second", Steps: []Step{{Run: `ls -A ` + work + ` | sed 's/^/LS /'; cat ` + first.Workspace + `/notes 2>/dev/null || true`}}})
	wantStatuses(t, res, success)
	log := rec.text(0)
	if strings.Contains(log, "LS job-first") || strings.Contains(log, "secret\n") || !strings.Contains(log, "LS job-second") {
		t.Fatalf("the second job's step saw the work root as:\n%s", log)
	}
}

// An isolated step's processes die with the agent, as an unisolated
// step's do (TestAgentDeathKillsSteps), for a root agent and for an
// unprivileged one: the supervisor gets its parent-death signal through
// the namespaces, and being their pid 1, takes every process of the step
// with it.
func TestAgentDeathKillsIsolatedSteps(t *testing.T) {
	t.Parallel()
	users := map[string]*syscall.Credential{"as this user": nil}
	if os.Geteuid() == 0 {
		users["unprivileged"] = &syscall.Credential{Uid: 65534, Gid: 65534}
	} else {
		fmt.Fprintln(os.Stderr, "TestAgentDeathKillsIsolatedSteps: NOT RUN AS ROOT, so the root agent's case is SKIPPED")
	}
	// The stand-in agent is a copy of this test binary that every user
	// may run (the build directory is private).
	binDir := t.TempDir()
	for d := binDir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	bin := filepath.Join(binDir, "executor.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, cred := range users {
		n++
		marker := fmt.Sprintf("sleep 3137%d", n)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for d := dir; d != "/"; d = filepath.Dir(d) {
				if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
					os.Chmod(d, fi.Mode().Perm()|0o011)
				}
			}
			job := Job{JobID: "j", Steps: []Step{{Run: "sleep 31379 & (setsid " + marker + " &); echo ready > ready; " + marker}}}
			b, _ := json.Marshal(job)
			jobFile := filepath.Join(dir, "job.json")
			if err := os.WriteFile(jobFile, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if cred != nil {
				os.Chown(dir, int(cred.Uid), int(cred.Gid))
			}
			var out bytes.Buffer
			var cmd *exec.Cmd
			// Another test's fork may still hold the copy open for
			// writing for a moment (ETXTBSY).
			for tries := 0; ; tries++ {
				cmd = exec.Command(bin, "-test.run=^$")
				cmd.Env = append(testEnv(), agentHelperEnv+"="+jobFile, isolateHelperEnv+"=1")
				cmd.Stdout, cmd.Stderr = &out, &out
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
				err := cmd.Start()
				if err == nil {
					break
				}
				if !errors.Is(err, syscall.ETXTBSY) || tries > 50 {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			waittest.Until(t, 30*time.Second, "the step to run "+marker, func() bool {
				select {
				case <-exited:
					t.Fatalf("the stand-in agent exited: %s", out.String())
				default:
				}
				return len(procsWith(marker)) == 2
			})
			cmd.Process.Kill()
			<-exited
			waittest.Until(t, 10*time.Second, "the step's processes to die with the agent", func() bool { return len(procsWith(marker)) == 0 })
		})
	}
}

// procsWith lists the live processes whose command line holds marker.
func procsWith(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && alive(pid, marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}
