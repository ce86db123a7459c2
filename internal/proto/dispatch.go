package proto

import (
	"bytes"
	"fmt"
	"strconv"

	gojson "github.com/goccy/go-json"
)

// EncodeDispatch renders the job.dispatch frame of d whose spec is given
// already encoded — a JobSpec's JSON as goccy/go-json writes it, without a
// checkout — and adds checkout to it (nil: none). The orchestrator keeps
// every queued job's spec encoded, so this sends it without decoding and
// re-encoding it: the frame is byte for byte what Encode makes of d with the
// decoded spec and its checkout (TestEncodeDispatchIsEncode). d.Spec is
// ignored.
func EncodeDispatch(d *Dispatch, spec []byte, checkout *Checkout) ([]byte, error) {
	spec = bytes.TrimSpace(spec)
	if len(spec) < 2 || spec[0] != '{' || spec[len(spec)-1] != '}' {
		return nil, fmt.Errorf("encode %s: the spec is not a JSON object", TypeDispatch)
	}
	var co []byte
	if checkout != nil {
		var err error
		if co, err = gojson.Marshal(checkout); err != nil {
			return nil, fmt.Errorf("encode %s: checkout: %w", TypeDispatch, err)
		}
	}
	jobID, err := gojson.Marshal(d.JobID)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", TypeDispatch, err)
	}
	runID, err := gojson.Marshal(d.RunID)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", TypeDispatch, err)
	}
	out := make([]byte, 0, len(spec)+len(co)+160)
	out = append(out, `{"type":"`+TypeDispatch+`","data":{"job_id":`...)
	out = append(out, jobID...)
	out = append(out, `,"run_id":`...)
	out = append(out, runID...)
	out = append(out, `,"lease_epoch":`...)
	out = strconv.AppendInt(out, d.LeaseEpoch, 10)
	out = append(out, `,"attempt":`...)
	out = strconv.AppendInt(out, int64(d.Attempt), 10)
	out = append(out, `,"spec":`...)
	out = append(out, spec[:len(spec)-1]...)
	if co != nil {
		if len(spec) > 2 {
			out = append(out, ',')
		}
		out = append(out, `"checkout":`...)
		out = append(out, co...)
	}
	out = append(out, "}}}"...)
	if len(out) > MaxFrameBytes {
		return nil, fmt.Errorf("encode %s: frame of %d bytes exceeds %d", TypeDispatch, len(out), MaxFrameBytes)
	}
	return out, nil
}
