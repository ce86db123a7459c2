// Package server is kiln's composition root: it reads the configuration,
// opens the store, builds every part of the orchestrator with its
// dependencies, and runs them under one errgroup until the context ends. It
// is the only package that imports everything; the end-to-end tests start it
// for real.
package server
