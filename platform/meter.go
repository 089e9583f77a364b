package platform

import (
	"github.com/fleetmq/fleetmq"

	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Meter counts usage in memory on the message path (atomics reached through
// a pointer the session holds, no map lookup and no lock per message) and
// hands the increments to a flush function periodically.
type Meter struct {
	mu       sync.Mutex
	accounts map[string]*accountMeter
	clients  map[clientKey]*clientMeter
}

type clientKey struct{ account, client string }

// dayCounters are one UTC day's counters.
type dayCounters struct {
	day       int64 // days since the Unix epoch; fixed
	messages  [3]atomic.Int64
	bytes     [3]atomic.Int64
	poolUsed  atomic.Int64
	demotions atomic.Int64
	refused   atomic.Int64
	drops     [8]atomic.Int64 // by broker.DropReason
	// demoted is when the day's QoS 2 pool ran out (Unix microseconds,
	// the earliest noted; 0: not since the last collect).
	demoted atomic.Int64
}

// demotedSince notes that the day's QoS 2 pool ran out at t.
func (c *dayCounters) demotedSince(t time.Time) {
	c.noteDemoted(t.UnixMicro())
}

func (c *dayCounters) noteDemoted(us int64) {
	for {
		cur := c.demoted.Load()
		if us <= 0 || cur != 0 && cur <= us || c.demoted.CompareAndSwap(cur, us) {
			return
		}
	}
}

type accountMeter struct {
	id   string
	days dayPair[dayCounters, *dayCounters]
}

type clientMeter struct {
	account, client string
	// days are the increments since the last Collect.
	days dayPair[dayMix, *dayMix]
	// today are the day's totals for the live view (never collected).
	today dayPair[dayMix, *dayMix]
	// lastPublish is the time of the last accepted PUBLISH (Unix ns).
	lastPublish atomic.Int64
	// live is the client's connection state (connect and disconnect only).
	live clientLive
}

// dayMix counts messages by effective QoS for one UTC day.
type dayMix struct {
	day      int64 // fixed
	messages [3]atomic.Int64
}

func (c *dayCounters) dayOf() int64   { return c.day }
func (c *dayCounters) setDay(d int64) { c.day = d }
func (c *dayMix) dayOf() int64        { return c.day }
func (c *dayMix) setDay(d int64)      { c.day = d }

// dayPair holds the counters of the current UTC days in two slots (day %
// 2), with no lock on the message path. Each slot points to the counters
// of one day, whose day never changes: the first increment of a new day
// installs fresh counters in the slot (one allocation a day), so an
// increment made at the rollover is never wiped, and a flush reports
// every increment under its own day. Counters replaced while they may
// still hold increments not collected yet (a flush that failed for a
// day) are kept in retired until the next collect, unless forget is set
// (counters no flush collects, such as the live view's).
type dayPair[T any, P interface {
	*T
	dayOf() int64
	setDay(int64)
}] struct {
	slots   [2]atomic.Pointer[T]
	forget  bool
	mu      sync.Mutex // guards retired
	retired []*T
	// claimed, when set (tests), runs right after a slot is claimed for
	// a new day.
	claimed func()
}

// at returns the counters of day d, claiming their slot when it held an
// older day. A day older than its slot's (a late caller, two days late)
// gets counters of its own, collected with the retired ones.
func (p *dayPair[T, P]) at(d int64) *T {
	s := &p.slots[d%2]
	for {
		cur := s.Load()
		if cur != nil {
			switch held := P(cur).dayOf(); {
			case held == d:
				return cur
			case held > d:
				return p.past(d)
			}
		}
		n := new(T)
		P(n).setDay(d)
		if s.CompareAndSwap(cur, n) {
			if cur != nil && !p.forget {
				p.mu.Lock()
				p.retired = append(p.retired, cur)
				p.mu.Unlock()
			}
			if p.claimed != nil {
				p.claimed()
			}
			return n
		}
	}
}

// past returns retired counters of day d (new ones when there are none).
func (p *dayPair[T, P]) past(d int64) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.retired {
		if P(r).dayOf() == d {
			return r
		}
	}
	n := new(T)
	P(n).setDay(d)
	if !p.forget {
		p.retired = append(p.retired, n)
	}
	return n
}

// peek returns the counters of day d, or nil when its slot holds another
// day (nothing counted on d yet).
func (p *dayPair[T, P]) peek(d int64) *T {
	if cur := p.slots[d%2].Load(); cur != nil && P(cur).dayOf() == d {
		return cur
	}
	return nil
}

// take returns every counters a collect reads: the two slots' and the
// retired ones (which it is the last to read).
func (p *dayPair[T, P]) take() []*T {
	p.mu.Lock()
	out := p.retired
	p.retired = nil
	p.mu.Unlock()
	for i := range p.slots {
		if cur := p.slots[i].Load(); cur != nil {
			out = append(out, cur)
		}
	}
	return out
}

// NewMeter returns an empty meter.
func NewMeter() *Meter {
	return &Meter{accounts: make(map[string]*accountMeter), clients: make(map[clientKey]*clientMeter)}
}

func dayNumber(t time.Time) int64 { return t.Unix() / 86400 }

func dayString(n int64) string { return time.Unix(n*86400, 0).UTC().Format(time.DateOnly) }

// account returns the account's meter (created once, kept for the
// session's lifetime).
func (m *Meter) account(id string) *accountMeter {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.accounts[id]
	if a == nil {
		a = &accountMeter{id: id}
		m.accounts[id] = a
	}
	return a
}

// client returns the client's meter (created once).
func (m *Meter) client(account, client string) *clientMeter {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := clientKey{account, client}
	c := m.clients[k]
	if c == nil {
		c = &clientMeter{account: account, client: client}
		c.today.forget = true
		m.clients[k] = c
	}
	return c
}

// slot returns the counters of now's UTC day.
func (a *accountMeter) slot(now time.Time) *dayCounters { return a.days.at(dayNumber(now)) }

// count meters an accepted message of the client at now.
func (c *clientMeter) count(now time.Time, qos byte) {
	d := dayNumber(now)
	c.days.at(d).messages[qos].Add(1)
	c.today.at(d).messages[qos].Add(1)
	c.lastPublish.Store(now.UnixNano())
}

// DailyDelta is what a flush hands to the store: increments since the last
// flush for one account and day.
type DailyDelta = fleetmq.DailyUsage

// ClientDelta is the per-client QoS mix increment.
type ClientDelta = fleetmq.ClientUsage

// Collect takes the increments counted since the last Collect (resetting
// them), sorted by account and day. dropNames names the drop indexes.
func (m *Meter) Collect(dropNames []string) ([]DailyDelta, []ClientDelta) {
	return m.collect(dropNames, true)
}

// collect is Collect, leaving the clients' increments to a later call
// unless withClients.
func (m *Meter) collect(dropNames []string, withClients bool) ([]DailyDelta, []ClientDelta) {
	m.mu.Lock()
	accounts := make([]*accountMeter, 0, len(m.accounts))
	for _, a := range m.accounts {
		accounts = append(accounts, a)
	}
	var clients []*clientMeter
	if withClients {
		clients = make([]*clientMeter, 0, len(m.clients))
		for _, c := range m.clients {
			clients = append(clients, c)
		}
	}
	m.mu.Unlock()
	var out []DailyDelta
	for _, a := range accounts {
		for _, s := range a.days.take() {
			d := DailyDelta{AccountID: a.id, Day: dayString(s.day)}
			any := false
			for q := range 3 {
				d.Messages[q] = s.messages[q].Swap(0)
				d.Bytes[q] = s.bytes[q].Swap(0)
				any = any || d.Messages[q] != 0
			}
			d.PoolUsed = s.poolUsed.Swap(0)
			d.Demotions = s.demotions.Swap(0)
			d.Refused = s.refused.Swap(0)
			if us := s.demoted.Swap(0); us != 0 {
				d.DemotedSince = time.UnixMicro(us).UTC()
			}
			for r := range s.drops {
				if n := s.drops[r].Swap(0); n != 0 && r < len(dropNames) {
					if d.Drops == nil {
						d.Drops = make(map[string]int64)
					}
					d.Drops[dropNames[r]] += n
				}
			}
			if any || d.PoolUsed != 0 || d.Demotions != 0 || d.Refused != 0 || d.Drops != nil || !d.DemotedSince.IsZero() {
				out = append(out, d)
			}
		}
	}
	var cout []ClientDelta
	for _, c := range clients {
		for _, s := range c.days.take() {
			d := ClientDelta{AccountID: c.account, ClientID: c.client, Day: dayString(s.day)}
			any := false
			for q := range 3 {
				d.Messages[q] = s.messages[q].Swap(0)
				any = any || d.Messages[q] != 0
			}
			if any {
				cout = append(cout, d)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].AccountID != out[j].AccountID {
			return out[i].AccountID < out[j].AccountID
		}
		return out[i].Day < out[j].Day
	})
	sort.Slice(cout, func(i, j int) bool {
		if cout[i].AccountID != cout[j].AccountID {
			return cout[i].AccountID < cout[j].AccountID
		}
		if cout[i].ClientID != cout[j].ClientID {
			return cout[i].ClientID < cout[j].ClientID
		}
		return cout[i].Day < cout[j].Day
	})
	return out, cout
}

// restore adds back increments a failed flush took, so they are not lost.
func (m *Meter) restore(daily []DailyDelta, clients []ClientDelta, dropNames []string) {
	for _, d := range daily {
		a := m.account(d.AccountID)
		n := dayFromString(d.Day)
		if n < 0 {
			continue
		}
		s := a.days.at(n)
		for q := range 3 {
			s.messages[q].Add(d.Messages[q])
			s.bytes[q].Add(d.Bytes[q])
		}
		s.poolUsed.Add(d.PoolUsed)
		s.demotions.Add(d.Demotions)
		s.refused.Add(d.Refused)
		if !d.DemotedSince.IsZero() {
			s.noteDemoted(d.DemotedSince.UnixMicro())
		}
		for i, name := range dropNames {
			if v := d.Drops[name]; v != 0 && i < len(s.drops) {
				s.drops[i].Add(v)
			}
		}
	}
	for _, d := range clients {
		c := m.client(d.AccountID, d.ClientID)
		n := dayFromString(d.Day)
		if n < 0 {
			continue
		}
		s := c.days.at(n)
		for q := range 3 {
			s.messages[q].Add(d.Messages[q])
		}
	}
}

func dayFromString(day string) int64 {
	t, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return -1
	}
	return dayNumber(t)
}
