package executor

// shimArg is the hidden first argument that makes the kiln binary act as a
// step's supervisor (see MaybeRunShim).
const shimArg = "__kiln_step_shim"
