package forge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

var httpStatus = map[kiln.Code]int{
	kiln.CodeInvalid: 400, kiln.CodeUnauthorized: 401, kiln.CodeNotFound: 404,
	kiln.CodeTooLarge: 413, kiln.CodeInternal: 500,
}

type receipt struct {
	ID        string `json:"id"`
	Generated bool   `json:"generated"`
	Event     string `json:"event"`
	Known     bool   `json:"known"`
	Bytes     int    `json:"bytes"`
	Error     string `json:"error"`
}

// webhookServer mounts Receive the way the server does:
// POST /webhook/{kind}/{source}, kiln codes mapped to HTTP statuses.
func webhookServer(t *testing.T, limit int64, sources ...*Source) *httptest.Server {
	byName := map[string]*Source{}
	for _, s := range sources {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		byName[s.Name] = s
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhook/{kind}/{source}", func(w http.ResponseWriter, r *http.Request) {
		d, err := Receive(r, kiln.SourceKind(r.PathValue("kind")), byName[r.PathValue("source")], BodyLimits{Max: limit})
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(httpStatus[kiln.ErrorCode(err)])
			_ = json.NewEncoder(w).Encode(receipt{Error: kiln.ErrorMessage(err)})
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(receipt{ID: d.ID, Generated: d.GeneratedID, Event: d.Event, Known: d.Known(), Bytes: len(d.Body)})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url string, body []byte, hdr map[string]string) (int, receipt) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rc receipt
	_ = json.NewDecoder(resp.Body).Decode(&rc)
	return resp.StatusCode, rc
}

var (
	ghSource = &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{Token: "t", WebhookSecret: string(testSecret)}}
	gtSource = &Source{Name: "gt", Kind: kiln.SourceGitea, Gitea: &GiteaConfig{APIBase: "https://gitea.example.com", Token: "t", WebhookSecret: string(testSecret)}}
	hmSource = &Source{Name: "hm", Kind: kiln.SourceGeneric, Generic: &GenericConfig{Repository: "acme/app", CloneURL: "https://git.example.com/acme/app.git", DefaultBranch: "main",
		Auth: GenericAuth{Type: AuthHMAC, Secret: string(testSecret), Header: "X-Acme-Signature"}}}
	brSource = &Source{Name: "br", Kind: kiln.SourceGeneric, Generic: &GenericConfig{Repository: "acme/app", CloneURL: "https://git.example.com/acme/app.git", DefaultBranch: "main",
		Auth: GenericAuth{Type: AuthBearer, Token: "bearer-tok"}}}
	lcSource = &Source{Name: "lc", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: "/srv/git/app.git"}}
)

func ghHeaders(event string, body []byte) map[string]string {
	return map[string]string{HeaderGitHubEvent: event, HeaderGitHubDelivery: "72d3162e-cc78-11e3-81ab-4c9367dc0958", HeaderGitHubSignature: Sign(testSecret, body)}
}

func TestReceiveGitHub(t *testing.T) {
	srv := webhookServer(t, 0, ghSource)
	url := srv.URL + "/webhook/github/gh"
	for name, body := range payloads(t) {
		event, _, _ := strings.Cut(name, ".")
		code, rc := post(t, url, body, ghHeaders(event, body))
		if code != 202 || rc.ID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || rc.Event != event || !rc.Known || rc.Bytes != len(body) {
			t.Errorf("%s: %d %+v", name, code, rc)
		}
	}
	body := payloads(t)["push.payload.json"]
	code, rc := post(t, url, body, ghHeaders("issues", body))
	if code != 202 || rc.Known {
		t.Errorf("unknown event: %d %+v; want accepted but not known", code, rc)
	}
}

