// Package pgtest opens Postgres stores for tests, each in a fresh schema of
// the database AGENTFLEET_TEST_DATABASE_URL names, dropped when the test
// ends. Without that variable tests skip, unless
// AGENTFLEET_REQUIRE_INTEGRATION=1 (as in CI), which turns the skip into a
// failure.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentfleet/agentfleet/internal/store/postgres"
)

// Environment variables the helpers read.
const (
	EnvDatabaseURL = "AGENTFLEET_TEST_DATABASE_URL"
	EnvRequire     = "AGENTFLEET_REQUIRE_INTEGRATION"
)

// URL returns the test database URL, or skips (or, when integration is
// required, fails) tb.
func URL(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(EnvDatabaseURL)
	if url == "" {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatalf("%s is unset but %s=1: point it at a Postgres database, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable", EnvDatabaseURL, EnvRequire)
		}
		tb.Skipf("%s is unset: skipping Postgres tests", EnvDatabaseURL)
	}
	return url
}

// Schema returns the test database URL and the name of a fresh schema,
// which Open creates; it is dropped (with everything in it) when tb ends.
func Schema(tb testing.TB) (url, schema string) {
	tb.Helper()
	url = URL(tb)
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema = "aftest_" + hex.EncodeToString(b[:])
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			tb.Errorf("drop test schema %s: %v", schema, err)
		}
	})
	return url, schema
}

// Open opens a store in a fresh schema; it is closed, and the schema
// dropped, when tb ends.
func Open(tb testing.TB) *postgres.Store {
	tb.Helper()
	s, _ := OpenSchema(tb)
	return s
}

// OpenSchema is Open that also names the store's schema.
func OpenSchema(tb testing.TB) (*postgres.Store, string) {
	tb.Helper()
	url, schema := Schema(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
	if err != nil {
		tb.Fatalf("open postgres store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, schema
}

// Exec runs sql in schema (see OpenSchema), for a test that needs the
// database to behave in a way no store method asks of it (a trigger that
// refuses some rows, say).
func Exec(tb testing.TB, schema, sql string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, os.Getenv(EnvDatabaseURL))
	if err != nil {
		tb.Fatalf("connect to run test SQL: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `SET search_path TO `+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("set search_path: %v", err)
	}
	if _, err := c.Exec(ctx, sql); err != nil {
		tb.Fatalf("run test SQL: %v", err)
	}
}
