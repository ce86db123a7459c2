package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// Benchmarks of the fleet against the targets in PRODUCT.md:
//
//	go test -bench . -run '^$' ./internal/fleet/
//
// Agents are in-process scripted protocol clients over loopback (the idle
// benchmark runs them in a child process so that only the server is
// measured).

// benchHarness starts a fleet for a benchmark whose engine counts finished
// jobs.
func benchHarness(b *testing.B, backend storetest.Backend, cfg Config) (*harness, *counter) {
	c := &counter{changed: make(chan struct{}, 1)}
	h := start(b, backend, options{cfg: cfg, onApply: func(eff store.Effects) {
		if len(eff.Finished) > 0 {
			c.n.Add(int64(len(eff.Finished)))
			select {
			case c.changed <- struct{}{}:
			default:
			}
		}
	}})
	return h, c
}

// counter counts finished jobs.
type counter struct {
	n       atomic.Int64
	changed chan struct{}
}

// wait waits until at least want jobs finished.
func (c *counter) wait(b *testing.B, want int64) {
	for c.n.Load() < want {
		select {
		case <-c.changed:
		case <-time.After(30 * time.Second):
			b.Fatalf("%d jobs finished, want %d", c.n.Load(), want)
		}
	}
}

// createJobs creates n jobs in runs of 10 without waking the fleet, and
// returns their refs.
func createJobs(b *testing.B, h *harness, n int) []store.JobRef {
	var refs []store.JobRef
	for done := 0; done < n; {
		nr := store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main", SHA: "abc", Event: json.RawMessage(`{}`)}
		for i := 0; i < 10 && done < n; i++ {
			nr.Jobs = append(nr.Jobs, store.NewJob{Name: "j" + strconv.Itoa(i), Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")},
				Spec: specJSON("noop"), Steps: []string{"build"}})
			done++
		}
		cr, err := h.db.Runs().Create(bg, nr)
		if err != nil {
			b.Fatal(err)
		}
		refs = append(refs, cr.Queued...)
	}
	return refs
}

// benchAgent is a scripted agent that runs every dispatched job as a no-op:
// job.ack, running, success.
type benchAgent struct {
	ws  *websocket.Conn
	seq uint64
	got chan time.Time // when each dispatch arrived, if set
}

func connectBench(b *testing.B, h *harness, secret, id string, got chan time.Time) *benchAgent {
	ws, _, err := websocket.Dial(bg, h.url, nil)
	if err != nil {
		b.Fatal(err)
	}
	a := &benchAgent{ws: ws, got: got}
	for _, m := range []proto.Message{&proto.Auth{Token: secret, ProtocolVersion: proto.Version},
		&proto.Register{AgentID: id, AgentSecret: testSecret(id), MaxJobs: 1, OS: "linux", Arch: "amd64"}} {
		f, _ := proto.Encode(0, m)
		if err := ws.Write(bg, websocket.MessageText, f); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ws.Read(bg); err != nil {
			b.Fatal(err)
		}
	}
	go a.loop()
	b.Cleanup(func() { ws.CloseNow() })
	return a
}

func (a *benchAgent) loop() {
	for {
		_, f, err := a.ws.Read(bg)
		if err != nil {
			if websocket.CloseStatus(err) == -1 && !strings.Contains(err.Error(), "closed") {
				fmt.Fprintln(os.Stderr, "bench agent:", err)
			}
			return
		}
		if !strings.Contains(string(f[:min(len(f), 40)]), `"job.dispatch"`) {
			continue
		}
		if a.got != nil {
			a.got <- time.Now()
		}
		_, m, err := proto.Decode(f)
		if err != nil {
			return
		}
		d := m.(*proto.Dispatch)
		now := time.Now()
		for _, m := range []proto.Message{
			&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch},
			&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: now},
			&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobSuccess, Time: now},
		} {
			var seq uint64
			if proto.Durable(m.Type()) {
				a.seq++
				seq = a.seq
			}
			out, _ := proto.Encode(seq, m)
			if err := a.ws.Write(bg, websocket.MessageText, out); err != nil {
				return
			}
		}
	}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(float64(len(s))*p), len(s)-1)]
}

