package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Sources keeps the configured forge connections. Every write of a source
// is announced: to this process's WatchSources callbacks, and on
// PostgreSQL to the other servers on SourcesChannel.
type Sources struct{ h handle }

// Source is a configured source. Its secrets (API token, webhook secret,
// clone password) are fields of Config, kept in the database as they are:
// docs/security.md says how the database is protected.
type Source struct {
	ID        string
	Kind      kiln.SourceKind
	Name      string
	Config    json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time
	// ForkPullRequests is what the source does with pull requests from
	// forks ("": kiln.ForkApprove); ForkLabels are the mandatory agent
	// labels their jobs may use.
	ForkPullRequests kiln.ForkPolicy
	ForkLabels       kiln.Labels
	// PublicBadges lets anyone fetch the source's status badges
	// (/badge/{source}/{workflow}.svg) without logging in.
	PublicBadges bool
}

func (s Source) validate() error {
	switch s.Kind {
	case kiln.SourceGitHub, kiln.SourceGitea, kiln.SourceGeneric, kiln.SourceLocal:
	default:
		return invalid("source kind %q is not github, gitea, generic or local", s.Kind)
	}
	if strings.TrimSpace(s.Name) == "" {
		return invalid("a source needs a name")
	}
	if len(s.Config) > 0 && !json.Valid(s.Config) {
		return invalid("the config of source %q is not valid JSON", s.Name)
	}
	if s.ForkPullRequests != "" && !s.ForkPullRequests.Valid() {
		return invalid("fork_pull_requests %q is not approve, run or deny", s.ForkPullRequests)
	}
	return kiln.ValidateLabels(s.ForkLabels)
}

// forkPolicy is the policy to store: approve unless one was given.
func (s Source) forkPolicy() string {
	if s.ForkPullRequests == "" {
		return string(kiln.ForkApprove)
	}
	return string(s.ForkPullRequests)
}

const sourceCols = "id, kind, name, config, created_at, updated_at" + sourceForkCols

const sourceForkCols = ", fork_pull_requests, fork_labels, public_badges"

func scanSource(r interface{ Scan(...any) error }) (Source, error) {
	var s Source
	var config string
	var created, updated sql.NullInt64
	var forkLabels string
	err := r.Scan(&s.ID, &s.Kind, &s.Name, &config, &created, &updated,
		&s.ForkPullRequests, &forkLabels, &s.PublicBadges)
	s.Config, s.CreatedAt, s.UpdatedAt = json.RawMessage(config), fromMS(created), fromMS(updated)
	s.ForkLabels = kiln.ParseLabelsKey(forkLabels)
	return s, err
}

// Create stores a new source (its ID is generated); a taken name is a
// conflict.
func (ss Sources) Create(ctx context.Context, s Source) (Source, error) {
	if err := s.validate(); err != nil {
		return Source{}, err
	}
	id, err := newID()
	if err != nil {
		return Source{}, err
	}
	var out Source
	err = ss.h.write(ctx, func(t *txn) error {
		var n int
		if err := t.queryRow(ctx, "SELECT COUNT(*) FROM sources WHERE name = ?", s.Name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return conflict("a source named %q already exists", s.Name)
		}
		out, err = scanSource(t.queryRow(ctx, "INSERT INTO sources ("+sourceCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING "+sourceCols,
			id, string(s.Kind), s.Name, jsonText(s.Config, "{}"), ms(t.now), ms(t.now),
			s.forkPolicy(), kiln.NewLabels(s.ForkLabels...).Key(), boolInt(s.PublicBadges)))
		if err != nil {
			return err
		}
		return t.sourceWritten(ctx, out.ID)
	})
	return out, err
}

// Get returns a source by id.
func (ss Sources) Get(ctx context.Context, id string) (Source, error) {
	return ss.get(ctx, "id = ?", id)
}

// GetByName returns a source by name.
func (ss Sources) GetByName(ctx context.Context, name string) (Source, error) {
	return ss.get(ctx, "name = ?", name)
}

func (ss Sources) get(ctx context.Context, where string, arg string) (Source, error) {
	s, err := scanSource(ss.h.reader().queryRow(ctx, "SELECT "+sourceCols+" FROM sources WHERE "+where, arg))
	if isNoRows(err) {
		return Source{}, notFound("source %s does not exist", arg)
	}
	return s, err
}

// List lists sources by name.
func (ss Sources) List(ctx context.Context) ([]Source, error) {
	rows, err := ss.h.reader().query(ctx, "SELECT "+sourceCols+" FROM sources ORDER BY name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Source
	for rows.Next() {
		s, err := scanSource(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// Update replaces a source's kind, name, config, fork policy and badge
// visibility.
func (ss Sources) Update(ctx context.Context, s Source) error {
	if err := s.validate(); err != nil {
		return err
	}
	return ss.h.write(ctx, func(t *txn) error {
		var n int
		if err := t.queryRow(ctx, "SELECT COUNT(*) FROM sources WHERE name = ? AND id <> ?", s.Name, s.ID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return conflict("a source named %q already exists", s.Name)
		}
		res, err := t.exec(ctx, "UPDATE sources SET kind = ?, name = ?, config = ?, updated_at = ?"+
			", fork_pull_requests = ?, fork_labels = ?, public_badges = ? WHERE id = ?",
			string(s.Kind), s.Name, jsonText(s.Config, "{}"), ms(t.now),
			s.forkPolicy(), kiln.NewLabels(s.ForkLabels...).Key(), boolInt(s.PublicBadges), s.ID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("source %s does not exist", s.ID)
		}
		return t.sourceWritten(ctx, s.ID)
	})
}

// Delete removes a source.
func (ss Sources) Delete(ctx context.Context, id string) error {
	return ss.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "DELETE FROM sources WHERE id = ?", id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("source %s does not exist", id)
		}
		return t.sourceWritten(ctx, id)
	})
}
