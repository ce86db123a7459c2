package api

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
)

// FuzzRequestBody feeds arbitrary bodies to the strict decoder and the
// validation of every request type: each is either accepted or refused
// with an invalid or too_large kiln.Error and a sentence; nothing panics.
// Proves B78 (docs/behaviours.md).
func FuzzRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"name":"x","labels":["linux"],"mandatory":["linux"],"ttl":"1h","single_use":true}`,
		`{"labels":[]}`, `{"ttl":"-1s"}`, `{"source":"app","workflow":"ci.yml","inputs":{"a":1}}`,
		`{"ref":"main","sha":"abc","before":"def"}`, `{"name":"gh","kind":"github","github":{"token":"t","webhook_secret":"s"}}`,
		`{"name":"grafana","role":"read-only","ttl":"720h"}`, `{"grace":"1h"}`, `{"reason":"x"} trailing`, `[`, `{"a":`, `"str"`, `null`, `{"failed_only":1}`, "\x00\xff",
	} {
		f.Add(seed)
	}
	s := &server{cfg: Config{MaxBodyBytes: 4096}.withDefaults()}
	s.cfg.MaxBodyBytes = 4096
	check := func(t *testing.T, err error) {
		if err == nil {
			return
		}
		code := kiln.ErrorCode(err)
		var se *statusError
		if asStatus(err, &se) {
			code = se.code
		}
		if code != kiln.CodeInvalid && code != kiln.CodeTooLarge || kiln.ErrorMessage(err) == "" {
			t.Fatalf("error %v has code %q", err, code)
		}
	}
	decode := func(t *testing.T, body string, v any) error {
		r := httptest.NewRequest("POST", "/x", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		err := s.decodeBody(httptest.NewRecorder(), r, v, false)
		check(t, err)
		return err
	}
	f.Fuzz(func(t *testing.T, body string) {
		var tok CreateTokenRequest
		if decode(t, body, &tok) == nil {
			_, err := tok.spec(time.Now())
			check(t, err)
		}
		var src forge.Source
		if decode(t, body, &src) == nil {
			check(t, src.Validate())
		}
		var disp DispatchRequest
		decode(t, body, &disp)
		var trig TriggerRequest
		decode(t, body, &trig)
		var cancel CancelRequest
		decode(t, body, &cancel)
		var admin CreateAdminTokenRequest
		if decode(t, body, &admin) == nil {
			_, err := admin.spec(time.Now())
			check(t, err)
		}
		var rot RotateAdminTokenRequest
		decode(t, body, &rot)
	})
}

func asStatus(err error, target **statusError) bool {
	se, ok := err.(*statusError)
	if ok {
		*target = se
	}
	return ok
}

// FuzzLogStream feeds arbitrary server output to the client's NDJSON
// reader: it returns lines or a kiln.Error, never panics.
func FuzzLogStream(f *testing.F) {
	f.Add("{\"job\":\"build\",\"seq\":1,\"text\":\"hi\"}\n")
	f.Add("{\"seq\":1}\n{\"seq\":2")
	f.Add("not json\n")
	f.Add("")
	f.Add("{\"job\":\"b\",\"job_id\":\"1\",\"attempt\":1,\"step\":-1,\"seq\":1,\"stream\":\"stdout\",\"text\":\"\\u001b\",\"time_ms\":3}\n")
	f.Fuzz(func(t *testing.T, data string) {
		for line := range strings.Lines(data) {
			checkLogLineFastRoad(t, strings.TrimSuffix(line, "\n"))
		}
		n := 0
		err := readLines(context.Background(), bufio.NewReader(strings.NewReader(data)), decodingEach(func(LogLine) error { n++; return nil }), nil)
		if err != nil && kiln.ErrorMessage(err) == "" {
			t.Fatalf("error without a message: %v", err)
		}
		if err == nil && n != strings.Count(data, "\n") {
			t.Fatalf("%d lines from %d newlines", n, strings.Count(data, "\n"))
		}
	})
}

// FuzzLogQuery feeds arbitrary query strings to the log route's parser.
func FuzzLogQuery(f *testing.F) {
	for _, seed := range []string{"", "job=build&step=0&after=3", "follow=true", "step=-1", "limit=0", "after=1", "x=%zz"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := &http.Request{Method: "GET"}
		r.URL = mustURL("/api/v1/runs/1/logs?" + q)
		if r.URL == nil {
			return
		}
		lq, err := parseLogQuery(r)
		if err != nil {
			if kiln.ErrorCode(err) != kiln.CodeInvalid {
				t.Fatalf("error %v", err)
			}
			return
		}
		if lq.limit < 1 || lq.limit > maxLogLimit || (lq.step != nil && *lq.step < -1) || (lq.after > 0 && lq.step == nil) {
			t.Fatalf("accepted %+v", lq)
		}
	})
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return nil
	}
	return u
}
