package app

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/fleetmq/fleetmq/internal/netlimit"
)

// HealthMux serves /metrics (unless metricsHandler is nil), /livez (the
// process is up) and /readyz (ready reports nil when the service can take
// traffic, or the reason it cannot, which is /readyz's 503 body).
func HealthMux(metricsHandler http.Handler, ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	if metricsHandler != nil {
		mux.Handle("GET /metrics", metricsHandler)
	}
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	return mux
}

// Defaults of the HTTP connection bounds: the HTTP listener never takes
// more than this share of the process's file descriptors, whatever its
// clients do, so MQTT keeps the rest.
const (
	DefaultHTTPMaxConns        = 4096
	DefaultHTTPMaxConnsPerAddr = 256
)

// HTTPLimits bounds an HTTP listener's connections; zero fields take the
// defaults.
type HTTPLimits struct {
	MaxConns        int // open at once
	MaxConnsPerAddr int // open at once from one IP address
}

// withDefaults fills zero fields.
func (lim HTTPLimits) withDefaults() HTTPLimits {
	if lim.MaxConns <= 0 {
		lim.MaxConns = DefaultHTTPMaxConns
	}
	if lim.MaxConnsPerAddr <= 0 {
		lim.MaxConnsPerAddr = DefaultHTTPMaxConnsPerAddr
	}
	return lim
}

// HTTPListener is a started HTTP server.
type HTTPListener struct {
	*http.Server
	Addr string // the bound address
	ln   *netlimit.Listener
}

// Refused counts the connections closed at accept because the listener
// was full (total) or their address had its share (perAddr).
func (l *HTTPListener) Refused() (total, perAddr int64) {
	return l.ln.Refused()
}

// StartHTTP opens the listener first (so a busy port fails at once), then
// serves in the background.
func StartHTTP(addr string, h http.Handler, lim HTTPLimits, log *slog.Logger) (*HTTPListener, error) {
	lim = lim.withDefaults()
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln := netlimit.New(tl, lim.MaxConns, lim.MaxConnsPerAddr)
	hs := &http.Server{Handler: h,
		// A connection is not held by a client that sends slowly, takes
		// nothing or idles: headers within 10 s, the whole request within
		// 30 s, the response within 60 s (a streamed export sets its own
		// deadline per write), and an idle keep-alive closed after 60 s.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	return &HTTPListener{Server: hs, Addr: ln.Addr().String(), ln: ln}, nil
}

// handlePprof serves Go's runtime profiles under /debug/pprof/ (CPU,
// heap, goroutines, mutex and block contention, execution traces).
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
