package api

// KeyCreatedForTest is what creating a key through s does to its cache.
func KeyCreatedForTest(s *Server, token string) { s.keyCreated(token) }

// ScopeForTest is the scope a tenant's key needs for the route pattern.
func ScopeForTest(pattern string) string { return scopeFor(pattern) }
