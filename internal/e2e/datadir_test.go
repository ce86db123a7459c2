package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/api"
)

// A second server on the data directory a running server holds exits at
// once with an error that names the holder's pid, and leaves the first
// one serving; once the first has stopped, a server starts there again.
// The lock is a flock, so a holder killed with SIGKILL leaves none behind.
//
// B128.
func TestSecondServerOnTheSameDataDirectoryIsRefusedNamingTheHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServerProc(t, dir, 0)
	res := kilnCmd(t, t.TempDir(), nil, "server", "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", dir, "--local-agents", "0")
	want := fmt.Sprintf("another kiln server (pid %d) is using the data directory", first.pid())
	if res.code == 0 || !strings.Contains(res.stderr, want) {
		t.Fatalf("the second server: %s\nwant %q", res, want)
	}
	if _, err := procClient(t, first).ListRuns(bg, api.RunFilter{}); err != nil {
		t.Fatalf("the first server stopped answering: %v", err)
	}
	first.kill()
	first.restart(t)
	if _, err := procClient(t, first).ListRuns(bg, api.RunFilter{}); err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
}

// A first start that cannot listen (the port is taken) fails before it
// creates anything: no database, no admin token printed; the next start,
// on a free port, is the first start and prints the token.
//
// B129.
func TestFirstStartOnABusyPortPrintsNoTokenAndCreatesNothing(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "data")
	res := kilnCmd(t, t.TempDir(), nil, "server", "--listen", busy.Addr().String(), "--data-dir", dir, "--local-agents", "0")
	if res.code == 0 || !strings.Contains(res.stderr, "listen on") {
		t.Fatalf("the start on a busy port: %s", res)
	}
	if strings.Contains(res.stdout, "kadm_") || strings.Contains(res.stderr, "kadm_") {
		t.Fatalf("a start that failed printed an admin token: %s", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "kiln.db")); !os.IsNotExist(err) {
		t.Fatalf("a start that failed created the database: %v", err)
	}
	srv := startServerProc(t, dir, 0)
	if srv.adminToken(t) == "" {
		t.Fatal("the next start printed no admin token")
	}
}
