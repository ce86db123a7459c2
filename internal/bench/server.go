package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/store"
)

// serverProc is a `kiln server` child process with its own data directory
// (and scratch database on PostgreSQL).
type serverProc struct {
	cmd     *exec.Cmd
	url     string
	client  *api.Client
	dir     string
	logPath string
	ready   time.Duration // exec → /ready answering 200
	started time.Time
	drop    func(context.Context) error
	exited  chan struct{}
}

// serverOptions vary a server between scenarios.
type serverOptions struct {
	localAgents int
	sets        []string // extra --set KEY=VALUE
}

// benchSets are the settings every bench server runs with: jobs no bench
// agent can take (the unmatchable backlog) must stay queued, and the
// server logs only what goes wrong.
var benchSets = []string{"queue.unroutable_grace=1h", "queue.expiry=0s", "log.level=warn"}

// startServer starts a server and waits until /ready answers.
func (b *bench) startServer(ctx context.Context, o serverOptions) (s *serverProc, err error) {
	dir, err := os.MkdirTemp("", "kiln-bench-")
	if err != nil {
		return nil, err
	}
	s = &serverProc{dir: dir, logPath: filepath.Join(dir, "server.log"), exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	args := []string{"server", "--data-dir", filepath.Join(dir, "data"), "--local-agents", strconv.Itoa(o.localAgents)}
	if b.cfg.Database != "" {
		u, drop, err := store.ScratchPostgres(ctx, b.cfg.Database, "kiln_bench")
		if err != nil {
			return s, err
		}
		s.drop = drop
		args = append(args, "--database", u)
	}
	addr, err := freeAddr()
	if err != nil {
		return s, err
	}
	args = append(args, "--listen", addr)
	for _, kv := range append(append([]string(nil), benchSets...), o.sets...) {
		args = append(args, "--set", kv)
	}
	admin := "kadm_bench" + randomHex(16)
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return s, err
	}
	defer logFile.Close()
	s.cmd = exec.Command(b.cfg.Binary, args...)
	s.cmd.Env = append(append(os.Environ(), "KILN_ADMIN_TOKEN="+admin), b.cfg.Env...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.url = "http://" + addr
	if s.client, err = api.NewClient(s.url, admin); err != nil {
		return s, err
	}
	s.started = time.Now()
	if err := s.cmd.Start(); err != nil {
		return s, fmt.Errorf("start %s: %w", b.cfg.Binary, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx); err != nil {
		return s, err
	}
	s.ready = time.Since(s.started)
	return s, nil
}

// waitReady polls /ready every millisecond: the start-up time is measured
// to that resolution.
func (s *serverProc) waitReady(ctx context.Context) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(s.url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited during start-up:\n%s", s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer /ready within 30s:\n%s", s.logTail())
		}
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 15 s) and removes
// what it kept.
func (s *serverProc) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if s.drop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = s.drop(ctx)
		cancel()
	}
	_ = os.RemoveAll(s.dir)
}

// logTail is the end of the server's output, for error messages.
func (s *serverProc) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// wsURL is where agents connect.
func (s *serverProc) wsURL() string { return "ws" + strings.TrimPrefix(s.url, "http") + "/ws" }

// metric reads the sum of every sample of a metric family from /metrics.
func (s *serverProc) metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || len(line) == len(name) || (line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum, found = sum+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("the server's /metrics has no %s", name)
	}
	return sum, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// histogram reads a histogram's cumulative bucket counts (upper bound →
// count) from /metrics.
func (s *serverProc) histogram(ctx context.Context, name string) (map[float64]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	prefix := name + `_bucket{le="`
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metric %s: bad bucket %q", name, sc.Text())
		}
		out[bound] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the server's /metrics has no histogram %s", name)
	}
	return out, sc.Err()
}

// histogramQuantile estimates the q-quantile of what was observed between
// two readings of a histogram, interpolating linearly inside the bucket
// as Prometheus's histogram_quantile does.
func histogramQuantile(before, after map[float64]float64, q float64) time.Duration {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		n := after[b] - before[b]
		if n >= rank {
			if math.IsInf(b, 1) {
				return time.Duration(lower * float64(time.Second)) // past the last bound: report it
			}
			frac := (rank - below) / max(n-below, 1e-9)
			return time.Duration((lower + (b-lower)*frac) * float64(time.Second))
		}
		lower, below = b, n
	}
	return 0
}
