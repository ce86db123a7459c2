package forge

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"

	"github.com/kilnci/kiln"
)

// DefaultMaxBody is the largest webhook body kiln reads (GitHub's own cap).
const DefaultMaxBody = 25 << 20

// Delivery headers.
const (
	HeaderGitHubEvent     = "X-GitHub-Event"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
	HeaderGiteaEvent      = "X-Gitea-Event"
	HeaderGiteaDelivery   = "X-Gitea-Delivery"
	HeaderForgejoEvent    = "X-Forgejo-Event"
	HeaderForgejoDelivery = "X-Forgejo-Delivery"
	HeaderEventType       = "X-Event-Type"  // generic
	HeaderDeliveryID      = "X-Delivery-ID" // generic
	HeaderIdempotencyKey  = "Idempotency-Key"
)

// Events each kind's webhooks deliver that kiln acts on. Others are
// verified and recorded but start nothing; the server answers them 202
// "ignored".
var (
	GitHubEvents  = []string{"push", "pull_request", "create", "ping"}
	GiteaEvents   = []string{"push", "pull_request", "create"}
	GenericEvents = []string{"push", "dispatch"}
)

// Delivery is one verified webhook delivery.
type Delivery struct {
	Source string
	Kind   kiln.SourceKind
	// ID is the deduplication key: the forge's delivery id, or for generic
	// sources X-Delivery-ID, else Idempotency-Key, else a generated id.
	ID string
	// GeneratedID says kiln made ID up, so a resend cannot be recognised.
	GeneratedID bool
	Event       string // push, pull_request, …: the event header's value
	Body        []byte
	// Signed says the body was verified by an HMAC signature, which covers
	// the body alone: the same body under a new delivery id verifies too,
	// so the body is a replay's key (B116).
	Signed bool
}

// Known reports whether kiln acts on the delivery's event.
func (d *Delivery) Known() bool {
	switch d.Kind {
	case kiln.SourceGitHub:
		return slices.Contains(GitHubEvents, d.Event)
	case kiln.SourceGitea:
		return slices.Contains(GiteaEvents, d.Event)
	case kiln.SourceGeneric:
		return slices.Contains(GenericEvents, d.Event)
	}
	return false
}

// ReadBody reads a request body of at most limit bytes (DefaultMaxBody when
// limit ≤ 0). A declared or actual size over the limit is CodeTooLarge
// (413); a body shorter than its Content-Length, or one that fails to
// read, is CodeInvalid (400). contentLength is -1 when unknown.
func ReadBody(body io.Reader, contentLength, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = DefaultMaxBody
	}
	if contentLength > limit {
		return nil, tooLarge(limit)
	}
	if body == nil {
		body = http.NoBody
	}
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge(limit)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, kiln.Errorf(kiln.CodeInvalid, "the body is truncated: it ended before its declared Content-Length")
	case err != nil:
		return nil, kiln.Errorf(kiln.CodeInvalid, "the body could not be read")
	case int64(len(b)) > limit:
		return nil, tooLarge(limit)
	case contentLength >= 0 && int64(len(b)) != contentLength:
		return nil, kiln.Errorf(kiln.CodeInvalid, "the body is truncated: %d of %d declared bytes arrived", len(b), contentLength)
	}
	return b, nil
}

func tooLarge(limit int64) error {
	return kiln.Errorf(kiln.CodeTooLarge, "the body is larger than the %s limit", sizeString(limit))
}

// Receive reads, verifies and identifies one webhook delivery for src,
// which the server looked up from the URL /webhook/{kind}/{name} (nil when
// there is no such source). The checks run in an order that tells a
// stranger nothing before the signature is good: size (413), signature
// (401), then headers, content type and JSON (400). The body is held
// within lim until its signature checks out (B103). Every error is a
// *kiln.Error; a nil error means the body is genuine, JSON, and from src.
func Receive(r *http.Request, kind kiln.SourceKind, src *Source, lim BodyLimits) (*Delivery, error) {
	if src == nil || src.Kind != kind {
		return nil, kiln.Errorf(kiln.CodeNotFound, "there is no %s source by that name", kind)
	}
	if kind == kiln.SourceLocal {
		return nil, kiln.Errorf(kiln.CodeInvalid, "local sources take no webhooks; use kiln trigger or the post-receive hook")
	}
	p, err := readPayload(r.Body, r.ContentLength, lim)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := verify(src, r.Header, p); err != nil {
		return nil, err
	}
	body, err := p.bytes()
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeUnavailable, "the body could not be read back; try again")
	}
	d := &Delivery{Source: src.Name, Kind: kind, Body: body,
		Signed: src.Kind != kiln.SourceGeneric || src.Generic.Auth.Type == AuthHMAC}
	if err := identify(d, r.Header); err != nil {
		return nil, err
	}
	if err := checkJSON(r.Header, body); err != nil {
		return nil, err
	}
	if kind == kiln.SourceGeneric && d.Event == "" {
		d.Event = genericEventFromBody(body)
	}
	if kind == kiln.SourceGeneric && !d.Known() {
		return nil, kiln.Errorf(kiln.CodeInvalid, "event type %q is not one a generic source takes (push or dispatch)", d.Event)
	}
	return d, nil
}

