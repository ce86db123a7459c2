package web

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln/internal/api"
)

// A batch of a follow's events: each line its own event with the position
// after it as the id (a page cut off inside a batch resumes after its last
// line), lines the page has skipped, and a newer attempt ending the batch.
func TestEventBatch(t *testing.T) {
	e := newEventBatch(1, map[int]uint64{0: 2})
	for _, l := range []api.LogLine{
		{Attempt: 1, Step: 0, Seq: 2, Text: "had"},
		{Attempt: 1, Step: 0, Seq: 3, Stream: "stdout", Text: "a"},
		{Attempt: 1, Step: 1, Seq: 1, Stream: "stderr", Text: "<b>"},
		{Attempt: 0, Step: 0, Seq: 9, Text: "old attempt"},
	} {
		if e.line(l) {
			t.Fatalf("line %+v ended the follow", l)
		}
	}
	want := "id: 1|0:3\ndata: {\"s\":0,\"q\":3,\"c\":\"stdout\",\"h\":\"a\"}\n\n" +
		"id: 1|0:3,1:1\ndata: {\"s\":1,\"q\":1,\"c\":\"stderr\",\"h\":\"&lt;b&gt;\"}\n\n"
	if got := string(e.buf); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
	e.buf = e.buf[:0]
	if !e.line(api.LogLine{Attempt: 2, Step: 0, Seq: 1}) || !strings.HasPrefix(string(e.buf), "event: attempt\ndata: 2\n\n") {
		t.Fatalf("a newer attempt: %q", e.buf)
	}
}
