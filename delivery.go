package kiln

// SourceKind is the kind of a source: which forge speaks to kiln through
// it. The store keeps it, forge implements each, and the API and CLI name
// it.
type SourceKind string

const (
	SourceGitHub  SourceKind = "github"  // github.com or GitHub Enterprise Server
	SourceGitea   SourceKind = "gitea"   // Gitea or Forgejo
	SourceGeneric SourceKind = "generic" // any sender of a signed JSON webhook, code fetched with git
	SourceLocal   SourceKind = "local"   // a git repository on the server's host
)

// SourceKinds lists every source kind.
var SourceKinds = []SourceKind{SourceGitHub, SourceGitea, SourceGeneric, SourceLocal}

// Valid reports whether k is a known kind.
func (k SourceKind) Valid() bool {
	switch k {
	case SourceGitHub, SourceGitea, SourceGeneric, SourceLocal:
		return true
	}
	return false
}

// DeliveryStatus is where a delivery (a webhook, a kiln trigger push, a
// dispatch) stands in the event log: received until processed, then the
// outcome it ended with.
type DeliveryStatus string

const (
	DeliveryReceived        DeliveryStatus = "received" // recorded, not processed yet
	DeliveryProcessed       DeliveryStatus = "processed"
	DeliveryDuplicate       DeliveryStatus = "duplicate"
	DeliveryNoMatch         DeliveryStatus = "no_match"
	DeliveryInvalidWorkflow DeliveryStatus = "invalid_workflow"
	DeliveryIgnored         DeliveryStatus = "ignored"
	DeliveryFailed          DeliveryStatus = "failed"
	DeliveryPing            DeliveryStatus = "ping"
)
