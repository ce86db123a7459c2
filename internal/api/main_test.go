package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api/apitest"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

var ctx = context.Background()

// forEach runs fn against the API over each backend.
func forEach(t *testing.T, fn func(t *testing.T, h *apitest.Harness), opts ...apitest.Option) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		fn(t, apitest.New(t, db, opts...))
	}, storetest.ReleaseWith(engine.Release))
}

// wantCode asserts err is a *kiln.Error with code.
func wantCode(t *testing.T, err error, code kiln.Code) {
	t.Helper()
	if kiln.ErrorCode(err) != code {
		t.Fatalf("err = %v (code %q), want code %q", err, kiln.ErrorCode(err), code)
	}
}

// raw sends a request with the harness's token (unless auth is given) and
// returns the status and the body.
func raw(t *testing.T, h *apitest.Harness, method, path, body string, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// wantError sends a request and asserts the status, the JSON error shape,
// its code, and that the message contains each of parts.
func wantError(t *testing.T, h *apitest.Harness, status int, code kiln.Code, method, path, body string, parts ...string) {
	t.Helper()
	got, b := raw(t, h, method, path, body)
	wantErrorBody(t, got, b, status, code, parts...)
}

func wantErrorBody(t *testing.T, got int, b []byte, status int, code kiln.Code, parts ...string) {
	t.Helper()
	var eb kiln.ErrorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("status %d, body is not the error shape: %s", got, b)
	}
	if got != status || eb.Error.Code != code {
		t.Fatalf("status %d code %q (%s), want %d %q", got, eb.Error.Code, eb.Error.Message, status, code)
	}
	for _, p := range parts {
		if !strings.Contains(eb.Error.Message, p) {
			t.Fatalf("message %q does not mention %q", eb.Error.Message, p)
		}
	}
}

func newSQLite(t *testing.T) *store.DB {
	return storetest.New(t, storetest.ReleaseWith(engine.Release))
}
