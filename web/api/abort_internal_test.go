package api

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmq/fleetmq/internal/netlimit"
)

// TestResetConnUnderTheListenersWrapper: a connection accepted by the
// HTTP listener (netlimit's wrapper around the TCP connection) is reset
// by resetConn, not closed in order: the peer reads ECONNRESET, not EOF,
// and the listener has the connection's place back.
func TestResetConnUnderTheListenersWrapper(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := netlimit.New(tl, 1, 1)
	defer ln.Close()
	accept := func() net.Conn {
		t.Helper()
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := ln.Accept(); ch <- res{c, err} }()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatal(r.err)
			}
			return r.c
		case <-time.After(5 * time.Second):
			t.Fatal("no connection accepted")
			return nil
		}
	}
	for range 2 { // the second is accepted only if the first gave its place back
		client, err := net.Dial("tcp", tl.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server := accept()
		if _, ok := server.(*net.TCPConn); ok {
			t.Fatal("the listener gave a bare TCP connection: the test does not cover the wrapper")
		}
		server.Write([]byte("part of a body"))
		resetConn(server)
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(client)
		client.Close()
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the peer of a reset connection read: %v; want ECONNRESET", err)
		}
	}
}
