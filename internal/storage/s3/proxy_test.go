package s3_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// faultProxy stands between the backend and a real S3 server: it records
// the requests that pass and answers the ones a rule matches with the
// error a real server rarely gives on demand (409, 412, 501, a bare 404),
// or runs a hook just before forwarding one, to let another write in.
type faultProxy struct {
	URL string

	mu    sync.Mutex
	seen  []*http.Request // clones, bodies not kept
	rules []*rule
}

// rule answers requests that match with status and an S3 error code (no
// body when code is ""), times times (0: forever); or, with before set,
// runs before forwarding them.
type rule struct {
	match  func(*http.Request) bool
	status int
	code   string
	times  int
	before func()
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ru := p.apply(r); ru != nil {
			if ru.before == nil {
				writeError(w, ru.status, ru.code)
				return
			}
			ru.before()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		rp.Transport.(*http.Transport).CloseIdleConnections()
	})
	p.URL = srv.URL
	return p
}

// apply records r and returns the rule it triggers, if any.
func (p *faultProxy) apply(r *http.Request) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, r.Clone(r.Context()))
	for _, ru := range p.rules {
		if ru.times >= 0 && ru.match(r) {
			if ru.times > 0 {
				if ru.times--; ru.times == 0 {
					ru.times = -1 // used up
				}
			}
			return ru
		}
	}
	return nil
}

func (p *faultProxy) add(r *rule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
}

// requests returns the recorded requests that match.
func (p *faultProxy) requests(match func(*http.Request) bool) []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*http.Request
	for _, r := range p.seen {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

func writeError(w http.ResponseWriter, status int, code string) {
	if code == "" {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>injected by the test proxy</Message><RequestId>test</RequestId></Error>`, code)
}

func isCopy(r *http.Request) bool {
	return r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != ""
}

func isHead(r *http.Request) bool { return r.Method == http.MethodHead }

func isGet(r *http.Request) bool { return r.Method == http.MethodGet }
