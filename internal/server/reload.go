package server

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	"github.com/kilnci/kiln/internal/scaler"
)

// reloader applies a configuration read again while the server runs
// (SIGHUP; B227–B229): the scalers: list and scaler_caps take effect at
// once, through the manager, which drops no agent; every other setting
// changed is logged as needing a restart, and keeps its running value. A
// file that does not load or validate changes nothing: its error is logged
// and the running configuration stays.
type reloader struct {
	running Config
	load    func() (Config, error)
	scalers *scaler.Manager
	log     *slog.Logger
}

// run reloads on every signal until ctx ends.
func (r *reloader) run(ctx context.Context, signals <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
			r.reload()
		}
	}
}

func (r *reloader) reload() {
	r.log.Info("reloading the configuration (SIGHUP): scalers and scaler_caps")
	next, err := r.load()
	if err != nil {
		r.log.Error("reload refused: the configuration does not load; the running one is kept", "err", err)
		return
	}
	if err := r.scalers.Reload(next.Scalers, next.ScalerCaps); err != nil {
		r.log.Error("reload refused: the scalers do not validate; the running ones are kept", "err", err)
		return
	}
	r.running.Scalers, r.running.ScalerCaps = next.Scalers, next.ScalerCaps
	if keys := restartKeys(r.running, next); len(keys) > 0 {
		r.log.Warn("reload: these settings changed but take effect only after a restart; they keep their running values",
			"keys", strings.Join(keys, ", "))
	}
}

// restartKeys names the settings whose values differ between a and b,
// without their values (some are secrets). Only the scalers: list is a
// list; every other setting is a key of Keys.
func restartKeys(a, b Config) []string {
	values := func(c Config) map[string]string {
		out := map[string]string{}
		_ = eachField(reflect.ValueOf(&c).Elem(), "", func(key string, f reflect.Value, _ string) error {
			out[key] = fmt.Sprint(f.Interface())
			return nil
		})
		return out
	}
	av, bv := values(a), values(b)
	var keys []string
	for _, key := range Keys() {
		if av[key[0]] != bv[key[0]] {
			keys = append(keys, key[0])
		}
	}
	return keys
}
