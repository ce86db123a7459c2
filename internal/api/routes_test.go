package api_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/api/apitest"
)

func TestUnknownRoutesAndMethodsAnswerJSON(t *testing.T) {
	h := apitest.New(t, newSQLite(t))
	wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v1/nothing", "", "no API route /api/v1/nothing")
	wantError(t, h, http.StatusNotFound, kiln.CodeNotFound, "GET", "/api/v2/runs", "", "no API route")
	status, body := raw(t, h, "PUT", "/api/v1/runs", `{}`)
	wantErrorBody(t, status, body, http.StatusMethodNotAllowed, kiln.CodeInvalid, "PUT is not allowed", "GET")
	status, body = raw(t, h, "GET", "/api/v1/tokens/abc", "")
	wantErrorBody(t, status, body, http.StatusMethodNotAllowed, kiln.CodeInvalid, "use DELETE")
}

func TestNewRefusesMissingDependencies(t *testing.T) {
	if _, err := api.New(api.Deps{}, api.Config{}); err == nil {
		t.Fatal("New accepted no dependencies")
	}
}

func TestClientErrors(t *testing.T) {
	if _, err := api.NewClient("ftp://x", ""); kiln.ErrorCode(err) != kiln.CodeInvalid {
		t.Fatalf("ftp URL: %v", err)
	}
	// A server that is not there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ := api.NewClient("http://"+addr, "t")
	_, err = c.ListRuns(ctx, api.RunFilter{})
	wantCode(t, err, kiln.CodeUnavailable)
	// A proxy's answer that is not kiln's error shape.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	defer proxy.Close()
	c, _ = api.NewClient(proxy.URL, "t")
	_, err = c.GetRun(ctx, "1")
	wantCode(t, err, kiln.CodeUnavailable)
	// The server's own errors keep their code and message.
	h := apitest.New(t, newSQLite(t))
	_, err = h.Client.GetRun(ctx, "404")
	wantCode(t, err, kiln.CodeNotFound)
	if kiln.ErrorMessage(err) != "there is no run #404" {
		t.Fatalf("message %q", kiln.ErrorMessage(err))
	}
	// A run reference with characters that need escaping stays one path segment.
	_, err = h.Client.GetRun(ctx, "a/b?c")
	wantCode(t, err, kiln.CodeNotFound)
}
