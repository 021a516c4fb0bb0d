package api

// KeyCreatedForTest is what creating a key through s does to its cache.
func KeyCreatedForTest(s *Server, token string) { s.keyCreated(token) }
