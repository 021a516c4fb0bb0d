package rules

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/agentfleet/agentfleet/internal/store"
	"github.com/agentfleet/agentfleet/internal/store/driver"
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

func (s *Store) TenantCallbackSecretSet(ctx context.Context, p store.TenantCallbackSecretSetParams) error {
	if err := s.d.CallbackSecretUpsert(ctx, p.Tenant, p.Secret, Now()); err != nil {
		return fmt.Errorf("set callback secret of %s: %w", p.Tenant, err)
	}
	return nil
}

func (s *Store) TenantCallbackSecretGet(ctx context.Context, tenant string) (string, error) {
	secret, err := s.d.CallbackSecretGet(ctx, tenant)
	if err != nil {
		return "", fmt.Errorf("get callback secret of %s: %w", tenant, err)
	}
	return secret, nil
}

func (s *Store) RunCallbackCreate(ctx context.Context, p store.RunCallbackCreateParams) (store.RunCallback, error) {
	if err := RunCallbackCreate(p); err != nil {
		return store.RunCallback{}, err
	}
	c, err := s.d.RunCallbackInsert(ctx, p.RunID, p.Tenant, p.URL, Now())
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("create callback of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackGetByID(ctx context.Context, runID string) (store.RunCallback, error) {
	c, err := s.d.RunCallbackGet(ctx, runID)
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("get callback of run %s: %w", runID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackClaim(ctx context.Context, p store.RunCallbackClaimParams) ([]store.RunCallback, error) {
	p, err := RunCallbackClaim(p)
	if err != nil {
		return nil, err
	}
	cs, err := s.d.RunCallbackClaim(ctx, p.Now, p.Now.Add(p.Lease), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("claim run callbacks: %w", err)
	}
	return cs, nil
}

func (s *Store) RunCallbackRecord(ctx context.Context, p store.RunCallbackRecordParams) (store.RunCallback, error) {
	p, err := RunCallbackRecord(p)
	if err != nil {
		return store.RunCallback{}, err
	}
	next := p.NextAt
	if next.IsZero() {
		next = p.Attempt.At
	}
	var c store.RunCallback
	err = s.d.Tx(ctx, func(x driver.Executor) error {
		raw, err := x.RunCallbackLogLock(ctx, p.RunID)
		if err != nil {
			return err
		}
		log, err := AppendCallbackLog(raw, p.Attempt)
		if err != nil {
			return err
		}
		c, err = x.RunCallbackUpdate(ctx, driver.RunCallbackUpdateParams{
			RunID: p.RunID, State: p.State, Log: log, NextAt: next, FirstAt: p.Attempt.At, Now: Now(),
		})
		return err
	})
	if err != nil {
		return store.RunCallback{}, fmt.Errorf("record callback attempt of run %s: %w", p.RunID, err)
	}
	return c, nil
}

func (s *Store) RunCallbackPrune(ctx context.Context, before time.Time) (int, error) {
	n, err := s.d.RunCallbackDeleteOrphans(ctx, Time(before))
	if err != nil {
		return 0, fmt.Errorf("prune run callbacks: %w", err)
	}
	return n, nil
}
