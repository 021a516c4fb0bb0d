package api

import (
	_ "embed"
	"net/http"
	"slices"
)

// openAPIDocument is the OpenAPI 3.1 document of the API, served at
// GET /v1/openapi.json. It is kept by hand: a route added to routes must
// be added to it (TestOpenAPIDocumentsEveryRoute), with the schemas of
// what it answers (the response validation of the tests, internal/api/apitest).
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document of the API.
func OpenAPI() []byte { return slices.Clone(openAPIDocument) }

func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDocument)
}

// routeMux is the server's ServeMux, noting each pattern it is given, so
// a test can hold the routes against the OpenAPI document.
type routeMux struct {
	*http.ServeMux
	patterns []string
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Routes returns the patterns the server registered, in order ("GET
// /v1/runs/{id}", "/" for the catch-all).
func (s *Server) Routes() []string { return slices.Clone(s.mux.patterns) }
