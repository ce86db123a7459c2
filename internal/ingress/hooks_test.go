package ingress

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// hookLog records what the processor's hooks were told.
type hookLog struct {
	mu       sync.Mutex
	recorded []string // source/event/dup
	refused  []kiln.Code
	finished chan kiln.DeliveryStatus
}

func (h *hookLog) install(c *Config) {
	h.finished = make(chan kiln.DeliveryStatus, 16)
	c.Recorded = func(source, event string, dup bool) {
		h.mu.Lock()
		defer h.mu.Unlock()
		s := source + "/" + event
		if dup {
			s += "/dup"
		}
		h.recorded = append(h.recorded, s)
	}
	c.Refused = func(code kiln.Code) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.refused = append(h.refused, code)
	}
	c.Finished = func(s kiln.DeliveryStatus) { h.finished <- s }
}

func (h *hookLog) next(t *testing.T) kiln.DeliveryStatus {
	t.Helper()
	select {
	case s := <-h.finished:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery finished")
		return ""
	}
}

func TestHooksSeeRecordedFinishedAndRefusedDeliveries(t *testing.T) {
	h := &hookLog{}
	f := newFixture(t, storetest.SQLiteURL, h.install)
	body := payload(t, "push.with-new-branch.payload.json")
	if code, out := f.send(t, "push", "h-1", body, ""); code != http.StatusAccepted {
		t.Fatalf("push: %d %v", code, out)
	}
	if s := h.next(t); s != kiln.DeliveryProcessed {
		t.Fatalf("push finished %s", s)
	}
	f.send(t, "push", "h-1", body, "")           // a redelivery
	f.send(t, "push", "h-2", body, "sha256=bad") // a forged one
	f.send(t, "ping", "h-3", payload(t, "ping.payload.json"), "")
	if s := h.next(t); s != kiln.DeliveryPing {
		t.Fatalf("ping finished %s", s)
	}
	req, _ := http.NewRequest("POST", f.srv.URL+"/webhook/github/nosuch", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := f.proc.Dispatch(context.Background(), DispatchRequest{Source: "gh", Workflow: "ci.yml", Repository: repo}); err != nil {
		t.Fatal(err)
	}
	h.next(t)

	h.mu.Lock()
	defer h.mu.Unlock()
	want := []string{"gh/push", "gh/push/dup", "gh/ping", "gh/dispatch"}
	if strings.Join(h.recorded, " ") != strings.Join(want, " ") {
		t.Fatalf("recorded %v, want %v", h.recorded, want)
	}
	if len(h.refused) != 2 || h.refused[0] != kiln.CodeUnauthorized || h.refused[1] != kiln.CodeNotFound {
		t.Fatalf("refused %v, want [unauthorized not_found]", h.refused)
	}
	select {
	case s := <-h.finished:
		t.Fatalf("a delivery finished twice, or the duplicate was reported as finished: %s", s)
	default:
	}
}
