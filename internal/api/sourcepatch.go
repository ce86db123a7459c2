package api

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
)

// updateSource changes a source with a JSON merge patch (RFC 7386) over
// what POST /api/v1/sources takes: a member replaces the one of that name,
// null removes it, an object is merged member by member, so a secret the
// patch does not name is kept (and one it names is replaced; the answer
// never shows either). The name and the kind cannot change.
func (s *server) updateSource(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	var patch map[string]any
	if err := s.decodeBody(w, r, &patch, false); err != nil {
		return err
	}
	if patch == nil {
		return errorf(codeInvalid, "send a JSON object of the settings to change")
	}
	if field := redactedIn(patch, ""); field != "" {
		return errorf(codeInvalid, "%s is %q, which is how kiln shows a secret it keeps: send the secret itself, or leave %s out to keep it", field, forge.Redaction, field)
	}
	st, err := s.findSource(r.Context(), r.PathValue("name"))
	if err != nil {
		return err
	}
	current, err := ingress.Decode(st)
	if err != nil {
		return err
	}
	for _, k := range []string{"name", "kind"} {
		if v, ok := patch[k]; ok && v != map[string]string{"name": current.Name, "kind": string(current.Kind)}[k] {
			return errorf(codeInvalid, "a source's %s cannot change; remove it and add it again", k)
		}
	}
	req := SourceRequest{Source: *current, ForkPullRequests: st.ForkPullRequests, ForkLabels: st.ForkLabels, PublicBadges: st.PublicBadges}
	doc, err := toDocument(req)
	if err != nil {
		return err
	}
	merged, err := json.Marshal(mergePatch(doc, patch))
	if err != nil {
		return err
	}
	var next SourceRequest
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil {
		return bodyError(err, s.cfg.MaxBodyBytes)
	}
	updated, err := sourceRecord(&next)
	if err != nil {
		return err
	}
	updated.ID = st.ID
	if err := s.DB.Sources().Update(r.Context(), updated); err != nil {
		return err
	}
	after, err := s.DB.Sources().Get(r.Context(), st.ID)
	if err != nil {
		return err
	}
	dto, err := sourceDTO(after)
	if err != nil {
		return err
	}
	if _, ok := patch[string(current.Kind)]; ok {
		dto.Warnings = s.CredentialWarnings(r.Context(), &next.Source)
	}
	writeJSON(w, http.StatusOK, dto)
	return nil
}

// redactedIn names the first member of patch whose value is the redaction
// placeholder, as a dotted path, or returns "".
func redactedIn(patch map[string]any, prefix string) string {
	for k, v := range patch {
		switch pv := v.(type) {
		case string:
			if pv == forge.Redaction {
				return prefix + k
			}
		case map[string]any:
			if f := redactedIn(pv, prefix+k+"."); f != "" {
				return f
			}
		}
	}
	return ""
}

// toDocument is v as a generic JSON object.
func toDocument(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	return doc, json.Unmarshal(b, &doc)
}

// mergePatch applies patch to doc as RFC 7386 says.
func mergePatch(doc, patch map[string]any) map[string]any {
	if doc == nil {
		doc = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(doc, k)
		case map[string]any:
			sub, _ := doc[k].(map[string]any)
			doc[k] = mergePatch(sub, pv)
		default:
			doc[k] = v
		}
	}
	return doc
}
