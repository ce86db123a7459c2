package kiln

import (
	"strconv"
	"strings"
)

// Resources is an amount of CPU and memory: what a job asks for
// (Requirement.Resources, from its `resources:`) or what a scaler's agent
// was given (AgentLabels.Limit). A zero dimension is not stated: a job
// that states no memory asks for none in particular, an agent without a
// memory limit takes any.
type Resources struct {
	MilliCPUs int64 `json:"millicpus,omitempty"`
	Memory    int64 `json:"memory_bytes,omitempty"`
}

// IsZero reports whether neither dimension is stated.
func (r Resources) IsZero() bool { return r.MilliCPUs == 0 && r.Memory == 0 }

// Within reports whether every dimension r states fits the same dimension
// of limit; a dimension limit does not state has no limit.
func (r Resources) Within(limit Resources) bool {
	return (limit.MilliCPUs == 0 || r.MilliCPUs <= limit.MilliCPUs) && (limit.Memory == 0 || r.Memory <= limit.Memory)
}

// String reads as people write it: "2 CPUs, 4 GiB", "0.5 CPUs", "512 MiB".
func (r Resources) String() string {
	var parts []string
	if r.MilliCPUs > 0 {
		parts = append(parts, FormatCPUs(r.MilliCPUs)+" CPUs")
	}
	if r.Memory > 0 {
		parts = append(parts, FormatMemory(r.Memory))
	}
	if len(parts) == 0 {
		return "no stated resources"
	}
	return strings.Join(parts, ", ")
}

// FormatCPUs writes millicpus as CPUs: 2000 → "2", 500 → "0.5".
func FormatCPUs(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// FormatMemory writes bytes in the largest binary unit that keeps it
// whole or to one decimal: 4<<30 → "4 GiB", 1536<<20 → "1.5 GiB".
func FormatMemory(b int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if b >= 1<<u.shift {
			v := float64(b) / float64(int64(1)<<u.shift)
			if v == float64(int64(v)) || v*10 == float64(int64(v*10)) {
				return strconv.FormatFloat(v, 'f', -1, 64) + " " + u.name
			}
		}
	}
	return strconv.FormatInt(b, 10) + " bytes"
}

// resKeySep starts the resources part of a routing key: jobs asking for
// different resources queue apart, so a scaler reserves, limits and
// explains per key, and an agent with a limit claims only the keys that
// fit it.
const resKeySep = " res:"

func (r Resources) key() string {
	if r.IsZero() {
		return ""
	}
	return resKeySep + strconv.FormatInt(r.MilliCPUs, 10) + "m," + strconv.FormatInt(r.Memory, 10)
}

func parseResourcesKey(s string) Resources {
	cpu, mem, _ := strings.Cut(s, ",")
	var r Resources
	r.MilliCPUs, _ = strconv.ParseInt(strings.TrimSuffix(cpu, "m"), 10, 64)
	r.Memory, _ = strconv.ParseInt(mem, 10, 64)
	return r
}

// resourcesError is an amount that does not read, in a sentence.
func resourcesError(format string, args ...any) error {
	return Errorf(CodeInvalid, format, args...)
}

// ParseCPUs reads a CPU amount as millicpus: a number of CPUs ("2",
// "0.5") or Kubernetes-style millicpus ("500m"); at least 1m and at most
// a million CPUs.
func ParseCPUs(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := 1000.0
	if v, ok := strings.CutSuffix(s, "m"); ok {
		s, mult = v, 1
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v != v || v*mult < 1 || v > 1e6 {
		return 0, resourcesError("%q is not a CPU amount; write it like 2, 0.5 or 500m", strings.TrimSpace(s))
	}
	return int64(v * mult), nil
}

// ParseMemory reads a memory size as bytes. Units are binary whichever way
// they are written: 512m, 512M, 512Mi and 512MiB are all 512 MiB; k, m, g
// and t (a number without a unit is bytes). Fractions are allowed (1.5g).
func ParseMemory(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	t = strings.TrimSuffix(t, "i")
	shift := uint(0)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			shift = 10
		case 'm':
			shift = 20
		case 'g':
			shift = 30
		case 't':
			shift = 40
		}
		if shift > 0 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	bad := resourcesError("%q is not a memory size; write it like 512m, 4g or 4GiB", s)
	if t == "" || strings.ContainsAny(t, "+-eE_xX") || (shift == 0 && strings.HasSuffix(strings.ToLower(strings.TrimSpace(s)), "i")) {
		return 0, bad
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v != v {
		return 0, bad
	}
	v *= float64(uint64(1) << shift)
	if v < 1 || v > 1<<50 {
		return 0, resourcesError("%q is out of range (1 byte to 1 PiB)", s)
	}
	return int64(v), nil
}
