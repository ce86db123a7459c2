package storagetest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/waittest"
)

// EnvVersitygw names the versitygw binary the S3 tests run against;
// scripts/test builds it (at a pinned version) and sets it. Without it,
// versitygw is looked up on PATH.
const EnvVersitygw = "KILN_TEST_VERSITYGW"

const versitygwSkip = "!!! S3 tests SKIPPED: %v. Run scripts/test (it builds versitygw once into the tools directory) " +
	"or set " + EnvVersitygw + " to a versitygw binary."

// S3Server is a versitygw server started for one test: a real S3 API on
// loopback over a POSIX directory, stopped when the test ends.
type S3Server struct {
	Endpoint             string // http://127.0.0.1:port
	Region               string
	AccessKey, SecretKey string
	dir                  string
}

// StartVersitygw starts a versitygw server for t on a free loopback port,
// or skips t loudly when there is no versitygw binary.
func StartVersitygw(t testing.TB) *S3Server {
	t.Helper()
	bin := os.Getenv(EnvVersitygw)
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("versitygw"); err != nil {
			fmt.Fprintf(os.Stderr, versitygwSkip+"\n", "no versitygw binary")
			t.Skipf(versitygwSkip, "no versitygw binary")
		}
	}
	if _, err := os.Stat(bin); err != nil {
		fmt.Fprintf(os.Stderr, versitygwSkip+"\n", err)
		t.Skipf(versitygwSkip, err)
	}
	s := &S3Server{Region: "us-east-1", AccessKey: "kilntest", SecretKey: randomHex(16), dir: t.TempDir()}
	var lastErr error
	for range 3 { // another process may take the free port first
		if lastErr = s.start(t, bin); lastErr == nil {
			return s
		}
	}
	t.Fatalf("versitygw: %v", lastErr)
	return nil
}

func (s *S3Server) start(t testing.TB, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
		"--health", "/health", "--keep-alive", "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	// The server dies with the test binary, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.Endpoint = "http://" + addr
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(waittest.Timeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited before it was ready: %v: %s", err, out.String())
		default:
		}
		if resp, err := client.Get(s.Endpoint + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("not ready after %s: %s", waittest.Timeout, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	return nil
}

// NewBucket creates an empty bucket (a directory of the POSIX backend,
// as versitygw keeps them) and returns its name.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := "kiln-" + randomHex(6)
	if err := os.Mkdir(filepath.Join(s.dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	return name
}

// Dir is the directory versitygw serves; bucket b is Dir()/b.
func (s *S3Server) Dir() string { return s.dir }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
