package server

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/caches"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kilnci/kiln/internal/cluster"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/fleet"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/metrics"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/scaler"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/web"
)

// Config is the whole server configuration. It is read from, in increasing
// precedence: the defaults below, a YAML file (--config), KILN_* environment
// variables (KILN_<SECTION>_<KEY>, e.g. KILN_AGENTS_ACK_TIMEOUT=5s), and
// command-line flags. docs/configuration.md lists every key; a test keeps the
// two in step.
type Config struct {
	Listen      string `yaml:"listen" doc:"address the HTTP server listens on (API, webhooks, agents at /ws)"`
	DataDir     string `yaml:"data_dir" doc:"directory for the SQLite database, step logs and agent state"`
	Database    string `yaml:"database" doc:"database URL: empty for SQLite in data_dir, or postgres://user:pass@host/db"`
	PublicURL   string `yaml:"public_url" doc:"URL people use to reach this server; used in links posted to forges (default http://<listen>)"`
	AdminToken  string `yaml:"admin_token" doc:"fix an admin token instead of generating the first one (KILN_ADMIN_TOKEN); a new value revokes the old one's token"`
	LocalAgents int    `yaml:"local_agents" doc:"agent processes the server starts on its own host (labels local, OS, arch); 0 turns them off"`

	Log      LogConfig      `yaml:"log"`
	HTTP     HTTPConfig     `yaml:"http"`
	Agents   AgentsConfig   `yaml:"agents"`
	Queue    QueueConfig    `yaml:"queue"`
	Webhooks WebhooksConfig `yaml:"webhooks"`
	Runs     RunsConfig     `yaml:"runs"`
	Metrics  MetricsConfig  `yaml:"metrics"`
	Storage  StorageConfig  `yaml:"storage"`

	// Scalers start agents on demand (docs/scalers.md); ScalerCaps bound
	// them all.
	Scalers    []scaler.Config `yaml:"scalers"`
	ScalerCaps scaler.Caps     `yaml:"scaler_caps"`
	Artifacts  ArtifactsConfig `yaml:"artifacts"`
	Caches     CachesConfig    `yaml:"caches"`
	Retention  RetentionConfig `yaml:"retention"`

	Cluster ClusterConfig `yaml:"cluster"`

	Dashboard DashboardConfig `yaml:"dashboard"`
}

// DashboardConfig configures the web dashboard at / (docs/dashboard.md).
type DashboardConfig struct {
	SessionTTL time.Duration `yaml:"session_ttl" doc:"how long a dashboard login lasts (it also ends at logout and when its token is revoked or expires)"`
}

// ArtifactsConfig bounds the artifacts jobs upload (docs/storage.md).
type ArtifactsConfig struct {
	MaxBytes int64 `yaml:"max_bytes" doc:"the largest artifact kiln stores, in bytes as uploaded (a gzipped tar); a larger upload fails the job"`
}

// CachesConfig bounds the caches jobs save and the wait of a job's
// success for its uploads (docs/storage.md#caches).
type CachesConfig struct {
	MaxBytes            int64         `yaml:"max_bytes" doc:"what one repository's caches may take in all, in bytes as uploaded; past it the least recently used are evicted, and one larger cache is refused"`
	UploadSettleTimeout time.Duration `yaml:"upload_settle_timeout" doc:"how long a job's success waits for the cache and artifact uploads it started before its dependents are released; 0 disables the wait"`
}

// RetentionConfig is how long kiln keeps what it collects; the leader's
// garbage collector deletes what is older (docs/storage.md#retention). 0
// keeps that kind forever.
type RetentionConfig struct {
	Runs       time.Duration `yaml:"runs" doc:"finished runs are deleted this long after they end, with their jobs, logs and artifacts; 0 keeps them"`
	Artifacts  time.Duration `yaml:"artifacts" doc:"artifacts are deleted this long after their upload (before their run, when shorter); 0 keeps them as long as their run"`
	Caches     time.Duration `yaml:"caches" doc:"caches nobody saved or restored for this long are deleted; 0 keeps them (caches.max_bytes still evicts)"`
	Deliveries time.Duration `yaml:"deliveries" doc:"the webhook event log's entries are deleted this long after receipt; redelivery ids are kept for webhooks.dedup_ttl whatever this says; 0 keeps them"`
}

