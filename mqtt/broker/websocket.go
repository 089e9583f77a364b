package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

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
		// NetConn lifts the library's read limit per message: MQTT packets
		// may span messages and a message may hold many packets
		// [MQTT-6.0.0-2], and the reader streams them, so the packet's
		// fixed header is what is held to MaxPacketSize (0x95), as on TCP.
		nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
		raw, _ := r.Context().Value(rawConnKey{}).(net.Conn)
		s.startConn(&wsConn{Conn: nc, ws: ws, raw: raw, remote: remoteAddr(r)}, listenerKind{websocket: true, tls: r.TLS != nil})
	})
}

// rawConnKey is the request context key of the network connection under
// a WebSocket (set by ListenWebSocket's HTTP server), which wsConn.Close
// closes at once.
type rawConnKey struct{}

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
	// An HTTP connection is a stranger until its upgrade: one that sends
	// no request, or waits after one that was not an upgrade (an HTTP
	// keep-alive), is closed within the connect timeout, and the server's
	// Close ends those it still has (an upgraded one is an MQTT connection,
	// the server's own).
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: s.opts.ConnectTimeout, IdleTimeout: s.opts.ConnectTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, rawConnKey{}, c)
		}}
	context.AfterFunc(s.life, func() { hs.Close() })
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("websocket listener stopped", "error", err)
		}
	}()
	return ln, nil
}

// wsConn is an MQTT connection over a WebSocket: it reports the HTTP peer
// as the remote address, half-closes with the close frame and closes at
// once.
type wsConn struct {
	net.Conn // websocket.NetConn of ws
	ws       *websocket.Conn
	raw      net.Conn // the connection under ws; nil if unknown
	remote   net.Addr
}

func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

// CloseWrite sends the close frame (status 1000) and lets the WebSocket
// library wait for the client's: what the client sends meanwhile is still
// read (and drained) by the connection's reader, and a client that
// answers the close frame ends the stream (io.EOF). The drain's deadline
// or Close ends the wait.
func (c *wsConn) CloseWrite() error {
	go c.ws.Close(websocket.StatusNormalClosure, "")
	return nil
}

// Close closes the connection under the WebSocket first, when known, so
// that it does not wait for a close handshake (the library's waits up to
// 5 seconds per step): a close by the server is a close now, bounded by
// the watchdog and the drain, not by the client.
func (c *wsConn) Close() error {
	if c.raw != nil {
		closeNow(c.raw)
	}
	return c.Conn.Close()
}

func remoteAddr(r *http.Request) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		return a
	}
	return &net.TCPAddr{}
}
