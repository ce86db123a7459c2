package scaler

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Webhook headers of the event backend (docs/scalers.md).
const (
	HeaderEvent     = "X-Kiln-Event"
	HeaderDelivery  = "X-Kiln-Delivery"
	HeaderSignature = "X-Kiln-Signature-256"
)

// ScaleUp is the body of a scale-up webhook: start an agent that runs
// `kiln agent --server ServerURL --claim ClaimCode` before ClaimExpiresAt.
type ScaleUp struct {
	Event           string      `json:"event"` // "scale-up"
	Delivery        string      `json:"delivery"`
	Scaler          string      `json:"scaler"`
	AgentID         string      `json:"agent_id"`
	Labels          kiln.Labels `json:"labels"`
	MandatoryLabels kiln.Labels `json:"mandatory_labels"`
	Resources       struct {
		CPUs        float64 `json:"cpus,omitempty"`
		MemoryBytes int64   `json:"memory_bytes,omitempty"`
	} `json:"resources"`
	ServerURL      string    `json:"server_url"`
	ClaimCode      string    `json:"claim_code"`
	ClaimExpiresAt time.Time `json:"claim_expires_at"`
	JobID          string    `json:"job_id,omitempty"`
	RunID          string    `json:"run_id,omitempty"`
}

// ScaleDown is the body of a scale-down webhook: the agent is no longer
// needed (its job ended, it never came, the server shuts down, …).
type ScaleDown struct {
	Event    string `json:"event"` // "scale-down"
	Delivery string `json:"delivery"`
	Scaler   string `json:"scaler"`
	AgentID  string `json:"agent_id"`
	Reason   string `json:"reason"`
}