func verify(src *Source, h http.Header, p *payload) error {
	switch src.Kind {
	case kiln.SourceGitHub:
		return verifyPrefixed([]byte(src.GitHub.WebhookSecret), p, HeaderGitHubSignature, h.Get(HeaderGitHubSignature), true)
	case kiln.SourceGitea:
		return verifyGitea([]byte(src.Gitea.WebhookSecret), p, h)
	case kiln.SourceGeneric:
		a := src.Generic.Auth
		switch a.Type {
		case AuthHMAC:
			name := a.Header
			if name == "" {
				name = DefaultSignatureHeader
			}
			return verifyPrefixed([]byte(a.Secret), p, name, h.Get(name), false)
		case AuthBearer:
			return VerifyBearer(a.Token, h.Get("Authorization"))
		}
	}
	return kiln.Errorf(kiln.CodeInternal, "source %s cannot verify webhooks", src.Name)
}

var (
	eventRE    = lazyRegexp(`^[a-z][a-z0-9_.-]{0,63}$`)
	deliveryRE = lazyRegexp(`^[\x21-\x7e]{1,200}$`)
)

// Identify reads a delivery's event type and id from its headers without
// verifying anything, so the server can name a delivery it rejects in the
// event log. generated is true when kiln made the id up (a generic sender
// gave none). Receive calls it after the signature checks out.
func Identify(kind kiln.SourceKind, h http.Header) (event, id string, generated bool, err error) {
	d := &Delivery{Kind: kind}
	err = identify(d, h)
	return d.Event, d.ID, d.GeneratedID, err
}

func identify(d *Delivery, h http.Header) error {
	var eventHdr, idHdrs = "", []string(nil)
	switch d.Kind {
	case kiln.SourceGitHub:
		eventHdr, idHdrs = HeaderGitHubEvent, []string{HeaderGitHubDelivery}
	case kiln.SourceGitea:
		eventHdr, idHdrs = HeaderGiteaEvent, []string{HeaderGiteaDelivery, HeaderForgejoDelivery}
		if h.Get(eventHdr) == "" {
			eventHdr = HeaderForgejoEvent
		}
	case kiln.SourceGeneric:
		eventHdr, idHdrs = HeaderEventType, []string{HeaderDeliveryID, HeaderIdempotencyKey}
	}
	d.Event = h.Get(eventHdr)
	if d.Event == "" && d.Kind != kiln.SourceGeneric {
		return kiln.Errorf(kiln.CodeInvalid, "the %s header is missing", eventHdr)
	}
	if d.Event != "" && !eventRE().MatchString(d.Event) {
		return kiln.Errorf(kiln.CodeInvalid, "the %s header is not an event name", eventHdr)
	}
	for _, name := range idHdrs {
		if v := h.Get(name); v != "" {
			if !deliveryRE().MatchString(v) {
				return kiln.Errorf(kiln.CodeInvalid, "the %s header must be 1 to 200 printable characters without spaces", name)
			}
			d.ID = v
			return nil
		}
	}
	if d.Kind != kiln.SourceGeneric {
		return kiln.Errorf(kiln.CodeInvalid, "the %s header is missing", idHdrs[0])
	}
	d.ID, d.GeneratedID = newDeliveryID(), true
	return nil
}

func checkJSON(h http.Header, body []byte) error {
	if ct := h.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt == "application/x-www-form-urlencoded" {
			return kiln.Errorf(kiln.CodeInvalid, "the body is form-encoded; set the webhook's content type to application/json")
		}
	}
	if !json.Valid(body) {
		return kiln.Errorf(kiln.CodeInvalid, "the body is not valid JSON")
	}
	return nil
}

func genericEventFromBody(body []byte) string {
	var p struct {
		Event string `json:"event"`
	}
	if json.Unmarshal(body, &p) != nil || p.Event == "" {
		return "push"
	}
	return p.Event
}

func newDeliveryID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "kiln-" + hex.EncodeToString(b[:])
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(int(n>>20)) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(int(n>>10)) + " KiB"
	}
	return itoa(int(n)) + " bytes"
}
