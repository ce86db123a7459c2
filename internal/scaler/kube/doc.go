// Package kube is the kubernetes scaler backend: each agent is a pod,
// created, watched and deleted through client-go (docs/scalers.md).
//
// client-go adds about 30 MB to the kiln binary, so everything but this
// comment is behind the `kubernetes` build tag: a kiln built without it
// refuses a `type: kubernetes` scaler at start, saying how to build one
// with it (go build -tags kubernetes ./cmd/kiln). Its tests run against an
// httptest server speaking the pods API's wire format, not a real cluster.
package kube