// Sign is the X-Kiln-Signature-256 of body: sha256= and the hex HMAC-SHA256
// of the body with the secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature reports whether header is body's signature with secret
// (constant time): what a receiver checks before acting on a webhook.
func VerifySignature(secret, body []byte, header string) bool {
	hexSum, ok := strings.CutPrefix(header, "sha256=")
	if !ok || len(hexSum) != 64 || len(secret) == 0 {
		return false
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// EventBackend is the event backend: for cloud autoscaling by the
// operator's own automation. A spawn stores the hash of a fresh claim code
// and POSTs a signed scale-up webhook to the scaler's target_url; whatever
// receives it starts a machine running `kiln agent --claim CODE`, which
// exchanges the code for the agent's token (B148, B149). Removing the
// agent POSTs a scale-down with the reason (B151). The server cannot watch
// the machine: an agent that never registers is failed by the leader's
// reaper once its claim's deadline passes (B150).
type EventBackend struct {
	DB *store.DB
	// Client sends the webhooks (default: 30 s timeout, no redirects).
	Client *http.Client
	// Getenv reads secret_env (default os.Getenv).
	Getenv func(string) string
	Clock  func() time.Time
}

func (b *EventBackend) client() *http.Client {
	if b.Client != nil {
		return b.Client
	}
	return &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (b *EventBackend) now() time.Time {
	if b.Clock != nil {
		return b.Clock()
	}
	return time.Now()
}

// secret reads the scaler's webhook secret.
func (b *EventBackend) secret(c Config) ([]byte, error) {
	get := b.Getenv
	if get == nil {
		get = os.Getenv
	}
	s := get(c.SecretEnv)
	if s == "" {
		return nil, fmt.Errorf("scalers (%s).secret_env: the environment variable %s, which holds the webhook secret, is empty", c.Name, c.SecretEnv)
	}
	return []byte(s), nil
}

// CheckConfig refuses, at start, an event scaler whose secret is missing.
func (b *EventBackend) CheckConfig(c Config) error {
	_, err := b.secret(c)
	return err
}

// Spawn sends the scale-up webhook (B148).
func (b *EventBackend) Spawn(ctx context.Context, req SpawnRequest) (Instance, error) {
	c := req.Scaler
	secret, err := b.secret(c)
	if err != nil {
		return nil, err
	}
	code, err := store.NewClaimCode()
	if err != nil {
		return nil, err
	}
	ttl := c.ClaimTTL
	if ttl <= 0 {
		ttl = DefaultClaimTTL
	}
	expires := b.now().Add(ttl)
	if err := b.DB.Scalers().AddClaim(ctx, store.ScalerClaim{Code: code, AgentID: req.AgentID, Scaler: c.Name,
		ServerURL: req.ServerURL, ExpiresAt: expires}); err != nil {
		return nil, err
	}
	up := ScaleUp{Event: "scale-up", Delivery: uuid.NewString(), Scaler: c.Name, AgentID: req.AgentID,
		Labels: kiln.NewLabels(req.Labels...), MandatoryLabels: kiln.NewLabels(c.MandatoryLabels...),
		ServerURL: req.ServerURL, ClaimCode: code, ClaimExpiresAt: expires.UTC(), JobID: req.JobID, RunID: req.RunID}
	up.Resources.CPUs, up.Resources.MemoryBytes = req.CPUs, req.MemoryBytes
	req.Event(EventProvisioning, "sending the scale-up webhook for "+req.AgentID+" to "+redactURL(c.TargetURL))
	status, err := b.post(ctx, c, secret, up.Event, up.Delivery, up)
	if err != nil {
		return nil, fmt.Errorf("the scale-up webhook to %s failed: %v", redactURL(c.TargetURL), err)
	}
	req.Event(EventReady, fmt.Sprintf("scale-up webhook accepted (HTTP %d); the provisioned agent has until %s to redeem its claim code",
		status, expires.UTC().Format(time.RFC3339)))
	return &eventInstance{b: b, c: c, agentID: req.AgentID, exited: make(chan struct{})}, nil
}

// ScaleDownReason sends the scale-down webhook of an agent (B151).
func (b *EventBackend) ScaleDownReason(ctx context.Context, c Config, agentID, reason string) error {
	secret, err := b.secret(c)
	if err != nil {
		return err
	}
	down := ScaleDown{Event: "scale-down", Delivery: uuid.NewString(), Scaler: c.Name, AgentID: agentID, Reason: reason}
	if _, err := b.post(ctx, c, secret, down.Event, down.Delivery, down); err != nil {
		return fmt.Errorf("the scale-down webhook for %s to %s failed: %v", agentID, redactURL(c.TargetURL), err)
	}
	return nil
}

// post sends one signed webhook; anything but a 2xx answer is an error
// carrying the start of the answer.
func (b *EventBackend) post(ctx context.Context, c Config, secret []byte, event, delivery string, v any) (int, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.TargetURL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("User-Agent", "kiln-scaler")
	hr.Header.Set(HeaderEvent, event)
	hr.Header.Set(HeaderDelivery, delivery)
	hr.Header.Set(HeaderSignature, Sign(secret, body))
	resp, err := b.client().Do(hr)
	if err != nil {
		return 0, rootErr(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		msg := fmt.Sprintf("the receiver answered %s", resp.Status)
		if a := strings.TrimSpace(strings.ToValidUTF8(string(answer), "?")); a != "" {
			msg += ": " + a
		}
		return resp.StatusCode, fmt.Errorf("%s", msg)
	}
	return resp.StatusCode, nil
}

// rootErr drops the method and URL net/http repeats.
func rootErr(err error) error {
	for {
		ue, ok := err.(*url.Error)
		if !ok {
			return err
		}
		err = ue.Err
	}
}

// redactURL is a URL fit for events and logs: no credentials, no query.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the target_url"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// eventInstance is an agent someone else provisions: nothing here to
// watch; Destroy sends the scale-down.
type eventInstance struct {
	b       *EventBackend
	c       Config
	agentID string
	exited  chan struct{}
	once    sync.Once
}

func (e *eventInstance) External() bool          { return true }
func (e *eventInstance) Exited() <-chan struct{} { return e.exited }
func (e *eventInstance) ExitErr() error          { return nil }
func (e *eventInstance) Tail() string            { return "" }

// Destroy sends the scale-down with the reason, once.
func (e *eventInstance) Destroy(ctx context.Context, reason string) error {
	var err error
	e.once.Do(func() {
		defer close(e.exited)
		err = e.b.ScaleDownReason(ctx, e.c, e.agentID, reason)
	})
	return err
}

// external reports whether an instance is provisioned by someone else
// (the event backend): the manager does not wait on it; the reaper does.
func external(inst Instance) bool {
	x, ok := inst.(interface{ External() bool })
	return ok && x.External()
}

// configChecker is a backend that checks, at start, what it needs of a
// scaler's configuration.
type configChecker interface {
	CheckConfig(c Config) error
}
