package app

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
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

// StartHTTP opens the listener first (so a busy port fails at once), then
// serves in the background. It returns the bound address.
func StartHTTP(addr string, h http.Handler, log *slog.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
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
	return hs, ln.Addr().String(), nil
}
