package loadtest

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq/mqtt/packet"
)

// The slow reader and the canaries speak MQTT with the harness's own
// client: the slow reader decides when it reads, the canaries break the
// protocol's timing on purpose.

// leanConn is a lean-client connection with the record of its end.
type leanConn struct {
	c   *conn
	rec *connRecord
}

// dialLean connects with the harness's client.
func (f *fleet) dialLean(ctx context.Context, rec *connRecord, version byte, cp *packet.Connect) (*leanConn, *packet.Connack, error) {
	if f.subUser != "" {
		cp.HasUsername, cp.Username = true, f.subUser
	}
	if f.subPass != "" {
		cp.HasPassword, cp.Password = true, []byte(f.subPass)
	}
	d := dialer{addr: f.addr, version: version, timeout: soakTimeout}
	c, ack, err := d.connectAck(ctx, cp, 16<<10, rec.setLocal)
	if err != nil {
		return nil, nil, err
	}
	return &leanConn{c: c, rec: rec}, ack, nil
}

// ended records how the connection ended from the error that ended its
// reads (a DISCONNECT read is passed as d).
func (l *leanConn) ended(err error, d *packet.Disconnect) {
	if d != nil {
		l.rec.finish(endServerMsg, byte(d.ReasonCode), d.Properties.ReasonString)
		return
	}
	l.rec.finish(endLost, 0, err.Error())
}

// close sends DISCONNECT and closes the socket.
func (l *leanConn) close() {
	l.rec.harnessCloses()
	l.c.send(&packet.Disconnect{}, true)
	l.c.close()
	l.rec.finish(endHarness, 0, "")
}

// runSlowReader is a persistent QoS 1 subscriber that reads one message
// per slowDelay and now and then stops reading for slowPause (twice the
// write timeout) while its pings go on: the broker must hold its messages
// back behind the inflight window and queue, not drop it.
func (f *fleet) runSlowReader(run, stop context.Context, s subSpec, b *subBook, ready func()) {
	var once sync.Once
	defer once.Do(ready)
	clientID := s.name + f.nameSuffix
	fresh := true
	for attempt := 0; attempt < maxAttempts && stop.Err() == nil; attempt++ {
		rec := &connRecord{client: clientID, role: "subscriber", version: 5, opened: time.Now()}
		f.led.addConn(rec)
		f.led.connected(b)
		cp := &packet.Connect{ClientID: clientID, CleanStart: fresh, KeepAlive: s.keepAlive}
		cp.Properties.SetSessionExpiry(sessionExpiry)
		lc, ack, err := f.dialLean(stop, rec, packet.Version5, cp)
		if err != nil {
			rec.finish(endHarness, 0, "connect failed")
			if stop.Err() == nil {
				f.connectFailures.Add(1)
				f.problem("subscriber %s: %v", s.name, err)
			}
			pause(stop, f.sched.backoff)
			continue
		}
		if !ack.SessionPresent {
			if err := lc.subscribe(f.root+"/"+s.filter, s.qos); err != nil {
				f.problem("subscriber %s: %v", s.name, err)
				lc.close()
				pause(stop, f.sched.backoff)
				continue
			}
		}
		f.led.subscribed(b, ack.SessionPresent, !fresh && !ack.SessionPresent)
		fresh = false
		once.Do(ready)
		if lost := f.readSlowly(run, stop, lc, s, b); !lost {
			return
		}
		f.led.lostConnection(b)
		pause(stop, f.sched.backoff)
	}
}

// subscribe sends SUBSCRIBE and waits for its SUBACK (nothing else
// arrives before it on a new session).
func (l *leanConn) subscribe(filter string, qos byte) error {
	if err := l.c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}}, true); err != nil {
		return err
	}
	l.c.nc.SetReadDeadline(time.Now().Add(soakTimeout))
	p, err := l.c.read()
	l.c.nc.SetReadDeadline(time.Time{})
	if err != nil {
		return err
	}
	if sa, ok := p.(*packet.Suback); !ok || len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] >= 0x80 {
		return errors.New("subscribe " + filter + ": no SUBACK granting it")
	}
	return nil
}

