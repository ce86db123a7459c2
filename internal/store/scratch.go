package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var scratchPrefixRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,30}$`)

// ScratchPostgres creates an empty database on the PostgreSQL server that
// url names, for a tool that needs a fresh kiln database per experiment
// (kiln bench), and returns its URL and a function that drops it. The role
// in url must be allowed to CREATE DATABASE. The name is prefix plus random
// hex, so several tools can share a server.
func ScratchPostgres(ctx context.Context, rawURL, prefix string) (string, func(context.Context) error, error) {
	if !scratchPrefixRE.MatchString(prefix) {
		return "", nil, fmt.Errorf("scratch database prefix %q: use lower-case letters, digits and _", prefix)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", nil, fmt.Errorf("%s is not a postgres:// URL", redact(rawURL))
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	if err := adminExec(ctx, rawURL, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s on %s: %w", name, redact(rawURL), err)
	}
	u.Path = "/" + name
	drop := func(ctx context.Context) error {
		return adminExec(ctx, rawURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// adminExec runs one statement that cannot run in a transaction (CREATE
// and DROP DATABASE) on its own connection.
func adminExec(ctx context.Context, rawURL, sql string) error {
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// redact hides a URL's password for messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "the database URL"
	}
	return u.Redacted()
}