// ClusterConfig configures how servers sharing one PostgreSQL database know
// of each other (docs/configuration.md, "Several servers").
type ClusterConfig struct {
	AdvertiseURL      string        `yaml:"advertise_url" doc:"URL agents reach this server at, listed to them at registration so they fail over to another server (default public_url)"`
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval" doc:"how often this server records that it is alive and renews or seeks the leader lease"`
	DeadAfter         time.Duration `yaml:"dead_after" doc:"a server silent this long is dead: the leader puts its agents' jobs into the recovery window (also the leader lease's TTL)"`
}

// LogConfig configures the server's own structured log.
type LogConfig struct {
	Level  string `yaml:"level" doc:"debug, info, warn or error"`
	Format string `yaml:"format" doc:"text or json"`
}

// HTTPConfig bounds how long a client may hold the HTTP server's
// resources: every request's headers and body, idle keep-alive
// connections, and each write of a response (a deadline per write, so a
// long response its client keeps reading is never cut off). Streamed
// responses (log follows) and agent connections at /ws clear read_timeout,
// which would otherwise end them.
type HTTPConfig struct {
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" doc:"a request's headers must arrive within this"`
	ReadTimeout       time.Duration `yaml:"read_timeout" doc:"a request's headers and body must arrive within this (a slower webhook is cut off)"`
	IdleTimeout       time.Duration `yaml:"idle_timeout" doc:"a keep-alive connection idle this long is closed"`
	WriteTimeout      time.Duration `yaml:"write_timeout" doc:"each write of a response must be taken by the client within this (per write, not for the whole response)"`
}

// The HTTP server's default timeouts (docs/configuration.md).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultWriteTimeout      = 30 * time.Second
)

// AgentsConfig holds every timing and limit of the agent protocol.
type AgentsConfig struct {
	AuthTimeout          time.Duration `yaml:"auth_timeout" doc:"an agent must authenticate this soon after connecting"`
	RegisterTimeout      time.Duration `yaml:"register_timeout" doc:"and register this soon after authenticating"`
	HeartbeatInterval    time.Duration `yaml:"heartbeat_interval" doc:"how often agents send heartbeats (told to them at registration)"`
	UnhealthyAfter       time.Duration `yaml:"unhealthy_after" doc:"an agent silent this long is reported unhealthy"`
	DropAfter            time.Duration `yaml:"drop_after" doc:"an agent silent this long is disconnected and its jobs enter recovery"`
	JobHeartbeatInterval time.Duration `yaml:"job_heartbeat_interval" doc:"how often agents send a heartbeat per running job"`
	StaleAfter           time.Duration `yaml:"stale_after" doc:"a running job without a job heartbeat this long is timed_out_stale"`
	AckTimeout           time.Duration `yaml:"ack_timeout" doc:"an agent must acknowledge a dispatched job this soon, else the job is requeued"`
	RecoveryWindow       time.Duration `yaml:"recovery_window" doc:"how long a started job waits for its lost agent to reconnect"`
	LeaseMargin          time.Duration `yaml:"lease_margin" doc:"an agent stops its jobs this long before the orchestrator could give them to another (see docs/faults.md)"`
	MaxMessageBytes      int           `yaml:"max_message_bytes" doc:"largest WebSocket frame accepted from an agent once it has authenticated (4 KiB before)"`
	MaxUnauthenticated   int           `yaml:"max_unauthenticated" doc:"agent connections that have not authenticated yet, in all; one more is refused with 503"`
	MaxUnauthPerAddress  int           `yaml:"max_unauthenticated_per_address" doc:"agent connections that have not authenticated yet from one remote address"`
	MessagesPerSecond    int           `yaml:"messages_per_second" doc:"sustained frames per second per agent before it is throttled (heartbeats exempt)"`
	BytesPerSecond       int           `yaml:"bytes_per_second" doc:"sustained bytes per second per agent before it is throttled"`
}

