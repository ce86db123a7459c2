package workflow

// Location is where an expression stands in a workflow file; it decides
// which contexts the expression may read (docs/workflow.md, "Who evaluates
// what").
type Location int

const (
	// LocWorkflowEnv: workflow env (event, inputs, run).
	LocWorkflowEnv Location = iota
	// LocConcurrencyGroup: concurrency.group (event, inputs, run).
	LocConcurrencyGroup
	// LocJobIf: a job's if: (event, inputs, run, env, needs).
	LocJobIf
	// LocJob: a job's runs_on, exclude_labels, env, container (event,
	// inputs, run, env, matrix, needs).
	LocJob
	// LocMatrixValue: a matrix value (as LocJob, without matrix itself).
	LocMatrixValue
	// LocStepIf: a step's if: (LocJob plus job and the status functions).
	LocStepIf
	// LocStep: a step's env, run, working_directory (LocStepIf's contexts
	// plus hashFiles()).
	LocStep
)
