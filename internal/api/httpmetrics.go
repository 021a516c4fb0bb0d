package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics times every request by the route it matched (its pattern,
// not its path: ids stay out of the labels), method and status class.
type httpMetrics struct {
	seconds *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "agentfleet_http_request_duration_seconds",
		Help: "Time to answer an API request, by route pattern, method and status class; event streams count their whole life.",
		// 1 ms to about 17 min: a submission, a page, an event stream.
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 11),
	}, []string{"route", "method", "code"})}
	if reg != nil {
		if err := reg.Register(m.seconds); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *httpMetrics) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	route := r.Pattern // set by the mux on this request
	if route == "" {
		route = "unmatched"
	}
	m.seconds.WithLabelValues(route, r.Method, strconv.Itoa(sw.status()/100)+"xx").Observe(time.Since(start).Seconds())
}

// statusWriter notes the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Flush keeps event streams streaming through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