// QueueConfig configures the dispatch queue.
type QueueConfig struct {
	MaxAttempts     int           `yaml:"max_attempts" doc:"dispatch attempts before a job fails"`
	Expiry          time.Duration `yaml:"expiry" doc:"a queued job no agent took within this time fails (0: never)"`
	UnroutableGrace time.Duration `yaml:"unroutable_grace" doc:"a queued job no known agent could ever take fails as unroutable after this"`
	SweepInterval   time.Duration `yaml:"sweep_interval" doc:"how often ack deadlines, recovery windows, expiry and run deadlines are checked"`
	RedriveInterval time.Duration `yaml:"redrive_interval" doc:"safety net: how often queued jobs are offered to idle agents again"`
	MaxSpecBytes    int           `yaml:"max_spec_bytes" doc:"largest job spec once its env, matrix values and runs_on are rendered; a larger job fails with the reason"`
}

// WebhooksConfig configures ingress.
type WebhooksConfig struct {
	MaxBodyBytes  int64         `yaml:"max_body_bytes" doc:"largest webhook body accepted (413 above it)"`
	MaxUnverified int           `yaml:"max_unverified" doc:"webhook bodies read at once before their signature is checked; more wait, then get 503"`
	InMemoryBytes int64         `yaml:"in_memory_bytes" doc:"how much of an unverified webhook body is held in memory; the rest is spooled to data_dir/tmp"`
	DedupTTL      time.Duration `yaml:"dedup_ttl" doc:"how long a delivery id is remembered to drop redeliveries"`
	ClaimLease    time.Duration `yaml:"claim_lease" doc:"how long a server holds a delivery it processes; one a crashed server held is taken over after this"`
}

// RunsConfig configures runs.
type RunsConfig struct {
	CancelGrace      time.Duration `yaml:"cancel_grace" doc:"a cancelled job whose agent does not confirm within this is marked cancelled anyway"`
	ScheduleInterval time.Duration `yaml:"schedule_interval" doc:"how often cron schedules are checked for due fires"`
}

// MetricsConfig configures /metrics (docs/metrics.md).
type MetricsConfig struct {
	Listen                string        `yaml:"listen" doc:"serve /metrics on this address only, without a token: bind it to a private address (empty: the main listener, with a token)"`
	RefreshInterval       time.Duration `yaml:"refresh_interval" doc:"how often the queue gauges are read from the database"`
	BackpressureThreshold int           `yaml:"backpressure_threshold" doc:"queued jobs that, two refreshes in a row, log a backpressure warning"`
}

// StorageConfig says where caches, artifacts and archived logs are kept
// (docs/storage.md).
type StorageConfig struct {
	Backend string   `yaml:"backend" doc:"filesystem (in data_dir/storage, this server only) or s3 (shared by every server on the database)"`
	S3      S3Config `yaml:"s3"`
	// LogShipInterval is how often a running step's new log lines go to
	// the s3 backend: what a viewer on another server lags at most, and
	// what a server killed meanwhile holds unshipped until it restarts.
	LogShipInterval time.Duration `yaml:"log_ship_interval" doc:"with s3, how often the new log lines of running steps are shipped to the bucket (a finished step's go at once)"`
}

// S3Config configures the s3 storage backend. The credentials are read
// from the environment variables it names, never from the file.
type S3Config struct {
	Endpoint     string `yaml:"endpoint" doc:"URL of the S3 API, e.g. https://minio.example.com:9000; empty for AWS S3 in storage.s3.region"`
	Bucket       string `yaml:"bucket" doc:"bucket that holds kiln's objects (required for the s3 backend; kiln does not create it)"`
	Region       string `yaml:"region" doc:"region of the bucket"`
	PathStyle    bool   `yaml:"path_style" doc:"address the bucket as endpoint/bucket rather than bucket.endpoint (most stores other than AWS need true)"`
	AccessKeyEnv string `yaml:"access_key_env" doc:"name of the environment variable that holds the access key id"`
	SecretKeyEnv string `yaml:"secret_key_env" doc:"name of the environment variable that holds the secret access key"`
}

