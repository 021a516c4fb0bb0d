package rules

import (
	"encoding/json"
	"fmt"

	"github.com/agentfleet/agentfleet/internal/store"
)

// RunCallbackCreate validates p.
func RunCallbackCreate(p store.RunCallbackCreateParams) error {
	if err := CheckID("run id", p.RunID); err != nil {
		return err
	}
	if p.Tenant == "" || p.URL == "" {
		return Invalidf("run callback: tenant and url are required")
	}
	return CheckText("callback_url", p.URL)
}

// RunCallbackClaim validates p and fills its defaults.
func RunCallbackClaim(p store.RunCallbackClaimParams) (store.RunCallbackClaimParams, error) {
	if p.Limit <= 0 || p.Lease <= 0 {
		return p, Invalidf("run callback claim: limit and lease must be positive")
	}
	p.Now = NowOr(p.Now)
	return p, nil
}

// RunCallbackRecord validates p.
func RunCallbackRecord(p store.RunCallbackRecordParams) (store.RunCallbackRecordParams, error) {
	switch p.State {
	case store.CallbackPending, store.CallbackDelivered, store.CallbackFailed:
	default:
		return p, Invalidf("run callback state %q: use pending, delivered or failed", p.State)
	}
	if p.RunID == "" {
		return p, Invalidf("run callback: run id is required")
	}
	p.Attempt.At, p.Attempt.Error = NowOr(p.Attempt.At), Clean(p.Attempt.Error)
	p.NextAt = Time(p.NextAt)
	if p.State == store.CallbackPending && p.NextAt.IsZero() {
		return p, Invalidf("run callback %s: a pending callback needs its next attempt", p.RunID)
	}
	return p, nil
}

// AppendCallbackLog adds an attempt to an encoded log, keeping the last
// store.CallbackLogMax.
func AppendCallbackLog(raw []byte, a store.CallbackAttempt) ([]byte, error) {
	log, err := DecodeCallbackLog(raw)
	if err != nil {
		return nil, err
	}
	log = append(log, a)
	if len(log) > store.CallbackLogMax {
		log = log[len(log)-store.CallbackLogMax:]
	}
	return json.Marshal(log)
}

// DecodeCallbackLog reads an encoded attempt log.
func DecodeCallbackLog(raw []byte) ([]store.CallbackAttempt, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var log []store.CallbackAttempt
	if err := json.Unmarshal(raw, &log); err != nil {
		return nil, fmt.Errorf("decode callback attempts: %w", err)
	}
	for i := range log {
		log[i].At = Time(log[i].At)
	}
	return log, nil
}
