package agent

import "slices"

// Failover between coordinators: register.ack lists the live coordinators
// sharing the orchestrator's database (B147), and a coordinators frame
// replaces the list whenever it changes while the agent is connected
// (B139). The agent keeps the list and, when a connection attempt fails,
// tries the next one, so that the death of its coordinator costs it one
// reconnect, not its jobs.

// maxServers bounds the coordinators an agent remembers.
const maxServers = 16

// target is the URL of the next connection attempt.
func (a *agent) target() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.servers) == 0 {
		return a.url
	}
	return a.servers[a.cur%len(a.servers)]
}

// failed moves the next attempt to the next known coordinator.
func (a *agent) failed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.servers) > 1 {
		a.cur = (a.cur + 1) % len(a.servers)
	}
}

// learn replaces the known coordinators with those a register.ack or a
// coordinators frame listed (made ws URLs; unusable ones skipped), keeping
// the configured URL and the one connected now.
func (a *agent) learn(connected string, coordinators []string) {
	list := []string{a.url}
	seen := map[string]bool{a.url: true}
	add := func(u string) {
		if !seen[u] && len(list) < maxServers {
			seen[u] = true
			list = append(list, u)
		}
	}
	add(connected)
	for _, raw := range coordinators {
		if u, err := ServerURL(raw); err == nil {
			add(u)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.servers = list
	a.cur = 0
	for i, u := range list {
		if u == connected {
			a.cur = i
		}
	}
}

// knownServers is the list the next failed connection moves along.
func (a *agent) knownServers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.servers)
}
