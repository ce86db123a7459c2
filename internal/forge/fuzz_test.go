package forge

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
)

// A source's configuration comes from an admin, but its values (URLs,
// names, secrets) are whatever was pasted: Validate never panics, and its
// sentence never quotes a secret (B73).
// Proves B73 (docs/behaviours.md).
func FuzzSourceValidate(f *testing.F) {
	for _, seed := range []string{
		`{"name":"gh","kind":"github","github":{"api_base":"https://api.github.com","token":"ghp_secretsecret","webhook_secret":"whsecretwhsecret"}}`,
		`{"name":"gt","kind":"gitea","gitea":{"api_base":"http://gitea:3000/api/v1","token":"tok-secret-123","webhook_secret":"hook-secret-456"}}`,
		`{"name":"gen","kind":"generic","generic":{"clone_url":"https://x/y.git","auth":{"type":"hmac","secret":"generic-secret-789"}}}`,
		`{"name":"gen","kind":"generic","generic":{"auth":{"type":"bearer","token":"bearer-secret-000"}}}`,
		`{"name":"loc","kind":"local","local":{"path":"/srv/repo"}}`,
		`{"name":"Bad Name","kind":"github","github":{},"gitea":{}}`,
		`{"name":"gh","kind":"github","github":{"api_base":"ftp://\u0000","app":{"id":-1}}}`,
		`{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Source
		if json.Unmarshal(b, &s) != nil {
			return
		}
		err := s.Validate()
		if err == nil {
			return
		}
		if kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Fatalf("Validate's error is %s, not invalid: %v", kiln.ErrorCode(err), err)
		}
		// A public value (a URL, a name) may contain a secret's text by
		// chance; the sentence may quote those, so they are cut out first.
		msg := err.Error()
		for _, v := range sourcePublicValues(&s) {
			if v != "" {
				msg = strings.ReplaceAll(msg, strconv.Quote(v), "")
			}
		}
		for _, secret := range sourceSecrets(&s) {
			if len(secret) >= 8 && strings.Contains(msg, secret) {
				t.Fatalf("Validate quoted a secret: %q", msg)
			}
		}
	})
}

func sourcePublicValues(s *Source) []string {
	out := []string{s.Name, string(s.Kind)}
	if s.GitHub != nil {
		out = append(out, s.GitHub.APIBase, s.GitHub.WebBase)
		if s.GitHub.App != nil {
			out = append(out, s.GitHub.App.AppID)
		}
	}
	if s.Gitea != nil {
		out = append(out, s.Gitea.APIBase)
	}
	if s.Generic != nil {
		out = append(out, s.Generic.Repository, s.Generic.CloneURL, s.Generic.DefaultBranch, s.Generic.CloneUsername)
	}
	if s.Local != nil {
		out = append(out, s.Local.Path)
	}
	return out
}

func sourceSecrets(s *Source) []string {
	var out []string
	if s.GitHub != nil {
		out = append(out, s.GitHub.Token, s.GitHub.WebhookSecret)
	}
	if s.Gitea != nil {
		out = append(out, s.Gitea.Token, s.Gitea.WebhookSecret)
	}
	if s.Generic != nil {
		out = append(out, s.Generic.Auth.Secret, s.Generic.Auth.Token)
	}
	return out
}

// Webhook headers are a stranger's until the signature checks out, and
// Identify reads them before it (to name a refused delivery): any header
// values give an error or an event and id within the rules, never a panic.
// Proves B73 (docs/behaviours.md).
func FuzzIdentify(f *testing.F) {
	f.Add("github", "push", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "")
	f.Add("gitea", "", "", "pull_request")
	f.Add("generic", "dispatch", "", "")
	f.Add("generic", "", "key\x00\n", "")
	f.Add("github", "PUSH ", strings.Repeat("x", 300), "")
	f.Fuzz(func(t *testing.T, kind, event, id, other string) {
		h := http.Header{}
		for _, k := range []string{HeaderGitHubEvent, HeaderGiteaEvent, HeaderEventType} {
			h.Set(k, event)
		}
		for _, k := range []string{HeaderGitHubDelivery, HeaderGiteaDelivery, HeaderDeliveryID} {
			h.Set(k, id)
		}
		h.Set(HeaderForgejoEvent, other)
		h.Set(HeaderIdempotencyKey, other)
		ev, did, generated, err := Identify(kiln.SourceKind(kind), h)
		if err != nil {
			return
		}
		if ev != "" && !eventRE().MatchString(ev) {
			t.Fatalf("event %q accepted", ev)
		}
		if !generated && !deliveryRE().MatchString(did) {
			t.Fatalf("delivery id %q accepted", did)
		}
	})
}
