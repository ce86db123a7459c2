package scaler

import (
	"errors"
	"reflect"
	"strings"
)

// Reload replaces the scalers and the caps while the server runs (SIGHUP,
// B227–B229), dropping no agent: a new scaler serves at once; a changed
// one keeps its agents, backoff and reservations, and its new settings
// apply to the agents it starts from now on; a removed one retires — it
// starts nothing more (no job is matched to it, its warm pool is not kept,
// its idle agents are drained) while its agents finish their jobs, is
// listed as retiring, and is forgotten once its last agent is gone. A
// configuration that does not validate, or that this build or a backend
// refuses, changes nothing and is returned.
func (m *Manager) Reload(scalers []Config, caps Caps) error {
	if errs := Validate(scalers, caps); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if caps.MaxAgents == 0 {
		caps.MaxAgents = DefaultGlobalMaxAgents
	}
	next := make([]Config, 0, len(scalers))
	names := map[string]bool{}
	for _, c := range scalers {
		m.mu.Lock()
		c, err := m.prepare(c)
		m.mu.Unlock()
		if err != nil {
			return err
		}
		next = append(next, c)
		names[c.Name] = true
	}
	m.mu.Lock()
	var added, changed, retired []string
	for _, c := range next {
		st, old := m.state[c.Name], m.config(c.Name)
		switch {
		case st == nil:
			m.state[c.Name] = &scalerState{sem: make(chan struct{}, c.MaxConcurrentSpawns)}
			added = append(added, c.Name)
		default:
			if st.retiring || old == nil || !reflect.DeepEqual(*old, c) {
				changed = append(changed, c.Name)
			}
			st.retiring = false
			if cap(st.sem) != c.MaxConcurrentSpawns {
				// Spawns in flight keep the semaphore they took.
				st.sem = make(chan struct{}, c.MaxConcurrentSpawns)
			}
		}
	}
	for _, c := range m.scalers {
		if names[c.Name] {
			continue
		}
		if st := m.state[c.Name]; st != nil && !st.retiring {
			st.retiring = true
			retired = append(retired, c.Name)
		}
		next = append(next, c) // kept, retiring, while it has agents
	}
	m.scalers = next
	m.cfg.Caps = caps
	m.mu.Unlock()
	m.log.Info("scalers reloaded", "added", strings.Join(added, ","), "changed", strings.Join(changed, ","),
		"retiring", strings.Join(retired, ","))
	m.Wake() // the next pass forgets the retired scalers without agents
	return nil
}

// pruneRetired forgets the retiring scalers whose last agent is gone.
func (m *Manager) pruneRetired() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var gone []string
	keep := m.scalers[:0:0]
	for _, c := range m.scalers {
		if m.state[c.Name] != nil && m.state[c.Name].retiring && !m.hasAgentsLocked(c.Name) {
			gone = append(gone, c.Name)
			delete(m.state, c.Name)
			continue
		}
		keep = append(keep, c)
	}
	m.scalers = keep
	for _, name := range gone {
		m.log.Info("scaler retired: its last agent is gone", "scaler", name)
	}
}

// hasAgentsLocked reports whether a scaler still has agents here: started
// by this process, or by its previous one and not yet back or given up.
func (m *Manager) hasAgentsLocked(name string) bool {
	for _, a := range m.agents {
		if a.scaler == name {
			return true
		}
	}
	// Adopted spawns are known by agent id only until they register; a
	// retiring scaler waits for all of them (at most the recovery window).
	return len(m.adopting) > 0
}
