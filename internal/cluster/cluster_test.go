package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/cluster"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// member is one coordinator of a test, running until stop.
type member struct {
	*cluster.Cluster
	stop func()
}

func join(t *testing.T, url, advertise string) *member {
	t.Helper()
	db, err := store.Open(context.Background(), store.Config{URL: url, Releaser: storetest.QueueAsCreated})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c, err := cluster.New(db, cluster.Config{AdvertiseURL: advertise, HeartbeatInterval: 50 * time.Millisecond,
		DeadAfter: 500 * time.Millisecond, Sole: db.Dialect() == "sqlite"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	m := &member{Cluster: c, stop: func() { cancel(); <-done }}
	t.Cleanup(m.stop)
	return m
}

func leaders(ms ...*member) []string {
	var out []string
	for _, m := range ms {
		if _, ok := m.Leading(); ok {
			out = append(out, m.ID())
		}
	}
	return out
}

// B141: of the coordinators sharing a PostgreSQL database exactly one
// leads at a time; when it stops, another takes over under a newer epoch.
// On SQLite the one coordinator leads from the start, without a lease.
func TestOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	a, b, c := join(t, url, "http://a"), join(t, url, "http://b"), join(t, url, "http://c")
	var first store.LeaderLease
	waittest.UntilState(t, 10*time.Second, "one leader", func() (bool, string) {
		ls := leaders(a, b, c)
		return len(ls) == 1, fmt.Sprint(ls)
	})
	for _, m := range []*member{a, b, c} {
		if l, ok := m.Leading(); ok {
			first = l
			m.stop()
			rest := slices.DeleteFunc([]*member{a, b, c}, func(x *member) bool { return x == m })
			waittest.UntilState(t, 10*time.Second, "another leader", func() (bool, string) {
				ls := leaders(rest...)
				if len(ls) != 1 {
					return false, fmt.Sprint(ls)
				}
				for _, r := range rest {
					if l2, ok := r.Leading(); ok && l2.Epoch <= first.Epoch {
						t.Fatalf("the new term's epoch %d is not above the old %d", l2.Epoch, first.Epoch)
					}
				}
				return true, ""
			})
			// Every live coordinator is listed to agents, the stopped one
			// is not.
			gone := "http://" + map[*member]string{a: "a", b: "b", c: "c"}[m]
			for _, r := range rest {
				waittest.UntilState(t, 10*time.Second, "the stopped coordinator to leave the list", func() (bool, string) {
					got := r.Coordinators()
					return len(got) == 2 && !slices.Contains(got, gone), fmt.Sprint(got)
				})
			}
			break
		}
	}
	sole := join(t, storetest.SQLiteURL(t), "http://sole")
	if l, ok := sole.Leading(); !ok || l.Epoch != 0 {
		t.Fatalf("a sole coordinator must lead without a lease: %+v %v", l, ok)
	}
}

// B146: a wake-up published by one coordinator reaches the others (not
// itself), in full, and a payload longer than one notification is split.
func TestWakeUpCrossesCoordinators(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	a, b := join(t, url, "http://a"), join(t, url, "http://b")
	// Each listener announces itself with an empty wake-up (offer the
	// queue again) once it listens.
	for _, m := range []*member{a, b} {
		select {
		case ids := <-m.Wakes():
			if len(ids) != 0 {
				t.Fatalf("first wake-up %v", ids)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the listener did not start")
		}
	}
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("01a2-job-%04d", i))
	}
	a.Publish(ids)
	var got []string
	waittest.UntilState(t, 10*time.Second, "b to receive every id", func() (bool, string) {
		for {
			select {
			case more := <-b.Wakes():
				got = append(got, more...)
				continue
			default:
			}
			break
		}
		return len(got) == len(ids), fmt.Sprint(len(got))
	})
	if !slices.Equal(got, ids) {
		t.Fatalf("b received other ids than a published")
	}
	select {
	case self := <-a.Wakes():
		t.Fatalf("a received its own wake-up: %d ids", len(self))
	default:
	}
}
