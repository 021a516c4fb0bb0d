package rules

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migration is one versioned schema change shipped inside the binary.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations reads NNNN_name.sql files from dir of fsys, in version order.
// Versions must be unique; gaps are allowed (a dropped draft).
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name it NNNN_what.sql with NNNN >= 1", name)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrator is what Migrate needs of a backend: its statements, run in the
// one transaction that applies the migrations (taken so that two
// processes opening one database at once apply each migration once).
type Migrator struct {
	// Exec runs a statement: the bookkeeping table's DDL, a migration.
	Exec func(sql string) error
	// Table creates schema_migrations (version, name, applied_at) when
	// missing.
	Table string
	// Applied reads the versions schema_migrations records.
	Applied func() ([]int, error)
	// Record adds m to schema_migrations, applied now.
	Record func(m Migration, now time.Time) error
}

// Migrate applies the migrations of dir in fsys that schema_migrations
// does not record yet, in version order, recording each.
func Migrate(fsys fs.FS, dir string, m Migrator) error {
	ms, err := Migrations(fsys, dir)
	if err != nil {
		return err
	}
	if err := m.Exec(m.Table); err != nil {
		return err
	}
	versions, err := m.Applied()
	if err != nil {
		return err
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	for _, mg := range ms {
		if applied[mg.Version] {
			continue
		}
		if err := m.Exec(mg.SQL); err != nil {
			return fmt.Errorf("apply %s: %w", mg.Name, err)
		}
		if err := m.Record(mg, Now()); err != nil {
			return fmt.Errorf("record %s: %w", mg.Name, err)
		}
	}
	return nil
}
