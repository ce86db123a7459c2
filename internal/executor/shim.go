package executor

// shimArg is the hidden first argument that makes the kiln binary act as a
// step's supervisor (see MaybeRunShim).
const shimArg = "__kiln_step_shim"

// probeArg is the command of the supervisor the executor starts to learn
// whether steps can be isolated: the kiln binary exits 0 at once.
const probeArg = "__kiln_isolation_probe"