// BenchmarkDispatchLatency measures one job entering the queue to its
// job.dispatch arriving at the one idle agent: "wake" from the engine's
// Wake call (the fleet's part), "create" from the run's creation (the part
// of webhook → agent that follows the webhook's own processing).
// Proves B81 (docs/behaviours.md).
func BenchmarkDispatchLatency(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend.Name, func(b *testing.B) {
			h, finished := benchHarness(b, backend, Config{})
			_, secret := h.token(store.AgentTokenSpec{})
			got := make(chan time.Time, 1)
			connectBench(b, h, secret, "idle-1", got)
			var wake, create []time.Duration
			for b.Loop() {
				t0 := time.Now()
				cr, err := h.db.Runs().Create(bg, store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "r", SHA: "s",
					Event: json.RawMessage(`{}`), Jobs: []store.NewJob{{Name: "j", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux")},
						Spec: specJSON("noop"), Steps: []string{"build"}}}})
				if err != nil {
					b.Fatal(err)
				}
				want := finished.n.Load() + 1
				t1 := time.Now()
				h.eng.Apply(cr.Effects)
				at := <-got
				wake, create = append(wake, at.Sub(t1)), append(create, at.Sub(t0))
				finished.wait(b, want) // the agent is idle again
			}
			b.ReportMetric(float64(percentile(wake, 0.5).Microseconds())/1000, "wake-p50-ms")
			b.ReportMetric(float64(percentile(wake, 0.99).Microseconds())/1000, "wake-p99-ms")
			b.ReportMetric(float64(percentile(create, 0.5).Microseconds())/1000, "create-p50-ms")
			b.ReportMetric(float64(percentile(create, 0.99).Microseconds())/1000, "create-p99-ms")
		})
	}
}

// BenchmarkDispatchThroughput measures no-op jobs (claim → dispatch → ack →
// running → success) through 10 and 100 agents; each iteration is a batch
// of 1,000 queued jobs woken at once. "nobatch" commits every store
// operation alone, for comparison with group commit.
// Proves B82 (docs/behaviours.md).
func BenchmarkDispatchThroughput(b *testing.B) {
	const batch = 1000
	for _, backend := range storetest.Backends {
		for _, agents := range []int{10, 100} {
			for _, maxBatch := range []int{DefaultMaxBatch, 1} {
				name := fmt.Sprintf("%s/agents=%d", backend.Name, agents)
				if maxBatch == 1 {
					if agents != 100 {
						continue
					}
					name += "/nobatch"
				}
				b.Run(name, func(b *testing.B) {
					h, finished := benchHarness(b, backend, Config{MaxBatch: maxBatch})
					_, secret := h.token(store.AgentTokenSpec{})
					for i := 0; i < agents; i++ {
						connectBench(b, h, secret, fmt.Sprintf("agent-%03d", i), nil)
					}
					jobs := 0
					var cpu time.Duration
					var allocs uint64
					var ms runtime.MemStats
					for b.Loop() {
						b.StopTimer()
						want := finished.n.Load() + batch
						refs := createJobs(b, h, batch)
						b.StartTimer()
						c0 := cpuTime()
						runtime.ReadMemStats(&ms)
						m0 := ms.Mallocs
						h.f.Wake(refs)
						finished.wait(b, want)
						cpu += cpuTime() - c0
						runtime.ReadMemStats(&ms)
						allocs += ms.Mallocs - m0
						jobs += batch
					}
					// Heap allocations per job in this process: the
					// fleet's and the store client's, and the scripted
					// agents' (a few per frame), which the server does not
					// pay.
					b.ReportMetric(float64(allocs)/float64(jobs), "allocs/job")
					b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
					// CPU of this process (fleet, store client, the scripted
					// agents; not PostgreSQL's) per job: unlike jobs/s, it
					// does not depend on what else the machine runs.
					b.ReportMetric(float64(cpu.Microseconds())/float64(jobs), "cpu-µs/job")
					st := h.f.Stats()
					b.ReportMetric(float64(st.BatchedOps)/float64(max(st.Batches, 1)), "ops/commit")
				})
			}
		}
	}
}

