package waittest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Until(t, 10*time.Second, "the third look", func() bool { return n.Add(1) == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("cond ran %d times, want 3", got)
	}
}

// recorder is a testing.TB that records a Fatalf instead of ending the
// test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r) // as FailNow ends the test's goroutine
}

func TestUntilStateFailsWithWhatAndTheLastState(t *testing.T) {
	r := &recorder{TB: t}
	looks := 0
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("UntilState did not fail the test (recovered %v)", p)
			}
		}()
		UntilState(r, 20*time.Millisecond, "the job to end", func() (bool, string) {
			looks++
			return false, "running"
		})
	}()
	if !strings.Contains(r.msg, "the job to end") || !strings.Contains(r.msg, "running") {
		t.Fatalf("failure message %q names neither what was awaited nor the last state", r.msg)
	}
	if looks < 2 {
		t.Fatalf("cond ran %d times in 20ms, want it polled", looks)
	}
}