// readSlowly reads the connection slowly until stop ends (it then closes
// it and returns false) or the connection ends (true).
func (f *fleet) readSlowly(run, stop context.Context, lc *leanConn, s subSpec, b *subBook) (lost bool) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // pings every half keep alive, reading or not
		defer wg.Done()
		if s.keepAlive == 0 {
			return
		}
		t := time.NewTicker(time.Duration(s.keepAlive) * time.Second / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if lc.c.send(&packet.Pingreq{}, true) != nil {
					return
				}
			}
		}
	}()
	go func() { // the harness closes the connection when stop ends
		defer wg.Done()
		select {
		case <-done:
		case <-stop.Done():
			lc.close()
		}
	}()
	defer func() { close(done); wg.Wait() }()

	nextPause := time.Now().Add(f.sched.slowPauseEvery)
	for {
		if run.Err() == nil && time.Now().After(nextPause) {
			pause(stop, f.sched.slowPause)
			nextPause = time.Now().Add(f.sched.slowPauseEvery)
		}
		p, err := lc.c.read()
		if err != nil {
			lc.ended(err, nil)
			return stop.Err() == nil
		}
		switch p := p.(type) {
		case *packet.Publish:
			f.led.receive(b, p.Payload, p.QoS, p.Dup)
			if p.QoS > 0 {
				if run.Err() == nil {
					pause(stop, f.sched.slowDelay)
				}
				if err := lc.c.sendAck(packet.PUBACK, p.PacketID, true); err != nil {
					lc.ended(err, nil)
					return stop.Err() == nil
				}
			}
		case *packet.Disconnect:
			lc.ended(nil, p)
			lc.c.close()
			return stop.Err() == nil
		}
	}
}

// canary is a connection the server must close for a stated reason.
type canary struct {
	name     string
	version  byte // 0: no CONNECT at all
	provoked string
}

// soakCanaries are the connections that prove the close accounting: one
// that never sends CONNECT (connect_timeout) and two that send nothing
// after it with a keep alive of 1 s (keepalive_timeout; v5 also gets
// DISCONNECT 0x8D). withLog: the server's log is read (without it, only
// v5 DISCONNECTs explain a close).
func soakCanaries(withLog bool) []canary {
	cs := []canary{{name: "canary-ka-v5", version: 5, provoked: "keepalive_timeout"}}
	if withLog {
		cs = append(cs, canary{name: "canary-ka-v3", version: 4, provoked: "keepalive_timeout"},
			canary{name: "canary-no-connect", provoked: "connect_timeout"})
	}
	return cs
}

// runCanary opens c's connection and waits (at most connectTimeout and
// soakTimeout) for the server to close it.
func (f *fleet) runCanary(ctx context.Context, c canary, connectTimeout time.Duration) {
	rec := &connRecord{client: c.name + f.nameSuffix, role: "canary", version: c.version, opened: time.Now(), provoked: c.provoked}
	f.led.addConn(rec)
	var nc net.Conn
	var lc *leanConn
	if c.version == 0 {
		d := net.Dialer{Timeout: soakTimeout}
		var err error
		if nc, err = d.DialContext(ctx, "tcp", f.addr); err != nil {
			rec.finish(endHarness, 0, "connect failed")
			f.problem("canary %s: %v", c.name, err)
			return
		}
		rec.setLocal(nc.LocalAddr().String())
	} else {
		var err error
		if lc, _, err = f.dialLean(ctx, rec, c.version, &packet.Connect{ClientID: c.name + f.nameSuffix, CleanStart: true, KeepAlive: 1}); err != nil {
			rec.finish(endHarness, 0, "connect failed")
			f.problem("canary %s: %v", c.name, err)
			return
		}
		nc = lc.c.nc
	}
	nc.SetReadDeadline(time.Now().Add(connectTimeout + soakTimeout))
	if lc == nil {
		var b [1]byte
		_, err := nc.Read(b[:])
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			rec.harnessCloses()
		}
		rec.finish(endLost, 0, errString(err))
		nc.Close()
		return
	}
	for {
		p, err := lc.c.read()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				rec.harnessCloses() // the server never closed it: the report says so
			}
			lc.ended(err, nil)
			nc.Close()
			return
		}
		if d, ok := p.(*packet.Disconnect); ok {
			lc.ended(nil, d)
			nc.Close()
			return
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
