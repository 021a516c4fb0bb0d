// Package secrets seals the secrets the store keeps for the fleet (trigger
// secrets, tenants' callback secrets) with AES-256-GCM under the
// operator's key, AGENTFLEET_SECRETS_KEY: the store holds only sealed
// values, so a copy of the database alone gives no secret away.
//
// It knows nothing of what it seals. The associated data binds a sealed
// value to where it is kept (a trigger's id), so a sealed value copied
// into another row does not open there.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// EnvKey is the environment variable that holds the key.
const EnvKey = "AGENTFLEET_SECRETS_KEY"

// KeyLen is the key's length in bytes (AES-256).
const KeyLen = 32

// sealedPrefix marks the format of a sealed value, so a later format
// can be told apart.
const sealedPrefix = "v1:"

// ErrNoKey is returned by a nil *Box: the process has no key.
var ErrNoKey = errors.New("no " + EnvKey + " is set: set it to the base64 of 32 random bytes (openssl rand -base64 32), the same on every dispatcher, and restart")

// Box seals and opens values under one key. A nil *Box has no key: it
// seals and opens nothing (ErrNoKey).
type Box struct {
	aead cipher.AEAD
}

// ParseKey returns the Box of a base64-encoded 32-byte key.
func ParseKey(b64 string) (*Box, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return nil, fmt.Errorf("%s is not base64: make one with: openssl rand -base64 32", EnvKey)
	}
	if len(key) != KeyLen {
		return nil, fmt.Errorf("%s decodes to %d bytes; it must be %d (openssl rand -base64 32)", EnvKey, len(key), KeyLen)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKey, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKey, err)
	}
	return &Box{aead: aead}, nil
}

// NewKey returns a fresh random key, base64-encoded as ParseKey takes it.
func NewKey() string {
	b := make([]byte, KeyLen)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// Seal encrypts plaintext bound to ad (where the value is kept).
func (b *Box) Seal(plaintext, ad string) (string, error) {
	if b == nil {
		return "", ErrNoKey
	}
	nonce := make([]byte, b.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := b.aead.Seal(nonce, nonce, []byte(plaintext), []byte(ad))
	return sealedPrefix + base64.RawStdEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal returned for the same ad. A value sealed
// under another key, or for another ad, or altered, does not open.
func (b *Box) Open(sealed, ad string) (string, error) {
	if b == nil {
		return "", ErrNoKey
	}
	rest, ok := strings.CutPrefix(sealed, sealedPrefix)
	if !ok {
		return "", errors.New("secrets: not a sealed value")
	}
	raw, err := base64.RawStdEncoding.DecodeString(rest)
	n := b.aead.NonceSize()
	if err != nil || len(raw) < n {
		return "", errors.New("secrets: a sealed value is malformed")
	}
	pt, err := b.aead.Open(nil, raw[:n], raw[n:], []byte(ad))
	if err != nil {
		return "", fmt.Errorf("secrets: a sealed value does not open with this %s (another key, or altered)", EnvKey)
	}
	return string(pt), nil
}