// Proves B73 (docs/behaviours.md).
func TestReceiveRejects(t *testing.T) {
	srv := webhookServer(t, 1<<20, ghSource, gtSource, hmSource, lcSource)
	gh := srv.URL + "/webhook/github/gh"
	body := payloads(t)["push.payload.json"]
	with := func(k, v string) map[string]string {
		h := ghHeaders("push", body)
		h[k] = v
		return h
	}
	notJSON := []byte("this is not json")
	cut := body[:len(body)/2]
	big := bytes.Repeat([]byte(" "), 1<<20+1)
	cases := []struct {
		name string
		url  string
		body []byte
		hdr  map[string]string
		code int
		msg  string
	}{
		{"unsigned", gh, body, with(HeaderGitHubSignature, ""), 401, "not signed"},
		{"wrongly signed", gh, body, with(HeaderGitHubSignature, Sign([]byte("wrong"), body)), 401, "does not match"},
		{"malformed signature", gh, body, with(HeaderGitHubSignature, "md5=abc"), 401, "not of the form"},
		{"oversized", gh, big, ghHeaders("push", big), 413, "larger than the 1 MiB limit"},
		{"truncated JSON, signed", gh, cut, ghHeaders("push", cut), 400, "not valid JSON"},
		{"not JSON, signed", gh, notJSON, ghHeaders("push", notJSON), 400, "not valid JSON"},
		{"form encoded", gh, body, with("Content-Type", "application/x-www-form-urlencoded"), 400, "application/json"},
		{"no event header", gh, body, with(HeaderGitHubEvent, ""), 400, "X-GitHub-Event header is missing"},
		{"bad event header", gh, body, with(HeaderGitHubEvent, "Push Event!"), 400, "not an event name"},
		{"no delivery id", gh, body, with(HeaderGitHubDelivery, ""), 400, "X-GitHub-Delivery header is missing"},
		{"bad delivery id", gh, body, with(HeaderGitHubDelivery, strings.Repeat("x", 201)), 400, "1 to 200 printable"},
		{"unknown source", srv.URL + "/webhook/github/nope", body, ghHeaders("push", body), 404, "no github source"},
		{"wrong kind", srv.URL + "/webhook/gitea/gh", body, ghHeaders("push", body), 404, "no gitea source"},
		{"unknown kind", srv.URL + "/webhook/gitlab/gh", body, ghHeaders("push", body), 404, "no gitlab source"},
		{"local source", srv.URL + "/webhook/local/lc", body, ghHeaders("push", body), 400, "kiln trigger"},
		{"gitea unsigned", srv.URL + "/webhook/gitea/gt", body, map[string]string{HeaderGiteaEvent: "push", HeaderGiteaDelivery: "1"}, 401, "X-Gitea-Signature header is missing"},
		{"generic wrong header", srv.URL + "/webhook/generic/hm", body, map[string]string{DefaultSignatureHeader: Sign(testSecret, body)}, 401, "X-Acme-Signature"},
		{"generic unknown event", srv.URL + "/webhook/generic/hm", body, map[string]string{"X-Acme-Signature": Sign(testSecret, body), HeaderEventType: "deploy"}, 400, "push or dispatch"},
	}
	for _, c := range cases {
		code, rc := post(t, c.url, c.body, c.hdr)
		if code != c.code || !strings.Contains(rc.Error, c.msg) {
			t.Errorf("%s: %d %q; want %d containing %q", c.name, code, rc.Error, c.code, c.msg)
		}
		if strings.Contains(rc.Error, string(testSecret)) {
			t.Errorf("%s: the answer contains the secret", c.name)
		}
	}
}

// TestReceiveTruncatedBody sends fewer bytes than Content-Length declares
// and closes its side, as a sender that dies mid-request does.
func TestReceiveTruncatedBody(t *testing.T) {
	srv := webhookServer(t, 0, ghSource)
	body := payloads(t)["push.payload.json"]
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /webhook/github/gh HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s: push\r\n%s: d1\r\n%s: %s\r\n\r\n",
		len(body), HeaderGitHubEvent, HeaderGitHubDelivery, HeaderGitHubSignature, Sign(testSecret, body))
	conn.Write(body[:len(body)/2])
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var rc receipt
	_ = json.NewDecoder(resp.Body).Decode(&rc)
	if resp.StatusCode != 400 || !strings.Contains(rc.Error, "truncated") {
		t.Fatalf("%d %q; want 400 truncated", resp.StatusCode, rc.Error)
	}
}

func TestReceiveGitea(t *testing.T) {
	srv := webhookServer(t, 0, gtSource)
	url := srv.URL + "/webhook/gitea/gt"
	body := payloads(t)["push.payload.json"]
	bare := Sign(testSecret, body)[len("sha256="):]
	for _, h := range []map[string]string{
		{HeaderGiteaEvent: "push", HeaderGiteaDelivery: "d-1", HeaderGiteaSignature: bare},
		{HeaderForgejoEvent: "push", HeaderForgejoDelivery: "d-1", HeaderForgejoSignature: bare},
		{HeaderGiteaEvent: "push", HeaderGiteaDelivery: "d-1", HeaderGitHubSignature: "sha256=" + bare},
	} {
		code, rc := post(t, url, body, h)
		if code != 202 || rc.ID != "d-1" || rc.Event != "push" || !rc.Known {
			t.Errorf("%v: %d %+v", h, code, rc)
		}
	}
}

