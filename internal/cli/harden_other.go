//go:build !linux

package cli

import "log/slog"

// undumpable does nothing where there is no prctl(PR_SET_DUMPABLE).
func undumpable(*slog.Logger) {}
