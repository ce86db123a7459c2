package ingress

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// message polls until the delivery's message contains want, and returns
// the delivery.
func (f *fixture) message(t *testing.T, id int64, want string) store.Delivery {
	t.Helper()
	var d store.Delivery
	waittest.UntilState(t, waittest.Timeout, "the delivery to say "+want, func() (bool, string) {
		var err error
		d, err = f.db.Ingress().Get(context.Background(), id)
		return err == nil && strings.Contains(d.Message, want), d.Message
	})
	return d
}

func retrying(c *Config) {
	c.Owner, c.MaxAttempts, c.RetryBase, c.RetryMax = "srv", 3, time.Second, 2*time.Second
}

// B273: while the forge is down, each failed attempt's reason is on the
// delivery, which stays received and is retried after a growing wait (not
// after the claim lease); once the forge answers it is processed, and a
// delivery whose every attempt failed ends failed with the last reason.
func TestDeliveryRetriesWithItsReasonWhileTheForgeIsDown(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newFixture(t, b.URL, retrying)
			f.gh.SetDown(true)
			body := payload(t, "push.with-new-branch.payload.json")
			send := func(id string, body []byte) int64 {
				code, out := f.send(t, "push", id, body, "")
				if code != 202 {
					t.Fatalf("webhook: %d %v", code, out)
				}
				return deliveryID(t, out)
			}
			id := send("down-1", body)
			d := f.message(t, id, "attempt 1 of 3 failed: ")
			if d.Status != kiln.DeliveryReceived || !strings.Contains(d.Message, "503") || !strings.HasSuffix(d.Message, "retrying in 1s") {
				t.Fatalf("after the first attempt: %s %q", d.Status, d.Message)
			}
			f.clock.Advance(time.Second)
			if d := f.message(t, id, "attempt 2 of 3 failed: "); d.Attempts != 2 || !strings.HasSuffix(d.Message, "retrying in 2s") {
				t.Fatalf("after the second attempt: %d attempts, %q", d.Attempts, d.Message)
			}
			f.clock.Advance(2 * time.Second)
			if d := f.finished(t, id); d.Status != kiln.DeliveryFailed || !strings.HasPrefix(d.Message, "gave up after 3 attempts over ") ||
				!strings.Contains(d.Message, "503") {
				t.Fatalf("given up: %s %q", d.Status, d.Message)
			}

			// Another push (a different body: the same one would be a
			// replay) fails once, then the forge is back.
			id = send("down-2", append(body, ' '))
			f.message(t, id, "attempt 1 of 3 failed")
			f.gh.SetDown(false)
			f.clock.Advance(time.Second)
			if d := f.finished(t, id); d.Status != kiln.DeliveryProcessed || len(d.RunIDs) != 1 || d.Attempts != 2 {
				t.Fatalf("once the forge is back: %s %q, %d runs, %d attempts", d.Status, d.Message, len(d.RunIDs), d.Attempts)
			}
		})
	}
}

// B273: a delivery a server had claimed when it stopped is taken up at
// once by that server's next start (the same instance), not when the
// claim lease ends; another instance's claim is left to lapse.
func TestRestartedServerTakesUpItsDeliveriesAtOnce(t *testing.T) {
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			f := newFixture(t, b.URL, func(c *Config) { c.Owner = "first-process" })
			ctx := context.Background()
			st, _, _ := f.proc.sources.ByName(ctx, "gh")
			record := func(id, owner string) int64 {
				n, _, err := f.db.Ingress().Record(ctx, store.NewDelivery{
					Source: st.ID, DeliveryID: id, Event: "push", Body: payload(t, "push.with-new-branch.payload.json"),
					Headers: map[string]string{headerKind: "github"}, Owner: owner, ClaimFor: time.Hour,
				})
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			mine, other := record("before-restart", "srv/previous-process"), record("other-server", "other/process")
			// The same server starts again: a second processor on the database.
			cfg := Config{PollInterval: 20 * time.Millisecond}
			retrying(&cfg)
			restarted := New(f.db, f.eng, NewSources(f.db, forge.Options{}), cfg)
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { restarted.Run(runCtx); close(done) }()
			defer func() { cancel(); <-done }()
			if d := f.finished(t, mine); d.Status != kiln.DeliveryProcessed || len(d.RunIDs) != 1 {
				t.Fatalf("the restarted server's delivery: %s %q", d.Status, d.Message)
			}
			if d, _ := f.db.Ingress().Get(ctx, other); d.Status != kiln.DeliveryReceived {
				t.Fatalf("another server's claimed delivery was taken: %s", d.Status)
			}
		})
	}
}
