package scaler

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/suggest"
)

// Types of scaler. The ones in Runnable have a backend in this build; the
// others are accepted by the schema and refused at start, naming the key.
var Types = []string{"process", "docker", "microvm", "firecracker", "kubernetes", "event"}

// Config is one entry of the server's `scalers:` list (docs/scalers.md).
type Config struct {
	Name string `yaml:"name"`
	Type string `yaml:"type"`
	// Labels are the labels its agents register with; a job is served
	// when it asks for a subset of them (the smallest such set wins).
	Labels kiln.Labels `yaml:"labels"`
	// MandatoryLabels become the agents' mandatory labels: only jobs
	// asking for all of them are served.
	MandatoryLabels kiln.Labels `yaml:"mandatory_labels"`
	// ExcludeLabels: jobs asking for any of these are never served here.
	ExcludeLabels kiln.Labels `yaml:"exclude_labels"`
	MaxAgents     int         `yaml:"max_agents"`
	// MaxConcurrentSpawns bounds the spawns in flight (default 8).
	MaxConcurrentSpawns int `yaml:"max_concurrent_spawns"`
	// SpawnTimeout bounds a spawn, from start to the agent's registration.
	SpawnTimeout time.Duration `yaml:"spawn_timeout"`
	// ServerURL is how its agents reach the server (default public_url).
	ServerURL        string    `yaml:"server_url"`
	WarmPool         WarmPool  `yaml:"warm_pool"`
	DefaultResources Resources `yaml:"default_resources"`
	// ResourceCap bounds what this scaler's agents reserve in all.
	ResourceCap Resources `yaml:"resource_cap"`
	// Env is added to the environment of its agents.
	Env map[string]string `yaml:"env"`

	// process: Binary is the kiln executable (default: the server's).
	Binary string `yaml:"binary"`
	// docker
	Image   string  `yaml:"image"`
	Network string  `yaml:"network"`
	CPUs    float64 `yaml:"cpus"`
	Memory  string  `yaml:"memory"`
	// microvm
	Kernel string `yaml:"kernel"`
	Initrd string `yaml:"initrd"`
	VCPUs  int    `yaml:"vcpus"`
	Accel  string `yaml:"accel"`
	// firecracker
	FirecrackerBinary string        `yaml:"firecracker_binary"`
	Rootfs            string        `yaml:"rootfs"`
	SocketWait        time.Duration `yaml:"socket_wait"`
	// kubernetes (a kiln built with -tags kubernetes): Namespace of the
	// agents' pods (default: the kubeconfig's), PodTemplate a file path or
	// inline YAML of the operator's pod, Kubeconfig the cluster's
	// credentials (default: $KUBECONFIG, ~/.kube/config, else in-cluster).
	// Image is the agent container's image when the template names none.
	Namespace   string `yaml:"namespace"`
	PodTemplate string `yaml:"pod_template"`
	Kubeconfig  string `yaml:"kubeconfig"`
	// event
	TargetURL string        `yaml:"target_url"`
	SecretEnv string        `yaml:"secret_env"`
	ClaimTTL  time.Duration `yaml:"claim_ttl"`
}

// WarmPool keeps Size idle agents ready; idle ones beyond Size are removed
// after IdleTimeout.
type WarmPool struct {
	Size        int           `yaml:"size"`
	IdleTimeout time.Duration `yaml:"idle_timeout"`
}

// Resources is a CPU and memory amount: reserved per agent
// (default_resources) or a budget (resource_cap, scaler_caps).
type Resources struct {
	CPUs   float64 `yaml:"cpus" doc:"CPUs (fractions allowed; 0: not counted)"`
	Memory string  `yaml:"memory" doc:"memory like 512m or 4g (empty: not counted)"`
}

// Caps are the limits over every scaler (the server's scaler_caps).
type Caps struct {
	MaxAgents int     `yaml:"max_agents" doc:"agents all scalers may have at once, spawning ones included"`
	CPUs      float64 `yaml:"cpus" doc:"CPUs the agents of all scalers may reserve in all (0: no budget)"`
	Memory    string  `yaml:"memory" doc:"memory the agents of all scalers may reserve in all, like 64g (empty: no budget)"`
}

// Defaults.
const (
	DefaultMaxConcurrentSpawns = 8
	DefaultSpawnTimeout        = 5 * time.Minute
	DefaultIdleTimeout         = 5 * time.Minute
	DefaultGlobalMaxAgents     = 50
	DefaultClaimTTL            = 5 * time.Minute
)

