package forge

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// State is a commit status state, as GitHub and Gitea both spell it.
type State string

const (
	StatePending State = "pending"
	StateSuccess State = "success"
	StateFailure State = "failure"
	StateError   State = "error"
)

// Terminal reports whether s is a final state (anything but pending).
func (s State) Terminal() bool { return s == StateSuccess || s == StateFailure || s == StateError }

// Valid reports whether s is a known state.
func (s State) Valid() bool { return s == StatePending || s.Terminal() }

// StateFor maps a run's status onto a commit status state. A cancelled run
// is "error": GitHub and Gitea have no cancelled state, and "failure" would
// claim the code is broken.
func StateFor(st kiln.RunStatus) State {
	switch st {
	case kiln.RunSuccess:
		return StateSuccess
	case kiln.RunFailed:
		return StateFailure
	case kiln.RunCancelled:
		return StateError
	}
	return StatePending
}

// MaxDescription is GitHub's limit on a status description, in characters.
const MaxDescription = 140

// Status is one commit status: kiln posts one per workflow and event, with
// Context "kiln/<workflow> (<event>)".
type Status struct {
	State       State  `json:"state"`
	Context     string `json:"context"`
	Description string `json:"description,omitempty"`
	TargetURL   string `json:"target_url,omitempty"`
	// Check is the check run a GitHub App source with checks on posts
	// instead; other sources post the status and ignore it.
	Check *CheckRun `json:"-"`
}

// normalize validates st and trims the description to MaxDescription
// characters (on a rune boundary, with an ellipsis).
func (st Status) normalize() (Status, error) {
	if !st.State.Valid() {
		return st, kiln.Errorf(kiln.CodeInvalid, "status state %q is not pending, success, failure or error", st.State)
	}
	if st.Context == "" || len(st.Context) > 255 {
		return st, kiln.Errorf(kiln.CodeInvalid, "a status needs a context of 1 to 255 bytes, like kiln/ci")
	}
	if st.TargetURL != "" {
		u, err := url.Parse(st.TargetURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return st, kiln.Errorf(kiln.CodeInvalid, "status target URL %q is not an http(s) URL", st.TargetURL)
		}
	}
	st.Description = strings.Join(strings.Fields(st.Description), " ")
	if utf8.RuneCountInString(st.Description) > MaxDescription {
		r := []rune(st.Description)
		st.Description = string(r[:MaxDescription-1]) + "…"
	}
	return st, nil
}