// Proves B3 (docs/behaviours.md).
func TestReceiveGeneric(t *testing.T) {
	srv := webhookServer(t, 0, hmSource, brSource)
	hm, br := srv.URL+"/webhook/generic/hm", srv.URL+"/webhook/generic/br"
	push := []byte(`{"ref":"main","sha":"` + shaA + `"}`)
	dispatch := []byte(`{"event":"dispatch","inputs":{"env":"prod"}}`)
	sig := func(b []byte) string { return Sign(testSecret, b) }

	code, rc := post(t, hm, push, map[string]string{"X-Acme-Signature": sig(push)})
	if code != 202 || rc.Event != "push" || !rc.Generated || !strings.HasPrefix(rc.ID, "kiln-") {
		t.Errorf("push, no id: %d %+v", code, rc)
	}
	_, rc2 := post(t, hm, push, map[string]string{"X-Acme-Signature": sig(push)})
	if rc2.ID == rc.ID {
		t.Error("generated delivery ids repeat")
	}
	code, rc = post(t, hm, dispatch, map[string]string{"X-Acme-Signature": sig(dispatch)})
	if code != 202 || rc.Event != "dispatch" {
		t.Errorf("event from the body: %d %+v", code, rc)
	}
	code, rc = post(t, hm, dispatch, map[string]string{"X-Acme-Signature": sig(dispatch), HeaderEventType: "push"})
	if code != 202 || rc.Event != "push" {
		t.Errorf("the header wins over the body: %d %+v", code, rc)
	}
	code, rc = post(t, hm, push, map[string]string{"X-Acme-Signature": sig(push), HeaderIdempotencyKey: "build-42"})
	if code != 202 || rc.ID != "build-42" || rc.Generated {
		t.Errorf("idempotency key: %d %+v", code, rc)
	}
	code, rc = post(t, hm, push, map[string]string{"X-Acme-Signature": sig(push), HeaderIdempotencyKey: "build-42", HeaderDeliveryID: "d-7"})
	if code != 202 || rc.ID != "d-7" {
		t.Errorf("delivery id: %d %+v", code, rc)
	}

	code, rc = post(t, br, push, map[string]string{"Authorization": "Bearer bearer-tok", HeaderEventType: "push"})
	if code != 202 || rc.Event != "push" {
		t.Errorf("bearer: %d %+v", code, rc)
	}
	code, rc = post(t, br, push, map[string]string{"Authorization": "Bearer wrong"})
	if code != 401 || strings.Contains(rc.Error, "bearer-tok") {
		t.Errorf("wrong bearer: %d %+v", code, rc)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestReadBody(t *testing.T) {
	if _, err := ReadBody(failingReader{}, 100, 10); kiln.ErrorCode(err) != kiln.CodeTooLarge {
		t.Errorf("declared too large: %v (must not read)", err)
	}
	if _, err := ReadBody(strings.NewReader(strings.Repeat("x", 11)), -1, 10); kiln.ErrorCode(err) != kiln.CodeTooLarge {
		t.Errorf("too large, unknown length: %v", err)
	}
	if b, err := ReadBody(strings.NewReader(strings.Repeat("x", 10)), -1, 10); err != nil || len(b) != 10 {
		t.Errorf("exactly the limit: %d %v", len(b), err)
	}
	if _, err := ReadBody(strings.NewReader("abc"), 5, 10); kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(err.Error(), "3 of 5") {
		t.Errorf("short: %v", err)
	}
	if _, err := ReadBody(io.MultiReader(strings.NewReader("ab"), failingReader{}), 5, 10); kiln.ErrorCode(err) != kiln.CodeInvalid {
		t.Errorf("read error: %v", err)
	}
	mb := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(strings.Repeat("x", 20))), 5)
	if _, err := ReadBody(mb, -1, 10); kiln.ErrorCode(err) != kiln.CodeTooLarge {
		t.Errorf("MaxBytesReader: %v", err)
	}
	if b, err := ReadBody(nil, 0, 0); err != nil || len(b) != 0 {
		t.Errorf("nil body: %v", err)
	}
}

func TestReceiveDefaultLimitIs25MiB(t *testing.T) {
	if DefaultMaxBody != 25<<20 {
		t.Fatalf("DefaultMaxBody = %d", DefaultMaxBody)
	}
	srv := webhookServer(t, 0, ghSource)
	body := bytes.Repeat([]byte(" "), 25<<20+1)
	code, rc := post(t, srv.URL+"/webhook/github/gh", body, ghHeaders("push", body))
	if code != 413 || !strings.Contains(rc.Error, "25 MiB") {
		t.Fatalf("%d %q", code, rc.Error)
	}
}

func TestIdentify(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	ev, id, gen, err := Identify(kiln.SourceGitHub, hdr(HeaderGitHubEvent, "push", HeaderGitHubDelivery, "abc"))
	if ev != "push" || id != "abc" || gen || err != nil {
		t.Errorf("github: %q %q %v %v", ev, id, gen, err)
	}
	ev, id, _, err = Identify(kiln.SourceGitea, hdr(HeaderForgejoEvent, "pull_request", HeaderForgejoDelivery, "f-1"))
	if ev != "pull_request" || id != "f-1" || err != nil {
		t.Errorf("forgejo: %q %q %v", ev, id, err)
	}
	ev, id, gen, err = Identify(kiln.SourceGeneric, http.Header{})
	if ev != "" || !gen || !strings.HasPrefix(id, "kiln-") || err != nil {
		t.Errorf("generic: %q %q %v %v", ev, id, gen, err)
	}
	if _, _, _, err := Identify(kiln.SourceGitHub, hdr(HeaderGitHubEvent, "push")); kiln.ErrorCode(err) != kiln.CodeInvalid {
		t.Errorf("missing delivery: %v", err)
	}
}
