package kiln

import (
	"fmt"
	"slices"
	"strings"
)

// Labels is a canonical set of labels: lower-cased, trimmed, without
// duplicates or empty entries, sorted. Canonical sets compare with == on
// their Key and match with plain set operations.
type Labels []string

// MaxLabelLen bounds one label; MaxLabels bounds a set. Both keep the
// dispatch queue's label keys and the registry's indexes small.
const (
	MaxLabelLen = 128
	MaxLabels   = 64
)

// NewLabels canonicalizes raw labels.
func NewLabels(raw ...string) Labels {
	out := make(Labels, 0, len(raw))
	for _, l := range raw {
		l = strings.ToLower(strings.TrimSpace(l))
		if l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ValidateLabels checks labels a stranger sent (an agent's registration, a
// token request): a bounded number of bounded, printable labels without
// commas (the separator of Key).
func ValidateLabels(raw []string) error {
	if len(raw) > MaxLabels {
		return Errorf(CodeInvalid, "too many labels: %d (at most %d)", len(raw), MaxLabels)
	}
	for _, l := range raw {
		if len(l) > MaxLabelLen {
			return Errorf(CodeInvalid, "label %.20q… is longer than %d bytes", l, MaxLabelLen)
		}
		for _, r := range l {
			if r == ',' || r < 0x21 || r == 0x7f {
				return Errorf(CodeInvalid, "label %q contains %q; labels are printable and have no commas or spaces", l, r)
			}
		}
	}
	return nil
}

// Key is the canonical string of the set, labels joined by ",".
func (l Labels) Key() string { return strings.Join(l, ",") }

// ParseLabelsKey is the inverse of Key.
func ParseLabelsKey(key string) Labels {
	if key == "" {
		return Labels{}
	}
	return NewLabels(strings.Split(key, ",")...)
}

// Has reports whether the set holds label (already canonical).
func (l Labels) Has(label string) bool {
	_, ok := slices.BinarySearch(l, label)
	return ok
}

// Contains reports whether every label of sub is in l.
func (l Labels) Contains(sub Labels) bool {
	for _, s := range sub {
		if !l.Has(s) {
			return false
		}
	}
	return true
}

// Intersects reports whether l and other share a label.
func (l Labels) Intersects(other Labels) bool {
	for _, s := range other {
		if l.Has(s) {
			return true
		}
	}
	return false
}

// Union returns the canonical union of l and more.
func (l Labels) Union(more ...string) Labels {
	return NewLabels(append(append([]string(nil), l...), more...)...)
}

// Requirement is what a job asks of an agent: labels it must all carry,
// labels it must carry none of. Its Key is the dispatch queue's routing key,
// so jobs with the same requirement share one index range.
type Requirement struct {
	RunsOn  Labels `json:"runs_on"`
	Exclude Labels `json:"exclude,omitempty"`
	// Fork marks the job of a fork pull request: only agents whose
	// mandatory labels all lie in ForkLabels (the labels its source lets
	// forks use; none by default) may take it.
	Fork       bool   `json:"fork,omitempty"`
	ForkLabels Labels `json:"fork_labels,omitempty"`
	// Resources are the CPU and memory the job asks for (`resources:`):
	// a scaler reserves them and limits its agent to them; an agent with
	// a Limit takes only jobs within it.
	Resources Resources `json:"resources,omitzero"`
}

// forkKeySep starts the fork part of a routing key. A space is in no
// label (ValidateLabels), so it cannot be mistaken for one.
const forkKeySep = " fork:"

// Key is the canonical routing key of the requirement: the runs_on key, and
// when there are exclusions "!" and the exclude key, then " res:" and the
// resources when the job states any; a fork job's key ends
// with " fork:" and the labels its source allows, so fork jobs queue apart
// and every label filter (the claim's, the dispatcher's, the unroutable
// probe's) sees the restriction in the key alone.
func (r Requirement) Key() string {
	k := r.RunsOn.Key()
	if len(r.Exclude) > 0 {
		k += "!" + r.Exclude.Key()
	}
	k += r.Resources.key()
	if r.Fork {
		k += forkKeySep + r.ForkLabels.Key()
	}
	return k
}

// ParseRequirementKey is the inverse of Requirement.Key.
func ParseRequirementKey(key string) Requirement {
	key, fork, isFork := strings.Cut(key, forkKeySep)
	key, res, hasRes := strings.Cut(key, resKeySep)
	runsOn, exclude, _ := strings.Cut(key, "!")
	r := Requirement{RunsOn: ParseLabelsKey(runsOn), Exclude: ParseLabelsKey(exclude)}
	if hasRes {
		r.Resources = parseResourcesKey(res)
	}
	if isFork {
		r.Fork, r.ForkLabels = true, ParseLabelsKey(fork)
	}
	return r
}

// AgentLabels is what an agent offers: its labels and its mandatory labels
// (taints). An agent with mandatory labels only takes jobs that ask for every
// one of them, so a GPU or deploy agent is never used by an ordinary job.
type AgentLabels struct {
	Labels    Labels `json:"labels"`
	Mandatory Labels `json:"mandatory,omitempty"`
	// Limit is what a scaler's agent was given (its container's or VM's
	// size): it takes only jobs whose resources fit. Zero: no limit.
	Limit Resources `json:"limit,omitzero"`
}

// Accepts reports whether an agent offering a can run a job requiring r.
func (a AgentLabels) Accepts(r Requirement) bool {
	return a.Labels.Contains(r.RunsOn) && !a.Labels.Intersects(r.Exclude) && r.RunsOn.Contains(a.Mandatory) &&
		(!r.Fork || r.ForkLabels.Contains(a.Mandatory)) && r.Resources.Within(a.Limit)
}

// Explain says, in a sentence, why an agent does not accept r ("" if it does).
func (a AgentLabels) Explain(r Requirement) string {
	var missing []string
	for _, l := range r.RunsOn {
		if !a.Labels.Has(l) {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("lacks %s", strings.Join(missing, ", "))
	}
	for _, l := range r.Exclude {
		if a.Labels.Has(l) {
			return fmt.Sprintf("carries excluded label %s", l)
		}
	}
	for _, l := range a.Mandatory {
		if !r.RunsOn.Has(l) {
			return fmt.Sprintf("only takes jobs that ask for its mandatory label %s", l)
		}
		if r.Fork && !r.ForkLabels.Has(l) {
			return fmt.Sprintf("has mandatory label %s, which the source does not let fork pull requests use", l)
		}
	}
	if !r.Resources.Within(a.Limit) {
		return fmt.Sprintf("was given %s, less than the job's %s", a.Limit, r.Resources)
	}
	return ""
}
