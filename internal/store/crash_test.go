package store_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// crashChildEnv makes the test binary a writer child: it opens the store at
// the URL the variable holds and commits forever, printing every
// acknowledged commit to stdout only after Commit returned.
const crashChildEnv = "KILN_STORE_CRASH_CHILD"

func crashChild() int {
	db, err := store.Open(ctx, store.Config{URL: os.Getenv(crashChildEnv), Releaser: storetest.QueueAsCreated})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		cr, err := db.Runs().Create(ctx, newRun(job("a")))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		fmt.Fprintf(out, "run %s\n", cr.ID)
		out.Flush()
		cs, err := db.Queue().Claim(ctx, "agent", linux, 1)
		if err != nil || len(cs) != 1 {
			fmt.Fprintln(os.Stderr, "child: claim", err, cs)
			return 1
		}
		if _, err := db.Jobs().Complete(ctx, store.Completion{Lease: lease(cs[0]), Status: kiln.JobSuccess}); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		fmt.Fprintf(out, "done %s\n", cs[0].JobID)
		out.Flush()
	}
}

// TestCrashLosesNoAcknowledgedCommit SIGKILLs a writer process mid-run and
// checks that every transaction it had acknowledged survived: on SQLite in
// WAL mode with synchronous=NORMAL a committed transaction is in the WAL
// file before Commit returns, so only a power cut (not a process crash) can
// lose it.
// Proves B72 (docs/behaviours.md).
func TestCrashLosesNoAcknowledgedCommit(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			url := b.URL(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+url)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 1024)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			// On SQLite the kill comes once the log has started over at
			// least once: the commits it holds then overwrite frames the
			// checkpointer (checkpoint.go) copied into the database file,
			// and its rounds go on beside the writer until the child dies.
			var acked []string
			var started uint32 // the log's generation at the first commit
			restarted := func() bool { return b.Name != "sqlite" || store.WALGeneration(url) > started }
			deadline := time.After(60 * time.Second)
			for len(acked) < 300 || !restarted() {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("child exited early: %v", stderr.String())
					}
					if len(acked) == 0 {
						started = store.WALGeneration(url)
					}
					acked = append(acked, l)
				case <-deadline:
					t.Fatalf("child acknowledged %d commits in 60s (the log started over %d times): %s",
						len(acked), store.WALGeneration(url)-started, stderr.String())
				}
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for l := range lines { // what it printed before dying was acknowledged too
				acked = append(acked, l)
			}
			err = cmd.Wait()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child did not die of SIGKILL: %v %s", err, stderr.String())
			}
			db, err := store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if b.Name == "sqlite" {
				var res string
				if err := db.SQL().QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
					t.Fatalf("integrity check: %q %v", res, err)
				}
			}
			runs, done := 0, 0
			for _, l := range acked {
				kind, id, _ := strings.Cut(l, " ")
				switch kind {
				case "run":
					runs++
					if _, err := db.Runs().Get(ctx, id); err != nil {
						t.Fatalf("acknowledged run %s lost: %v", id, err)
					}
				case "done":
					done++
					if j := mustJob(t, db, id); j.Status != kiln.JobSuccess {
						t.Fatalf("acknowledged completion of %s lost: job is %s", id, j.Status)
					}
				default:
					t.Fatalf("child printed %q", l)
				}
			}
			t.Logf("%d acknowledged runs and %d completions survived the SIGKILL", runs, done)
		})
	}
}
