package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrNoNotifications is Listen's answer on a database without
// notifications (SQLite: one process, nobody else to wake).
var ErrNoNotifications = errors.New("store: this database has no notifications")

// MaxNotifyPayload is the largest payload Notify sends (PostgreSQL's limit
// is 8000 bytes).
const MaxNotifyPayload = 7900

// Notify sends payload on channel to every coordinator listening
// (PostgreSQL NOTIFY); a no-op on SQLite.
func (db *DB) Notify(ctx context.Context, channel, payload string) error {
	if db.dialect.name() != "postgres" {
		return nil
	}
	if len(payload) > MaxNotifyPayload {
		return invalid("a notification payload is at most %d bytes", MaxNotifyPayload)
	}
	_, err := db.write.ExecContext(ctx, "SELECT pg_notify($1, $2)", channel, payload)
	return err
}

// Listen receives the notifications sent on channel, calling fn with each
// payload (on Listen's goroutine, in order), on a connection of its own,
// until ctx ends or the connection fails; ready is called once the LISTEN
// is in place. It returns the error that ended it (ctx's, or the
// connection's: the caller reconnects, and must assume it missed
// notifications meanwhile). ErrNoNotifications on SQLite.
func (db *DB) Listen(ctx context.Context, channel string, ready func(), fn func(payload string)) error {
	if db.dialect.name() != "postgres" {
		return ErrNoNotifications
	}
	cfg, err := pgx.ParseConfig(db.cfg.URL)
	if err != nil {
		return fmt.Errorf("store: parse the PostgreSQL URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("store: connect to listen: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("store: listen on %s: %w", channel, err)
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
