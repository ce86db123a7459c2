package ingress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// headerKind is the delivery header that says which path a delivery takes.
const headerKind = "kind"

// Internal delivery kinds, besides the forge kinds.
const (
	kindTrigger  = "trigger"  // kiln trigger / post-receive hook on a local source
	kindDispatch = "dispatch" // manual dispatch through the API
)

// Webhook serves POST /webhook/{kind}/{source}: it verifies the delivery,
// records it durably, answers 202, and hands it to the processor. Nothing is
// recorded for a request that fails verification: a stranger cannot fill the
// event log, and a forged delivery id cannot poison deduplication (the
// server log says what was refused).
func (p *Processor) Webhook(w http.ResponseWriter, r *http.Request) {
	kind := kiln.SourceKind(r.PathValue("kind"))
	name := r.PathValue("source")
	if !kind.Valid() || kind == kiln.SourceLocal {
		p.refuse(w, kiln.Errorf(kiln.CodeNotFound, "there are no %q webhooks; kinds are github, gitea and generic", kind))
		return
	}
	st, fs, err := p.sources.ByName(r.Context(), name)
	if err != nil {
		p.log.Error("webhook: source lookup failed", "source", name, "err", err)
		p.refuse(w, kiln.Errorf(kiln.CodeUnavailable, "the source could not be read; try again"))
		return
	}
	if fs != nil && fs.Kind != kind {
		fs = nil
	}
	d, err := p.receive(r, kind, fs)
	if err != nil {
		p.log.Warn("webhook refused", "kind", kind, "source", name, "remote", r.RemoteAddr, "err", err)
		p.refuse(w, err)
		return
	}
	dedup := d.ID
	if d.GeneratedID {
		dedup = ""
	}
	var bodyHash string
	if d.Signed { // B116: a signed body replayed under a new delivery id
		sum := sha256.Sum256(d.Body)
		bodyHash = hex.EncodeToString(sum[:])
	}
	nd := store.NewDelivery{
		Source: st.ID, DeliveryID: dedup, BodyHash: bodyHash, Event: d.Event, Body: d.Body,
		Headers: map[string]string{headerKind: string(kind), "delivery": d.ID},
		Owner:   p.owner, ClaimFor: p.cfg.ClaimLease,
	}
	id, dup, err := p.db.Ingress().Record(r.Context(), nd)
	if err != nil {
		p.log.Error("webhook: recording the delivery failed", "source", name, "err", err)
		p.refuse(w, kiln.Errorf(kiln.CodeUnavailable, "the delivery could not be stored; please redeliver"))
		return
	}
	p.recorded(st.Name, d.Event, dup)
	if dup {
		writeJSON(w, http.StatusAccepted, map[string]any{"delivery": id, "duplicate": true})
		return
	}
	p.notify(id, nd)
	writeJSON(w, http.StatusAccepted, map[string]any{"delivery": id, "status": "accepted"})
}

// receive reads and verifies a delivery holding one of the unverified
// slots, so strangers' bodies never hold more than MaxUnverified ×
// InMemoryBytes of memory (B103). A webhook that finds none free within
// UnverifiedWait is answered 503 without its body being read.
func (p *Processor) receive(r *http.Request, kind kiln.SourceKind, fs *forge.Source) (*forge.Delivery, error) {
	if fs != nil && fs.Kind == kind {
		t := time.NewTimer(p.cfg.UnverifiedWait)
		defer t.Stop()
		select {
		case p.unverified <- struct{}{}:
			defer func() { <-p.unverified }()
		case <-t.C:
			return nil, kiln.Errorf(kiln.CodeUnavailable, "too many webhook deliveries are being received at once; redeliver later")
		case <-r.Context().Done():
			return nil, kiln.Errorf(kiln.CodeUnavailable, "the request ended before its body was read")
		}
	}
	return forge.Receive(r, kind, fs, forge.BodyLimits{Max: p.cfg.MaxBodyBytes, InMemory: p.cfg.InMemoryBytes, SpoolDir: p.cfg.SpoolDir})
}

// Unverified is the number of webhook bodies being read and verified now.
func (p *Processor) Unverified() int { return len(p.unverified) }

// refuse answers a webhook request kiln does not record, and tells the
// Refused hook.
func (p *Processor) refuse(w http.ResponseWriter, err error) {
	if p.cfg.Refused != nil {
		p.cfg.Refused(kiln.ErrorCode(err))
	}
	writeError(w, err)
}

func writeError(w http.ResponseWriter, err error) {
	body := kiln.BodyOf(err)
	writeJSON(w, body.Error.Code.HTTPStatus(), body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Debug("write response", "err", err)
	}
}
