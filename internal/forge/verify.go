package forge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/kilnci/kiln"
)

// Why a delivery failed verification; match with errors.Is. Every
// verification error is also a *kiln.Error with CodeUnauthorized (401) and a
// sentence naming the header, never the secret or the expected value.
var (
	ErrNoSignature        = errors.New("forge: delivery not signed")
	ErrMalformedSignature = errors.New("forge: malformed signature")
	ErrWrongSignature     = errors.New("forge: wrong signature")
)

// Signature headers.
const (
	HeaderGitHubSignature  = "X-Hub-Signature-256"
	HeaderGiteaSignature   = "X-Gitea-Signature"
	HeaderForgejoSignature = "X-Forgejo-Signature"
)

// VerifyError is a failed verification: Reason is one of the Err*Signature
// sentinels, Msg the sentence to answer with.
type VerifyError struct {
	Reason error
	Msg    *kiln.Error
}

func (e *VerifyError) Error() string   { return e.Msg.Message }
func (e *VerifyError) Unwrap() []error { return []error{e.Reason, e.Msg} }

func verifyErr(reason error, format string, args ...any) error {
	msg := kiln.Errorf(kiln.CodeUnauthorized, format, args...).(*kiln.Error)
	return &VerifyError{Reason: reason, Msg: msg}
}

// VerifyGitHub checks GitHub's X-Hub-Signature-256 header value
// ("sha256=<hex>", HMAC-SHA256 of the exact body bytes) in constant time.
func VerifyGitHub(secret, body []byte, header string) error {
	return verifyPrefixed(secret, &payload{mem: body}, HeaderGitHubSignature, header, true)
}

// VerifyGitea checks a Gitea or Forgejo delivery. Gitea sends the bare hex
// HMAC in X-Gitea-Signature (Forgejo also in X-Forgejo-Signature) and, like
// GitHub, "sha256=<hex>" in X-Hub-Signature-256; the first present of those
// is checked.
func VerifyGitea(secret, body []byte, h http.Header) error {
	return verifyGitea(secret, &payload{mem: body}, h)
}

func verifyGitea(secret []byte, p *payload, h http.Header) error {
	for _, name := range []string{HeaderGiteaSignature, HeaderForgejoSignature} {
		if v := h.Get(name); v != "" {
			return verifyHex(secret, p, name, v)
		}
	}
	if v := h.Get(HeaderGitHubSignature); v != "" {
		return verifyPrefixed(secret, p, HeaderGitHubSignature, v, true)
	}
	return verifyErr(ErrNoSignature, "the delivery is not signed: the %s header is missing; set a secret on the webhook", HeaderGiteaSignature)
}

// VerifyHMAC checks a generic source's signature header value: HMAC-SHA256
// of the body as "sha256=<hex>" or bare "<hex>".
func VerifyHMAC(secret, body []byte, headerName, value string) error {
	return verifyPrefixed(secret, &payload{mem: body}, headerName, value, false)
}

// VerifyBearer checks an Authorization header value against the expected
// bearer token in constant time (also constant in the tokens' lengths).
func VerifyBearer(want, authorization string) error {
	if authorization == "" {
		return verifyErr(ErrNoSignature, "the delivery is not authenticated: the Authorization header is missing; send Authorization: Bearer <token>")
	}
	scheme, tok, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return verifyErr(ErrMalformedSignature, "the Authorization header is not of the form Bearer <token>")
	}
	if want == "" {
		return verifyErr(ErrWrongSignature, "the source has no bearer token configured, so no delivery can be accepted")
	}
	g, w := sha256.Sum256([]byte(strings.TrimSpace(tok))), sha256.Sum256([]byte(want))
	if !hmac.Equal(g[:], w[:]) {
		return verifyErr(ErrWrongSignature, "the bearer token is wrong")
	}
	return nil
}

func verifyPrefixed(secret []byte, p *payload, name, value string, needPrefix bool) error {
	if value == "" {
		return verifyErr(ErrNoSignature, "the delivery is not signed: the %s header is missing; set a secret on the webhook", name)
	}
	hexMAC, ok := strings.CutPrefix(value, "sha256=")
	if !ok && needPrefix {
		return verifyErr(ErrMalformedSignature, "the %s header is not of the form sha256=<64 hex digits>", name)
	}
	return verifyHex(secret, p, name, hexMAC)
}

func verifyHex(secret []byte, p *payload, name, hexMAC string) error {
	got, err := hex.DecodeString(strings.TrimSpace(hexMAC))
	if err != nil || len(got) != sha256.Size {
		return verifyErr(ErrMalformedSignature, "the %s header is not a hex HMAC-SHA256 (64 hex digits)", name)
	}
	if len(secret) == 0 {
		return verifyErr(ErrWrongSignature, "the source has no webhook secret configured, so no delivery can be accepted")
	}
	want, err := p.hmacSHA256(secret)
	if err != nil {
		return kiln.Errorf(kiln.CodeUnavailable, "the body could not be read back; try again")
	}
	if !hmac.Equal(got, want) {
		return verifyErr(ErrWrongSignature, "the %s signature does not match the body; check that the webhook's secret is the source's secret", name)
	}
	return nil
}

// Sign returns the "sha256=<hex>" signature of body, as GitHub computes it.
// Senders of generic webhooks and tests use it.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
