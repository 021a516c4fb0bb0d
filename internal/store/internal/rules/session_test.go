package rules

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
)

func TestSessionCursor(t *testing.T) {
	at := time.Date(2026, time.December, 4, 1, 2, 3, 456789000, time.UTC)
	c := EncodeSessionCursor(store.Session{ID: "chat-1:x", UpdatedAt: at})
	pos, err := DecodeSessionCursor(c)
	if err != nil || !pos.UpdatedAt.Equal(at) || pos.ID != "chat-1:x" {
		t.Fatalf("round trip: %v %+v", err, pos)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, bad := range map[string]string{
		"not base64":      "%%%",
		"empty":           enc(""),
		"a run cursor":    EncodeCursor(false, 12),
		"no id":           enc("s123:"),
		"no time":         enc("sabc:x"),
		"no separator":    enc("s123"),
		"a NUL in the id": enc("s123:a\x00b"),
	} {
		if _, err := DecodeSessionCursor(bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, _, err := SessionList(store.SessionListParams{Tenant: "t", Limit: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("negative limit: %v", err)
	}
	p, pos, err := SessionList(store.SessionListParams{Tenant: "t"})
	if err != nil || p.Limit != RunListLimitDefault || pos.UpdatedAt.Before(time.Now().AddDate(1000, 0, 0)) || pos.ID != "" {
		t.Errorf("defaults: %v %+v %+v", err, p, pos)
	}
}
