package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kilnci/kiln/internal/store"
)

// EnvPostgresURL names an existing PostgreSQL server to test against (a
// role allowed to CREATE DATABASE). Without it, tests start a private
// server from /usr/lib/postgresql/<N>/bin.
const EnvPostgresURL = "KILN_TEST_POSTGRES_URL"

const skipMessage = "!!! PostgreSQL tests SKIPPED: %v. Install PostgreSQL (Debian: apt-get install postgresql) " +
	"or set " + EnvPostgresURL + "=postgres://user@host:port/db (a role that may CREATE DATABASE)."

var (
	pgOnce  sync.Once
	pgAdmin string // URL of a database to run CREATE DATABASE on
	pgErr   error
	// pgMissing: no PostgreSQL to test against (skip); otherwise pgErr is
	// a failure of the harness or the migrations (fail).
	pgMissing bool
	pgServer  *server
	pgTmpl    string // a migrated template database
)

// PostgresURL creates a fresh, migrated PostgreSQL database for the test,
// drops it when the test ends, and returns its URL. It skips the test
// loudly when no PostgreSQL is available.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, pgTmplName)
}

// EmptyPostgresURL is PostgresURL without the migrations: a database with
// no tables at all.
func EmptyPostgresURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, func() string { return "template0" })
}

func pgTmplName() string { return pgTmpl }

func newDatabase(t testing.TB, template func() string) string {
	t.Helper()
	pgOnce.Do(setupPostgres)
	if pgErr != nil && pgMissing {
		fmt.Fprintf(os.Stderr, skipMessage+"\n", pgErr)
		t.Skipf(skipMessage, pgErr)
	}
	if pgErr != nil {
		t.Fatalf("PostgreSQL test setup failed: %v", pgErr)
	}
	name := "kiln_t_" + randomHex(6)
	if err := adminExec(fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template())); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if err := adminExec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return withDatabase(pgAdmin, name)
}

func setupPostgres() {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		pgAdmin = u
	} else {
		pgServer, pgErr = startServer()
		if pgErr != nil {
			return
		}
		pgAdmin = pgServer.url
	}
	// A migrated template makes each test's database a cheap copy.
	pgTmpl = "kiln_tmpl_" + randomHex(6)
	if pgErr = adminExec("CREATE DATABASE " + pgTmpl); pgErr != nil {
		return
	}
	db, err := store.Open(context.Background(), store.Config{URL: withDatabase(pgAdmin, pgTmpl), Releaser: QueueAsCreated})
	if err != nil {
		pgErr = fmt.Errorf("migrate the template database: %w", err)
		return
	}
	pgErr = db.Close()
}

func adminExec(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgAdmin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func withDatabase(base, name string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stopServer drops the template (on a shared server) or stops the private
// server.
func stopServer() {
	if pgErr == nil && pgTmpl != "" && pgServer == nil {
		_ = adminExec("DROP DATABASE IF EXISTS " + pgTmpl + " WITH (FORCE)")
	}
	if pgServer != nil {
		pgServer.stop()
	}
}

// server is a private PostgreSQL server for one test binary: initdb into a
// temporary directory, listening on 127.0.0.1 only, with the durable
// defaults (fsync on, synchronous_commit on).
type server struct {
	dir  string
	url  string
	cmd  *exec.Cmd
	done chan error
}

func findBinaries() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", errors.New("no " + EnvPostgresURL + " and no /usr/lib/postgresql/*/bin/initdb")
	}
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	sort.Slice(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	return filepath.Dir(matches[0]), nil
}

// credential runs PostgreSQL as the postgres user when the tests run as
// root: initdb refuses to run as root.
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, -1, -1, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("running as root and no postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

func startServer() (*server, error) {
	bin, err := findBinaries()
	if err != nil {
		pgMissing = true
		return nil, err
	}
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	removeStaleServers()
	dir, err := os.MkdirTemp("", "kiln-pg-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir}
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			s.remove()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "kiln", "--auth=trust", "-E", "UTF8",
		"--no-instructions", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		s.remove()
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		s.remove()
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		s.remove()
		return nil, err
	}
	defer logFile.Close()
	if cred != nil {
		_ = logFile.Chown(uid, gid)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=400")
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Pdeathsig stops the server if the test binary dies without Main's
	// cleanup (a panic, a timeout kill).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := s.cmd.Start(); err != nil {
		s.remove()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	s.url = fmt.Sprintf("postgres://kiln@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.waitReady(30 * time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.url)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return nil
		}
		select {
		case werr := <-s.done:
			s.done <- werr
			log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start-up (%v): %s", werr, tail(string(log), 2000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within %s: %v", timeout, err)
		}
	}
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.remove()
}

func (s *server) remove() { _ = os.RemoveAll(s.dir) }

// removeStaleServers deletes the directories of private servers whose test
// binary died without cleaning up (killed by a timeout): the server itself
// stopped with its parent (Pdeathsig), its data directory did not. A
// directory whose server still runs, or that is younger than ten minutes
// and has no server yet (another binary is starting one), is kept.
func removeStaleServers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "kiln-pg-*"))
	for _, d := range dirs {
		pidFile, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid"))
		if err != nil {
			if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
				_ = os.RemoveAll(d)
			}
			continue
		}
		first, _, _ := strings.Cut(string(pidFile), "\n")
		pid, err := strconv.Atoi(strings.TrimSpace(first))
		if err == nil && pid > 0 && syscall.Kill(pid, 0) != nil {
			_ = os.RemoveAll(d)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
