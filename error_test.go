package kiln

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// Every code round-trips through its HTTP status, so a client reading a
// bare status (a proxy's page) gets back the code the server meant.
func TestCodeStatusRoundTrip(t *testing.T) {
	codes := []Code{CodeInvalid, CodeNotFound, CodeConflict, CodeUnauthorized, CodeForbidden,
		CodeTooLarge, CodeUnavailable, CodeInternal}
	seen := map[int]Code{}
	for _, c := range codes {
		st := c.HTTPStatus()
		if prev, ok := seen[st]; ok {
			t.Errorf("%s and %s both answer %d", prev, c, st)
		}
		seen[st] = c
		if back := CodeOfStatus(st); back != c {
			t.Errorf("%s answers %d, which reads back as %s", c, st, back)
		}
	}
	if got := Code("no_such_code").HTTPStatus(); got != http.StatusInternalServerError {
		t.Errorf("an unknown code answers %d, want 500", got)
	}
	if got := CodeOfStatus(http.StatusBadGateway); got != CodeUnavailable {
		t.Errorf("502 reads as %s, want unavailable", got)
	}
}

func TestBodyOfHidesInternalDetail(t *testing.T) {
	b := BodyOf(fmt.Errorf("context: %w", Errorf(CodeConflict, "run 7 already finished")))
	if b.Error != (ErrorDetail{Code: CodeConflict, Message: "run 7 already finished"}) {
		t.Fatalf("BodyOf(kiln error) = %+v", b)
	}
	b = BodyOf(errors.New("pq: password authentication failed for user kiln"))
	if b.Error != (ErrorDetail{Code: CodeInternal, Message: "internal error"}) {
		t.Fatalf("BodyOf(other error) = %+v, want the detail hidden", b)
	}
}
