// Package waittest is how kiln's tests wait for asynchronous work: they
// poll a condition until a deadline instead of sleeping for a guessed time,
// so a test is as quick as the work it waits for and fails with what it
// was waiting for when the work never comes.
package waittest

import (
	"testing"
	"time"
)

// Timeout is how long a test waits for work that takes milliseconds when
// all is well: long enough for a loaded machine, and only ever waited out
// by a failing test.
const Timeout = 30 * time.Second

// The polling interval starts short, for work that is done in
// microseconds, and doubles up to maxPoll, for work done by other
// processes.
const (
	firstPoll = time.Millisecond
	maxPoll   = 50 * time.Millisecond
)

// Until polls cond until it holds, failing t with what once timeout has
// passed.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilState(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// UntilState polls cond until it holds, failing t with what and the state
// cond last described once timeout has passed.
func UntilState(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := firstPoll
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				t.Fatalf("waited %s for %s; last: %s", timeout, what, state)
			}
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxPoll)
	}
}