// DefaultConfig returns the embedded defaults: everything a newcomer needs.
// Each number is the Default constant of the package that enforces it, so
// a part built without the server has the defaults a server gives it.
func DefaultConfig() Config {
	return Config{
		Listen:      "127.0.0.1:4000",
		DataDir:     "kiln-data",
		LocalAgents: 1,
		Log:         LogConfig{Level: "info", Format: "text"},
		HTTP: HTTPConfig{
			ReadHeaderTimeout: DefaultReadHeaderTimeout, ReadTimeout: DefaultReadTimeout,
			IdleTimeout: DefaultIdleTimeout, WriteTimeout: DefaultWriteTimeout,
		},
		Agents: AgentsConfig{
			AuthTimeout:          proto.DefaultAuthTimeout,
			RegisterTimeout:      proto.DefaultRegisterTimeout,
			HeartbeatInterval:    proto.DefaultHeartbeatInterval,
			UnhealthyAfter:       proto.DefaultUnhealthyAfter,
			DropAfter:            proto.DefaultDropAfter,
			JobHeartbeatInterval: proto.DefaultJobHeartbeatInterval,
			StaleAfter:           store.DefaultStaleAfter,
			AckTimeout:           store.DefaultAckTimeout,
			RecoveryWindow:       store.DefaultRecoveryWindow,
			LeaseMargin:          proto.DefaultLeaseMargin,
			MaxMessageBytes:      proto.MaxFrameBytes,
			MaxUnauthenticated:   fleet.DefaultMaxUnauthenticated,
			MaxUnauthPerAddress:  fleet.DefaultMaxUnauthenticatedPerAddress,
			MessagesPerSecond:    fleet.DefaultMessagesPerSecond,
			BytesPerSecond:       fleet.DefaultBytesPerSecond,
		},
		Queue: QueueConfig{
			MaxAttempts:     store.DefaultMaxAttempts,
			Expiry:          store.DefaultQueueTimeout,
			UnroutableGrace: engine.DefaultUnroutableGrace,
			SweepInterval:   engine.DefaultSweepInterval,
			RedriveInterval: fleet.DefaultRedriveInterval,
			MaxSpecBytes:    engine.DefaultMaxSpecBytes,
		},
		Webhooks: WebhooksConfig{
			MaxBodyBytes:  ingress.DefaultMaxBodyBytes,
			MaxUnverified: ingress.DefaultMaxUnverified,
			InMemoryBytes: forge.DefaultInMemoryBody,
			DedupTTL:      store.DefaultDedupTTL,
			ClaimLease:    ingress.DefaultClaimLease,
		},
		Runs: RunsConfig{
			CancelGrace:      engine.DefaultCancelGrace,
			ScheduleInterval: ingress.DefaultScheduleInterval,
		},
		Metrics: MetricsConfig{
			RefreshInterval:       metrics.DefaultRefreshInterval,
			BackpressureThreshold: metrics.DefaultBackpressureThreshold,
		},
		Cluster: ClusterConfig{
			HeartbeatInterval: cluster.DefaultHeartbeatInterval,
			DeadAfter:         cluster.DefaultDeadAfter,
		},
		Storage: StorageConfig{
			Backend: "filesystem", LogShipInterval: logstore.DefaultShipInterval,
			S3: S3Config{Region: "us-east-1", AccessKeyEnv: "AWS_ACCESS_KEY_ID", SecretKeyEnv: "AWS_SECRET_ACCESS_KEY"},
		},
		Artifacts: ArtifactsConfig{MaxBytes: artifacts.DefaultMaxBytes},
		Caches:    CachesConfig{MaxBytes: caches.DefaultMaxBytes, UploadSettleTimeout: caches.DefaultSettleTimeout},
		Retention: RetentionConfig{Runs: 90 * 24 * time.Hour, Artifacts: 30 * 24 * time.Hour, Caches: 7 * 24 * time.Hour,
			Deliveries: 30 * 24 * time.Hour},
		ScalerCaps: scaler.DefaultCaps(),
		Dashboard:  DashboardConfig{SessionTTL: web.DefaultSessionTTL},
	}
}

// LoadFile overlays a YAML file onto c. Unknown keys are errors, so a typo
// never silently leaves a default in place; each error names the dotted key
// and its line, and suggests the key probably meant (checkYAML).
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, decodeError(err))
	}
	if errs := checkYAML(&doc); len(errs) > 0 {
		return fmt.Errorf("config %s: %w", path, errors.Join(errs...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file is an empty configuration.
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, decodeError(err))
	}
	return nil
}