// BenchmarkLogThroughput measures log lines from one agent to the stored
// log: frames of 500 lines of 100 bytes, sent without waiting for each ack.
// Proves B83 (docs/behaviours.md).
func BenchmarkLogThroughput(b *testing.B) {
	const perFrame = 500
	h, _ := benchHarness(b, storetest.Backends[0], Config{})
	_, secret := h.token(store.AgentTokenSpec{})
	c, _ := h.connect(secret, reg{id: "logger"})
	h.run(job("log", "linux"))
	d := expect[*proto.Dispatch](c)
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
	c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
	c.waitAck(c.seq)
	text := strings.Repeat("x", 100)
	seq := uint64(0)
	lines := 0
	m := &proto.Log{JobID: d.JobID, LeaseEpoch: 1, Step: 0, Lines: make([]proto.LogLine, perFrame)}
	for b.Loop() {
		for i := range m.Lines {
			seq++
			m.Lines[i] = proto.LogLine{Seq: seq, Stream: proto.StreamStdout, Text: text, TimeMS: 1}
		}
		c.send(m)
		lines += perFrame
		for c.acked.Load()+64 < c.seq { // a window of 64 frames in flight
			runtime.Gosched()
		}
	}
	c.waitAck(c.seq)
	b.ReportMetric(float64(lines)/b.Elapsed().Seconds(), "lines/s")
}

const idleClientsEnv = "KILN_FLEET_IDLE_CLIENTS"

// idleClientsChild connects idle registered agents to the fleet named in
// the environment, says "ready", and holds them until stdin closes.
func idleClientsChild() int {
	var c struct {
		URL, Token string
		N          int
	}
	if err := json.Unmarshal([]byte(os.Getenv(idleClientsEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	conns := make([]*websocket.Conn, 0, c.N)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Int32
	for i := 0; i < c.N; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ws, _, err := websocket.Dial(bg, c.URL, nil)
			if err != nil {
				failed.Add(1)
				return
			}
			for _, m := range []proto.Message{&proto.Auth{Token: c.Token, ProtocolVersion: proto.Version},
				&proto.Register{AgentID: fmt.Sprintf("idle-%05d", i), AgentSecret: testSecret(fmt.Sprintf("idle-%05d", i)), MaxJobs: 1, OS: "linux", Arch: "amd64"}} {
				f, _ := proto.Encode(0, m)
				if ws.Write(bg, websocket.MessageText, f) != nil {
					failed.Add(1)
					return
				}
				if _, _, err := ws.Read(bg); err != nil {
					failed.Add(1)
					return
				}
			}
			mu.Lock()
			conns = append(conns, ws)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		fmt.Fprintf(os.Stderr, "%d connections failed\n", failed.Load())
		return 1
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// BenchmarkIdleAgents measures the server's memory (heap and stacks in use)
// and goroutines per idle connected agent, with 2,000 registered agents
// held by a child process.
// Proves B85 (docs/behaviours.md).
func BenchmarkIdleAgents(b *testing.B) {
	const n = 2000
	h, _ := benchHarness(b, storetest.Backends[0], Config{})
	_, secret := h.token(store.AgentTokenSpec{})
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()

		conf, _ := json.Marshal(map[string]any{"URL": h.url, "Token": secret, "N": n})
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), idleClientsEnv+"="+string(conf))
		child.Stderr = os.Stderr
		stdin, _ := child.StdinPipe()
		stdout, _ := child.StdoutPipe()
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			b.Fatalf("the child said %q", line)
		}
		waittest.Until(b, waittest.Timeout, "every agent is registered", func() bool {
			_, agents := h.f.reg.counts()
			return agents == n
		})
		// Each GC halves the stacks of goroutines using under a quarter of
		// theirs: the handshake's deep calls are long over.
		for range 4 {
			runtime.GC()
		}
		runtime.ReadMemStats(&after)
		g1 := runtime.NumGoroutine()
		if p := os.Getenv("KILN_FLEET_HEAP_PROFILE"); p != "" {
			hf, _ := os.Create(p)
			_ = pprof.WriteHeapProfile(hf)
			hf.Close()
		}
		heap := float64(after.HeapInuse) - float64(before.HeapInuse)
		stack := float64(after.StackInuse) - float64(before.StackInuse)
		b.ReportMetric((heap+stack)/n/1024, "KiB/agent")
		b.ReportMetric(heap/n/1024, "heap-KiB/agent")
		b.ReportMetric(stack/n/1024, "stack-KiB/agent")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/agent")

		stdin.Close()
		_ = child.Wait()
		waittest.Until(b, waittest.Timeout, "every agent is gone", func() bool {
			conns, _ := h.f.reg.counts()
			return conns == 0
		})
	}
}