// DefaultCaps are the caps of a server that sets none.
func DefaultCaps() Caps { return Caps{MaxAgents: DefaultGlobalMaxAgents} }

// UnmarshalYAML decodes one scaler strictly: an unknown key is an error
// naming it and the closest valid key.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if err := strictKeys(n, reflect.TypeOf(*c), "scaler"); err != nil {
		return err
	}
	type plain Config
	return n.Decode((*plain)(c))
}

// UnmarshalYAML decodes the warm pool strictly.
func (w *WarmPool) UnmarshalYAML(n *yaml.Node) error {
	if err := strictKeys(n, reflect.TypeOf(*w), "warm_pool"); err != nil {
		return err
	}
	type plain WarmPool
	return n.Decode((*plain)(w))
}

// UnmarshalYAML decodes resources strictly.
func (r *Resources) UnmarshalYAML(n *yaml.Node) error {
	if err := strictKeys(n, reflect.TypeOf(*r), "resources"); err != nil {
		return err
	}
	type plain Resources
	return n.Decode((*plain)(r))
}

// strictKeys refuses a mapping key that is not a yaml tag of t.
func strictKeys(n *yaml.Node, t reflect.Type, what string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a %s must be a mapping of keys to values", n.Line, what)
	}
	var known []string
	for i := 0; i < t.NumField(); i++ {
		known = append(known, t.Field(i).Tag.Get("yaml"))
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !contains(known, k.Value) {
			msg := fmt.Sprintf("line %d: %s: unknown key %q", k.Line, what, k.Value)
			if s := suggest.Closest(k.Value, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

var (
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// ParseMemory reads a memory size like 512m, 4g or 4GiB as bytes (""
// is 0: not stated); the units are binary (kiln.ParseMemory).
func ParseMemory(s string) (int64, error) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	v, err := kiln.ParseMemory(s)
	if err != nil {
		return 0, fmt.Errorf("%s", kiln.ErrorMessage(err))
	}
	return v, nil
}

// withDefaults fills what the entry leaves out.
func (c Config) withDefaults(publicURL string) Config {
	c.Labels = kiln.NewLabels(c.Labels...)
	c.MandatoryLabels = kiln.NewLabels(c.MandatoryLabels...)
	c.ExcludeLabels = kiln.NewLabels(c.ExcludeLabels...)
	if c.MaxConcurrentSpawns <= 0 {
		c.MaxConcurrentSpawns = DefaultMaxConcurrentSpawns
	}
	if c.SpawnTimeout <= 0 {
		c.SpawnTimeout = DefaultSpawnTimeout
	}
	if c.WarmPool.IdleTimeout <= 0 {
		c.WarmPool.IdleTimeout = DefaultIdleTimeout
	}
	if c.ServerURL == "" {
		c.ServerURL = publicURL
	}
	if c.Type == "event" && c.ClaimTTL <= 0 {
		c.ClaimTTL = DefaultClaimTTL
	}
	return c
}

// Validate checks the scalers and the caps; its errors name the key, as
// scalers[i].key. Overlapping scalers are an error: two scalers whose
// label sets are equal could both serve the same jobs, and which one
// would is nobody's decision.
func Validate(scalers []Config, caps Caps) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if caps.MaxAgents < 0 {
		add("scaler_caps.max_agents must not be negative, got %d", caps.MaxAgents)
	}
	if caps.CPUs < 0 {
		add("scaler_caps.cpus must not be negative")
	}
	if _, err := ParseMemory(caps.Memory); err != nil {
		add("scaler_caps.memory: %v", err)
	}
	seen := map[string]int{}
	sets := map[string]string{}
	for i, c := range scalers {
		key := fmt.Sprintf("scalers[%d]", i)
		if c.Name != "" {
			key = fmt.Sprintf("scalers[%d] (%s)", i, c.Name)
		}
		if !nameRE.MatchString(c.Name) {
			add("%s.name: %q must be lower-case letters, digits and dashes", key, c.Name)
		} else if j, dup := seen[c.Name]; dup {
			add("%s.name: %q is also the name of scalers[%d]", key, c.Name, j)
		}
		seen[c.Name] = i
		if !contains(Types, c.Type) {
			msg := fmt.Sprintf("%s.type: %q is not one of %s", key, c.Type, strings.Join(Types, ", "))
			if s := suggest.Closest(c.Type, Types); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			errs = append(errs, fmt.Errorf("%s", msg))
		}
		if len(c.Labels) == 0 {
			add("%s.labels: a scaler needs at least one label", key)
		}
		for _, ls := range []struct {
			k string
			v kiln.Labels
		}{{"labels", c.Labels}, {"mandatory_labels", c.MandatoryLabels}, {"exclude_labels", c.ExcludeLabels}} {
			if err := kiln.ValidateLabels(ls.v); err != nil {
				add("%s.%s: %v", key, ls.k, err)
			}
		}
		labels := kiln.NewLabels(c.Labels...)
		for _, m := range c.MandatoryLabels {
			if !labels.Has(strings.ToLower(m)) {
				add("%s.mandatory_labels: %q is not among the scaler's labels, so no job could ever ask for it", key, m)
			}
		}
		if c.MaxAgents < 1 {
			add("%s.max_agents must be at least 1, got %d", key, c.MaxAgents)
		}
		if c.MaxConcurrentSpawns < 0 || c.SpawnTimeout < 0 || c.WarmPool.Size < 0 || c.WarmPool.IdleTimeout < 0 {
			add("%s: max_concurrent_spawns, spawn_timeout and warm_pool must not be negative", key)
		}
		if c.WarmPool.Size > c.MaxAgents && c.MaxAgents > 0 {
			add("%s.warm_pool.size (%d) exceeds max_agents (%d)", key, c.WarmPool.Size, c.MaxAgents)
		}
		if c.ServerURL != "" {
			if u, err := url.Parse(c.ServerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" {
				add("%s.server_url: %q is not an http(s):// or ws(s):// URL", key, c.ServerURL)
			}
		}
		for _, r := range []struct {
			k string
			v Resources
		}{{"default_resources", c.DefaultResources}, {"resource_cap", c.ResourceCap}} {
			if r.v.CPUs < 0 || r.v.CPUs > 256 {
				add("%s.%s.cpus must be between 0 and 256", key, r.k)
			}
			if _, err := ParseMemory(r.v.Memory); err != nil {
				add("%s.%s.memory: %v", key, r.k, err)
			}
		}
		if _, err := ParseMemory(c.Memory); err != nil {
			add("%s.memory: %v", key, err)
		}
		if why := tooBig(c, caps, kiln.Resources{}); why != "" {
			add("%s: each agent is given %s, more than a budget allows (%s), so it could never start one", key, given(c, kiln.Resources{}), why)
		}
		errs = append(errs, typeErrors(key, c)...)
		set := labels.Key() + "|" + kiln.NewLabels(c.MandatoryLabels...).Key()
		if other, dup := sets[set]; dup && len(labels) > 0 {
			add("%s.labels: scalers %s and %s have the same labels (%s); a job could be served by either, so give them different labels", key, other, c.Name, labels.Key())
		}
		sets[set] = c.Name
	}
	return errs
}

// typeErrors checks the keys of the entry's type.
func typeErrors(key string, c Config) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Type {
	case "docker":
		if c.Image == "" {
			add("%s.image: a docker scaler needs the agent image", key)
		}
	case "firecracker":
		if c.Kernel == "" || c.Rootfs == "" {
			add("%s: a firecracker scaler needs kernel (an uncompressed vmlinux) and rootfs", key)
		}
		if c.VCPUs < 0 || c.VCPUs > 32 || c.SocketWait < 0 {
			add("%s: vcpus must be between 1 and 32 (0: from the resources) and socket_wait not negative", key)
		}
	case "microvm":
		if c.Kernel == "" || c.Initrd == "" {
			add("%s: a microvm scaler needs kernel and initrd (kiln scalers initramfs builds it)", key)
		}
		if c.Accel != "" && c.Accel != "auto" && c.Accel != "kvm" && c.Accel != "tcg" {
			add("%s.accel: %q is not kvm, tcg or auto", key, c.Accel)
		}
		if c.VCPUs < 0 {
			add("%s.vcpus must not be negative", key)
		}
	case "kubernetes":
		if c.Image == "" && c.PodTemplate == "" {
			add("%s: a kubernetes scaler needs image or a pod_template whose agent container names one", key)
		}
	case "event":
		if u, err := url.Parse(c.TargetURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("%s.target_url: an event scaler needs the http(s):// URL its scale-up webhooks go to", key)
		}
		if c.SecretEnv == "" {
			add("%s.secret_env: an event scaler needs the environment variable holding its webhook secret", key)
		}
	}
	return errs
}