// LoadEnv overlays KILN_* variables: KILN_<KEY> for top-level keys and
// KILN_<SECTION>_<KEY> for nested ones, upper-cased yaml names.
func (c *Config) LoadEnv(getenv func(string) string) error {
	return eachField(reflect.ValueOf(c).Elem(), "", func(key string, v reflect.Value, _ string) error {
		name := "KILN_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
		raw := getenv(name)
		if raw == "" {
			return nil
		}
		if err := setField(v, raw); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// Set assigns one key by its dotted yaml path, e.g. "agents.ack_timeout".
func (c *Config) Set(key, raw string) error {
	found := false
	err := eachField(reflect.ValueOf(c).Elem(), "", func(k string, v reflect.Value, _ string) error {
		if k != key {
			return nil
		}
		found = true
		return setField(v, raw)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if !found {
		name, prefix := key, ""
		if i := strings.LastIndexByte(key, '.'); i >= 0 {
			name, prefix = key[i+1:], key[:i+1]
		}
		var siblings []string
		for _, k := range allKeys() {
			if rest, ok := strings.CutPrefix(k, prefix); ok && !strings.Contains(rest, ".") {
				siblings = append(siblings, rest)
			}
		}
		return fmt.Errorf("unknown configuration key %q%s", key, closestKey(name, prefix, siblings, allKeys()))
	}
	return nil
}

// Keys lists every configuration key with its doc string, in order.
func Keys() [][2]string {
	var out [][2]string
	c := DefaultConfig()
	_ = eachField(reflect.ValueOf(&c).Elem(), "", func(k string, _ reflect.Value, doc string) error {
		out = append(out, [2]string{k, doc})
		return nil
	})
	return out
}

func eachField(v reflect.Value, prefix string, fn func(key string, v reflect.Value, doc string) error) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := prefix + f.Tag.Get("yaml")
		if f.Type.Kind() == reflect.Slice {
			continue // scalers: a list, set only in the file
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			if err := eachField(v.Field(i), key+".", fn); err != nil {
				return err
			}
			continue
		}
		if err := fn(key, v.Field(i), f.Tag.Get("doc")); err != nil {
			return err
		}
	}
	return nil
}

func setField(v reflect.Value, raw string) error {
	switch {
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%q is not a duration like 30s or 5m", raw)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(raw)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		v.SetBool(b)
	case v.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", raw)
		}
		v.SetFloat(f)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", raw)
		}
		v.SetInt(n)
	default:
		return fmt.Errorf("cannot set a %s from text", v.Kind())
	}
	return nil
}

// Validate checks the configuration and fills what is derived from other
// keys. Its errors are sentences naming the key.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen: %q is not host:port (e.g. 127.0.0.1:4000 or :4000)", c.Listen)
	}
	if c.DataDir == "" {
		add("data_dir must not be empty")
	} else if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	}
	if c.Database != "" && !strings.HasPrefix(c.Database, "postgres://") && !strings.HasPrefix(c.Database, "postgresql://") &&
		!strings.HasPrefix(c.Database, "sqlite://") && !strings.HasPrefix(c.Database, "file:") {
		add("database: %q is neither postgres://… nor sqlite://…", redactURL(c.Database))
	}
	if c.PublicURL == "" {
		host, port, _ := net.SplitHostPort(c.Listen)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "localhost"
		}
		c.PublicURL = "http://" + net.JoinHostPort(host, port)
	} else if u, err := url.Parse(c.PublicURL); err != nil || u.Scheme == "" || u.Host == "" {
		add("public_url: %q is not an absolute URL", c.PublicURL)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if c.LocalAgents < 0 || c.LocalAgents > 64 {
		add("local_agents must be between 0 and 64, got %d", c.LocalAgents)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		add("log.format must be text or json, got %q", c.Log.Format)
	}
	a := c.Agents
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout}, {"http.read_timeout", c.HTTP.ReadTimeout},
		{"http.idle_timeout", c.HTTP.IdleTimeout}, {"http.write_timeout", c.HTTP.WriteTimeout},
		{"agents.auth_timeout", a.AuthTimeout}, {"agents.register_timeout", a.RegisterTimeout},
		{"agents.heartbeat_interval", a.HeartbeatInterval}, {"agents.unhealthy_after", a.UnhealthyAfter},
		{"agents.drop_after", a.DropAfter}, {"agents.job_heartbeat_interval", a.JobHeartbeatInterval},
		{"agents.stale_after", a.StaleAfter}, {"agents.ack_timeout", a.AckTimeout},
		{"agents.recovery_window", a.RecoveryWindow}, {"agents.lease_margin", a.LeaseMargin},
		{"queue.sweep_interval", c.Queue.SweepInterval},
		{"queue.redrive_interval", c.Queue.RedriveInterval}, {"queue.unroutable_grace", c.Queue.UnroutableGrace},
		{"webhooks.dedup_ttl", c.Webhooks.DedupTTL}, {"webhooks.claim_lease", c.Webhooks.ClaimLease},
		{"runs.cancel_grace", c.Runs.CancelGrace},
		{"runs.schedule_interval", c.Runs.ScheduleInterval}, {"metrics.refresh_interval", c.Metrics.RefreshInterval},
		{"cluster.heartbeat_interval", c.Cluster.HeartbeatInterval}, {"cluster.dead_after", c.Cluster.DeadAfter},
	} {
		if d.v <= 0 {
			add("%s must be positive, got %s", d.key, d.v)
		}
	}
	if c.HTTP.ReadTimeout < c.HTTP.ReadHeaderTimeout {
		add("http.read_timeout (%s) must not be shorter than http.read_header_timeout (%s): it includes the headers", c.HTTP.ReadTimeout, c.HTTP.ReadHeaderTimeout)
	}
	if a.DropAfter <= a.HeartbeatInterval {
		add("agents.drop_after (%s) must be longer than agents.heartbeat_interval (%s)", a.DropAfter, a.HeartbeatInterval)
	}
	if c.Cluster.DeadAfter < 3*c.Cluster.HeartbeatInterval {
		add("cluster.dead_after (%s) must be at least three cluster.heartbeat_interval (%s)", c.Cluster.DeadAfter, c.Cluster.HeartbeatInterval)
	}
	if c.Cluster.AdvertiseURL != "" {
		if u, err := url.Parse(c.Cluster.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("cluster.advertise_url: %q is not an http(s) URL", c.Cluster.AdvertiseURL)
		}
		c.Cluster.AdvertiseURL = strings.TrimSuffix(c.Cluster.AdvertiseURL, "/")
	}
	if a.RecoveryWindow <= a.LeaseMargin+2*a.HeartbeatInterval {
		// An agent that lost its connection keeps its jobs for the window
		// minus the margin after its last answered heartbeat, and needs a
		// heartbeat and a ping's wait to notice the loss (B126).
		add("agents.recovery_window (%s) must be longer than agents.lease_margin (%s) plus twice agents.heartbeat_interval (%s)",
			a.RecoveryWindow, a.LeaseMargin, a.HeartbeatInterval)
	}
	if a.StaleAfter <= a.JobHeartbeatInterval {
		add("agents.stale_after (%s) must be longer than agents.job_heartbeat_interval (%s)", a.StaleAfter, a.JobHeartbeatInterval)
	}
	if a.MaxMessageBytes < 64<<10 {
		add("agents.max_message_bytes must be at least 65536, got %d", a.MaxMessageBytes)
	}
	if a.MaxUnauthenticated < 1 || a.MaxUnauthPerAddress < 1 || a.MaxUnauthPerAddress > a.MaxUnauthenticated {
		add("agents.max_unauthenticated_per_address (%d) must be at least 1 and at most agents.max_unauthenticated (%d)", a.MaxUnauthPerAddress, a.MaxUnauthenticated)
	}
	if a.MessagesPerSecond < 1 || a.BytesPerSecond < 1 {
		add("agents.messages_per_second and agents.bytes_per_second must be positive")
	}
	if c.Queue.MaxAttempts < 1 {
		add("queue.max_attempts must be at least 1, got %d", c.Queue.MaxAttempts)
	}
	if c.Queue.MaxSpecBytes < 64<<10 || c.Queue.MaxSpecBytes > 3<<20 {
		add("queue.max_spec_bytes must be between 65536 and 3145728 (a dispatch frame carries the spec, and frames are at most 4 MiB), got %d", c.Queue.MaxSpecBytes)
	}
	if c.Queue.Expiry < 0 {
		add("queue.expiry must not be negative (0 means never)")
	}
	if c.Webhooks.MaxBodyBytes < 1<<10 {
		add("webhooks.max_body_bytes must be at least 1024, got %d", c.Webhooks.MaxBodyBytes)
	}
	if c.Webhooks.MaxUnverified < 1 {
		add("webhooks.max_unverified must be at least 1, got %d", c.Webhooks.MaxUnverified)
	}
	if c.Webhooks.InMemoryBytes < 4<<10 || c.Webhooks.InMemoryBytes > 16<<20 {
		add("webhooks.in_memory_bytes must be between 4096 and 16777216, got %d", c.Webhooks.InMemoryBytes)
	}
	if c.Metrics.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			add("metrics.listen: %q is not host:port (e.g. 127.0.0.1:9464)", c.Metrics.Listen)
		} else if _, port, _ := net.SplitHostPort(c.Metrics.Listen); c.Metrics.Listen == c.Listen && port != "0" {
			add("metrics.listen must differ from listen (leave it empty to serve /metrics on the main listener)")
		}
	}
	if c.Metrics.BackpressureThreshold < 1 {
		add("metrics.backpressure_threshold must be at least 1, got %d", c.Metrics.BackpressureThreshold)
	}
	errs = append(errs, c.Storage.validate()...)
	if c.Artifacts.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("artifacts.max_bytes must be at least 1, got %d", c.Artifacts.MaxBytes))
	}
	if c.Caches.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("caches.max_bytes must be at least 1, got %d", c.Caches.MaxBytes))
	}
	for _, r := range []struct {
		key string
		d   time.Duration
	}{{"retention.runs", c.Retention.Runs}, {"retention.artifacts", c.Retention.Artifacts}, {"retention.caches", c.Retention.Caches}, {"retention.deliveries", c.Retention.Deliveries}} {
		if r.d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", r.key, r.d))
		}
	}
	if c.Caches.UploadSettleTimeout < 0 {
		errs = append(errs, fmt.Errorf("caches.upload_settle_timeout must not be negative, got %s", c.Caches.UploadSettleTimeout))
	}
	if c.Dashboard.SessionTTL < time.Minute || c.Dashboard.SessionTTL > 90*24*time.Hour {
		errs = append(errs, fmt.Errorf("dashboard.session_ttl must be between 1m and 2160h (90 days), got %s", c.Dashboard.SessionTTL))
	}
	errs = append(errs, scaler.Validate(c.Scalers, c.ScalerCaps)...)
	errs = append(errs, unbuiltScalers(c.Scalers)...)
	return errors.Join(errs...)
}

