// Package secrets seals every secret the store keeps (tenants' named
// secrets, trigger secrets, tenants' callback secrets) with AES-256-GCM
// under the operator's key, AGENTFLEET_SECRETS_KEY: the store holds only
// sealed values, so a copy of the database alone gives no secret away.
//
// Keys rotate: a sealed value names its key's id, the keys in
// AGENTFLEET_SECRETS_KEY_PREVIOUS still open what they sealed, and a
// rekey (store.Store's SealedList and SealedReplace) seals again under
// the current key whatever Current says is not under it.
//
// It knows nothing of what it seals. The associated data binds a sealed
// value to where it is kept (a trigger's id, SecretAD for a tenant's
// named secret), so a sealed value copied into another row does not
// open there.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// EnvKey is the environment variable that holds the key.
const EnvKey = "AGENTFLEET_SECRETS_KEY"

// KeyLen is the key's length in bytes (AES-256).
const KeyLen = 32

// sealedPrefix marks the format of a sealed value, so a later format
// can be told apart; legacyPrefix is the format before key ids.
const (
	sealedPrefix = "v2:"
	legacyPrefix = "v1:"
)

// EnvKeyPrevious is the environment variable that holds the keys
// replaced by EnvKey (comma-separated): values sealed under them still
// open, and a rekey seals them again under the current key.
const EnvKeyPrevious = "AGENTFLEET_SECRETS_KEY_PREVIOUS"

// ErrNoKey is returned by a nil *Box: the process has no key.
var ErrNoKey = errors.New("no " + EnvKey + " is set: set it to the base64 of 32 random bytes (openssl rand -base64 32), the same on every dispatcher, and restart")

// Box seals under its current key and opens under it or any previous
// key. A nil *Box has no key: it seals and opens nothing (ErrNoKey).
//
// A value is sealed as "v2:<key id>:<base64 nonce+ciphertext>", the key
// id being the first 8 bytes of the key's SHA-256 in hex, so a value
// names the key it opens with and a rekey finds what is not yet under
// the current one. Values sealed before key ids ("v1:") open by trying
// each key.
type Box struct {
	cur  key
	prev []key
}

type key struct {
	id   string
	aead cipher.AEAD
}

// ParseKey returns the Box of a base64-encoded 32-byte key.
func ParseKey(b64 string) (*Box, error) {
	return ParseKeys(b64, "")
}

// ParseKeys returns the Box of the current key and the previous ones
// (comma-separated, as EnvKeyPrevious holds them; empty for none).
func ParseKeys(current, previous string) (*Box, error) {
	cur, err := parseKey(EnvKey, current)
	if err != nil {
		return nil, err
	}
	b := &Box{cur: cur}
	for _, p := range strings.Split(previous, ",") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		k, err := parseKey(EnvKeyPrevious, p)
		if err != nil {
			return nil, err
		}
		if k.id != cur.id {
			b.prev = append(b.prev, k)
		}
	}
	return b, nil
}

func parseKey(env, b64 string) (key, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return key{}, fmt.Errorf("%s is not base64: make one with: openssl rand -base64 32", env)
	}
	if len(raw) != KeyLen {
		return key{}, fmt.Errorf("%s decodes to %d bytes; it must be %d (openssl rand -base64 32)", env, len(raw), KeyLen)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return key{}, fmt.Errorf("%s: %w", env, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return key{}, fmt.Errorf("%s: %w", env, err)
	}
	sum := sha256.Sum256(raw)
	return key{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// NewKey returns a fresh random key, base64-encoded as ParseKey takes it.
func NewKey() string {
	b := make([]byte, KeyLen)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// KeyID is the id of the current key, the one Seal uses.
func (b *Box) KeyID() string {
	if b == nil {
		return ""
	}
	return b.cur.id
}

// KeyIDOf is the id of the key sealed was sealed under, "" for a value
// sealed before key ids or not sealed at all.
func KeyIDOf(sealed string) string {
	rest, ok := strings.CutPrefix(sealed, sealedPrefix)
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return id
}

// Current says whether sealed is sealed under the current key: a rekey
// leaves such a value alone.
func (b *Box) Current(sealed string) bool {
	return b != nil && KeyIDOf(sealed) == b.cur.id
}

// Seal encrypts plaintext bound to ad (where the value is kept) under
// the current key.
func (b *Box) Seal(plaintext, ad string) (string, error) {
	if b == nil {
		return "", ErrNoKey
	}
	nonce := make([]byte, b.cur.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := b.cur.aead.Seal(nonce, nonce, []byte(plaintext), []byte(ad))
	return sealedPrefix + b.cur.id + ":" + base64.RawStdEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal returned for the same ad, under the key it
// names. A value sealed under a key the box does not hold, or for
// another ad, or altered, does not open.
func (b *Box) Open(sealed, ad string) (string, error) {
	if b == nil {
		return "", ErrNoKey
	}
	if rest, ok := strings.CutPrefix(sealed, legacyPrefix); ok {
		for _, k := range b.keys() {
			if pt, err := k.open(rest, ad); err == nil {
				return pt, nil
			}
		}
		return "", fmt.Errorf("secrets: a sealed value does not open with %s or %s (another key, or altered)", EnvKey, EnvKeyPrevious)
	}
	id := KeyIDOf(sealed)
	if id == "" {
		return "", errors.New("secrets: not a sealed value")
	}
	for _, k := range b.keys() {
		if k.id != id {
			continue
		}
		pt, err := k.open(strings.TrimPrefix(sealed, sealedPrefix+id+":"), ad)
		if err != nil {
			return "", err
		}
		return pt, nil
	}
	return "", fmt.Errorf("secrets: a value is sealed under key %s, which neither %s nor %s holds", id, EnvKey, EnvKeyPrevious)
}

func (b *Box) keys() []key {
	return append([]key{b.cur}, b.prev...)
}

func (k key) open(b64, ad string) (string, error) {
	raw, err := base64.RawStdEncoding.DecodeString(b64)
	n := k.aead.NonceSize()
	if err != nil || len(raw) < n {
		return "", errors.New("secrets: a sealed value is malformed")
	}
	pt, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(ad))
	if err != nil {
		return "", fmt.Errorf("secrets: a sealed value does not open with key %s (another place, or altered)", k.id)
	}
	return string(pt), nil
}

// SecretAD is the associated data of a tenant's named secret: a value
// sealed for one tenant's name does not open as another's.
func SecretAD(tenant, name string) string {
	return "secret/" + tenant + "/" + name
}
