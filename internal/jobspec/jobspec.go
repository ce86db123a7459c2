// Package jobspec is a job's specification as kiln keeps it in the queue.
// The engine writes it when it creates a job and completes it when it
// releases the job; the store keeps it as text it never reads; the fleet
// reads it when it sends the job to an agent. It is a package of its own so
// that the engine and the fleet share these types, instead of agreeing on
// JSON field names, without either importing the other.
package jobspec

import (
	"errors"
	"fmt"

	gojson "github.com/goccy/go-json"

	"github.com/kilnci/kiln/internal/proto"
)

// Job is what the engine stores as a job's spec.
type Job struct {
	// Agent is the job as its agent receives it in job.dispatch, but for
	// the checkout: as far as it is known when the job is created, and
	// complete once the job is released (env, and the run, needs and
	// matrix contexts). Its Checkout is always nil; see Checkout.
	Agent proto.JobSpec `json:"agent"`
	// Checkout says where the job's code lives; nil when the job checks
	// nothing out. The fleet turns it into the agent's checkout when it
	// sends the job, with clone credentials, which are never stored.
	Checkout *Checkout `json:"checkout,omitempty"`
	// Release is what the engine evaluates when the job's needs are met.
	Release Plan `json:"release"`
}

// Checkout is where a job's code lives: the run's source and repository and
// the commit its event named.
type Checkout struct {
	Source     string `json:"source,omitempty"` // the id of the configured source the run came from; "" for none
	Repository string `json:"repository,omitempty"`
	URL        string `json:"url,omitempty"` // the clone URL the event gave
	Ref        string `json:"ref,omitempty"`
	SHA        string `json:"sha,omitempty"`
	// Fork: the code is a fork pull request's, and gets read-only clone
	// credentials at most.
	Fork bool `json:"fork,omitempty"`
}

// Plan is the source text of the expressions the orchestrator evaluates
// when the job's needs are met, kept in the job so that releasing it needs
// no workflow and no I/O inside the store's transaction.
type Plan struct {
	If      string   `json:"if,omitempty"`
	RunsOn  []string `json:"runs_on,omitempty"` // set only when runs_on or exclude_labels hold expressions
	Exclude []string `json:"exclude,omitempty"`
	// CPUs and Memory are the job's resources (a CPU amount like 2000m, a
	// size in bytes, or an expression's source text), set with RunsOn
	// when any of them holds an expression: the requirement is then made
	// at release.
	CPUs        string   `json:"cpus,omitempty"`
	Memory      string   `json:"memory,omitempty"`
	WorkflowEnv []Var    `json:"workflow_env,omitempty"`
	JobEnv      []Var    `json:"job_env,omitempty"`
	Matrix      []Var    `json:"matrix,omitempty"`  // key and value template, in order
	Needs       []string `json:"needs,omitempty"`   // the job ids this job needs
	Timeout     string   `json:"timeout,omitempty"` // a job timeout written as an expression
	Workflow    string   `json:"workflow"`
	// Attempt is the run's attempt: 1, or one more than the run it reruns.
	Attempt int `json:"attempt"`
	// Fork marks a fork pull request's job; ForkLabels are the mandatory
	// agent labels its source lets forks use. Release keeps both on a
	// runs_on it evaluates (kiln.Requirement).
	Fork       bool     `json:"fork,omitempty"`
	ForkLabels []string `json:"fork_labels,omitempty"`
}

// Var is one name and the source text of its value.
type Var struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Encode renders the job for the store. It is encoded with goccy/go-json,
// as protocol frames are, so the agent part can go into job.dispatch as it
// is (proto.EncodeDispatch).
func (j *Job) Encode() ([]byte, error) {
	if j.Agent.Checkout != nil {
		return nil, errors.New("jobspec: the agent's checkout is made when the job is sent, never stored")
	}
	b, err := gojson.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("jobspec: encode %s: %w", j.Agent.Name, err)
	}
	return b, nil
}

// Decode reads a job the engine stored.
func Decode(raw []byte) (Job, error) {
	var j Job
	if err := gojson.Unmarshal(raw, &j); err != nil {
		return Job{}, fmt.Errorf("jobspec: the stored spec does not decode: %w", err)
	}
	return j, nil
}

// Sendable is a stored Job as the fleet reads it to send it: the agent
// part left as the bytes it was stored as, which job.dispatch embeds, and
// where the code lives, from which the fleet makes the agent's checkout.
type Sendable struct {
	Agent    gojson.RawMessage `json:"agent"`
	Checkout *Checkout         `json:"checkout,omitempty"`
}

// DecodeSendable reads what the fleet sends of a stored job.
func DecodeSendable(raw []byte) (Sendable, error) {
	var s Sendable
	if err := gojson.Unmarshal(raw, &s); err != nil {
		return Sendable{}, fmt.Errorf("the stored spec is not JSON: %w", err)
	}
	if len(s.Agent) == 0 || s.Agent[0] != '{' {
		return Sendable{}, errors.New("the stored spec has no agent part")
	}
	return s, nil
}
