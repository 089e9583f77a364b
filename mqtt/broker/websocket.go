package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

// wsSubprotocols are the WebSocket subprotocol names MQTT clients send:
// "mqtt" (the specifications' name) and "mqttv3.1" (older JavaScript and
// embedded clients). Either carries any MQTT version the broker speaks.
var wsSubprotocols = []string{"mqtt", "mqttv3.1"}

// WebSocketHandler returns an http.Handler that upgrades requests to MQTT
// over WebSocket (binary frames, subprotocol "mqtt" or "mqttv3.1") and
// serves them.
func (s *Server) WebSocketHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			Subprotocols:       wsSubprotocols,
			InsecureSkipVerify: true, // MQTT clients send no Origin a browser policy could check
		})
		if err != nil {
			return // Accept wrote the HTTP error
		}
		if ws.Subprotocol() == "" { // the client offered none of ours
			ws.Close(websocket.StatusPolicyViolation, `subprotocol "mqtt" required`)
			return
		}
		ws.SetReadLimit(int64(s.opts.MaxPacketSize) + 8)
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		s.startConn(&wsConn{Conn: nc, remote: remoteAddr(r)}, listenerKind{websocket: true, tls: r.TLS != nil})
	})
}

// ListenWebSocket serves MQTT over WebSocket on addr at path /mqtt (and /).
func (s *Server) ListenWebSocket(addr string) (net.Listener, error) {
	ln, err := s.listen(addr)
	if err != nil {
		return nil, fmt.Errorf("broker: listen websocket %s: %w", addr, err)
	}
	if err := s.track(ln); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/mqtt", s.WebSocketHandler())
	mux.Handle("/", s.WebSocketHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("websocket listener stopped", "error", err)
		}
	}()
	return ln, nil
}

// wsConn reports the HTTP peer as the remote address.
type wsConn struct {
	net.Conn
	remote net.Addr
}

func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

func remoteAddr(r *http.Request) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		return a
	}
	return &net.TCPAddr{}
}
