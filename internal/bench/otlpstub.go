package bench

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpStub is a trace collector that keeps nothing: it answers OTLP/HTTP
// trace exports (protobuf) and counts the spans and bytes, so that a
// bench with --trace-stub measures what exporting traces costs the fleet
// and not what a collector costs the machine.
type otlpStub struct {
	ln       net.Listener
	srv      *http.Server
	done     chan struct{}
	requests atomic.Int64
	spans    atomic.Int64
	bytes    atomic.Int64
	bad      atomic.Int64
}

func startOTLPStub() (*otlpStub, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP stub: %w", err)
	}
	s := &otlpStub{ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.export)
	s.srv = &http.Server{Handler: mux}
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the endpoint for OTEL_EXPORTER_OTLP_ENDPOINT.
func (s *otlpStub) URL() string { return "http://" + s.ln.Addr().String() }

// setEnv points this process's tracing, and that of the processes it
// starts, at the stub; restore puts the environment back.
func (s *otlpStub) setEnv() (restore func()) {
	set := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": s.URL(), "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "", "OTEL_TRACES_EXPORTER": "",
	}
	was := map[string]*string{}
	for k, v := range set {
		if old, ok := os.LookupEnv(k); ok {
			was[k] = &old
		} else {
			was[k] = nil
		}
		if v == "" {
			os.Unsetenv(k)
		} else {
			os.Setenv(k, v)
		}
	}
	return func() {
		for k, old := range was {
			if old == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *old)
			}
		}
	}
}

func (s *otlpStub) export(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			s.bad.Add(1)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	data, err := io.ReadAll(body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &req)
	}
	if err != nil {
		s.bad.Add(1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	s.requests.Add(1)
	s.spans.Add(int64(n))
	s.bytes.Add(int64(len(data)))
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// figures are what the stub received so far.
func (s *otlpStub) figures() *TracingFigures {
	return &TracingFigures{Exports: s.requests.Load(), Spans: s.spans.Load(), Bytes: s.bytes.Load(), Refused: s.bad.Load()}
}

func (s *otlpStub) close() {
	_ = s.srv.Close()
	<-s.done
}