// redactURL hides a password in a database URL before it is printed.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}

// validate checks the storage section; the credentials themselves are
// read and checked when the backend is opened (openStorage).
func (s StorageConfig) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.LogShipInterval <= 0 {
		add("storage.log_ship_interval must be positive, got %s", s.LogShipInterval)
	}
	switch s.Backend {
	case "filesystem":
		return errs
	case "s3":
	default:
		add("storage.backend must be filesystem or s3, got %q", s.Backend)
		return errs
	}
	if s.S3.Bucket == "" || strings.ContainsAny(s.S3.Bucket, "/ ") {
		add("storage.s3.bucket: %q is not a bucket name (storage.backend is s3)", s.S3.Bucket)
	}
	if s.S3.Endpoint != "" {
		if u, err := url.Parse(s.S3.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("storage.s3.endpoint: %q is not an http:// or https:// URL", s.S3.Endpoint)
		}
	}
	if s.S3.Region == "" {
		add("storage.s3.region must not be empty")
	}
	for _, kv := range [][2]string{{"storage.s3.access_key_env", s.S3.AccessKeyEnv}, {"storage.s3.secret_key_env", s.S3.SecretKeyEnv}} {
		if !isEnvName(kv[1]) {
			add("%s: %q is not the name of an environment variable", kv[0], kv[1])
		}
	}
	return errs
}

func isEnvName(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}
