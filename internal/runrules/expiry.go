package runrules

import (
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Expiring is what the expiry rule reads of a queued job whose queue timeout
// passed.
type Expiring struct {
	Requirement kiln.Requirement
	// LastProvisioningError is the last failure a scaler reported for the
	// job ("" when none).
	LastProvisioningError string
	// Unroutable: nothing connected and nothing that could connect offers
	// the requirement.
	Unroutable bool
	// Waited is the job's queue timeout.
	Waited time.Duration
}

// Expired decides a queued job whose queue timeout passed. A recorded
// provisioning failure explains it best: timed_out_stale with that detail,
// which also becomes the run's failure reason. Else a job nothing could
// ever run is unroutable, and any other timed_out_stale with the generic
// queue-timeout message.
func Expired(e Expiring) Outcome {
	switch {
	case e.LastProvisioningError != "":
		return Outcome{Verdict: TimeOut, Reason: e.LastProvisioningError, RunFailure: e.LastProvisioningError}
	case e.Unroutable:
		return Outcome{Verdict: Unroute, Reason: UnroutableMessage(e.Requirement)}
	}
	return Outcome{Verdict: TimeOut, Reason: fmt.Sprintf("queue timeout: no agent took this job within %s", e.Waited.Round(time.Second))}
}

// UnroutableMessage is the error of a job nothing could ever run.
func UnroutableMessage(req kiln.Requirement) string {
	msg := "unroutable: no connected agent and no scaler can offer "
	if len(req.RunsOn) == 0 {
		msg += "an agent without mandatory labels"
	} else {
		msg += "labels " + strings.Join(req.RunsOn, ", ")
	}
	if len(req.Exclude) > 0 {
		msg += " without " + strings.Join(req.Exclude, ", ")
	}
	return msg
}
