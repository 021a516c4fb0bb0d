package rules

import (
	"context"
	"errors"

	"github.com/agentfleet/agentfleet"
	"github.com/agentfleet/agentfleet/internal/store"
)

// errSecretsUnbuilt holds the place of the secrets' store (issue 31's
// h-secstore helper replaces this file); it never lands on main.
var errSecretsUnbuilt = errors.New("secrets: the store part is not built yet")

func (s *Store) SecretPut(ctx context.Context, p store.SecretPutParams) (agentfleet.Secret, error) {
	return agentfleet.Secret{}, errSecretsUnbuilt
}

func (s *Store) SecretGet(ctx context.Context, tenant, name string) (agentfleet.Secret, error) {
	return agentfleet.Secret{}, errSecretsUnbuilt
}

func (s *Store) SecretList(ctx context.Context, tenant string) ([]agentfleet.Secret, error) {
	return nil, errSecretsUnbuilt
}

func (s *Store) SecretDelete(ctx context.Context, tenant, name string) error {
	return errSecretsUnbuilt
}

func (s *Store) SecretSealedList(ctx context.Context, tenant string) ([]store.SealedSecret, error) {
	return nil, errSecretsUnbuilt
}

func (s *Store) SealedList(ctx context.Context, p store.SealedListParams) ([]store.Sealed, error) {
	return nil, errSecretsUnbuilt
}

func (s *Store) SealedReplace(ctx context.Context, p store.SealedReplaceParams) error {
	return errSecretsUnbuilt
}
