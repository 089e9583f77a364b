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

// dayCounters are one UTC day's counters; two slots (day % 2) let the day
// roll over without a lock.
type dayCounters struct {
	day       atomic.Int64 // days since the Unix epoch
	messages  [3]atomic.Int64
	bytes     [3]atomic.Int64
	poolUsed  atomic.Int64
	demotions atomic.Int64
	refused   atomic.Int64
	drops     [8]atomic.Int64 // by broker.DropReason
}

type accountMeter struct {
	id   string
	days [2]dayCounters
}

type clientMeter struct {
	account, client string
	// days are the increments since the last Collect.
	days [2]dayMix
	// today are the day's totals for the live view (never collected).
	today [2]dayMix
	// lastPublish is the time of the last accepted PUBLISH (Unix ns).
	lastPublish atomic.Int64
	// live is the client's connection state (connect and disconnect only).
	live clientLive
}

// dayMix counts messages by effective QoS for one UTC day; two of them
// (day % 2) let the day roll over without a lock.
type dayMix struct {
	day      atomic.Int64
	messages [3]atomic.Int64
}

// slotOf returns the mix of day d from a pair, claiming it when it last held
// an older day.
func slotOf(pair *[2]dayMix, d int64) *dayMix {
	s := &pair[d%2]
	if s.day.Load() != d {
		if old := s.day.Load(); old != d && s.day.CompareAndSwap(old, d) {
			for i := range s.messages {
				s.messages[i].Store(0)
			}
		}
	}
	return s
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
		m.clients[k] = c
	}
	return c
}

// slot returns today's counters, claiming the slot when the day changed.
func (a *accountMeter) slot(now time.Time) *dayCounters {
	d := dayNumber(now)
	s := &a.days[d%2]
	if s.day.Load() != d {
		// The slot last held day d-2 (long flushed): reuse it.
		if old := s.day.Load(); old != d && s.day.CompareAndSwap(old, d) {
			for i := range s.messages {
				s.messages[i].Store(0)
				s.bytes[i].Store(0)
			}
			s.poolUsed.Store(0)
			s.demotions.Store(0)
			s.refused.Store(0)
			for i := range s.drops {
				s.drops[i].Store(0)
			}
		}
	}
	return s
}

// count meters an accepted message of the client at now.
func (c *clientMeter) count(now time.Time, qos byte) {
	d := dayNumber(now)
	slotOf(&c.days, d).messages[qos].Add(1)
	slotOf(&c.today, d).messages[qos].Add(1)
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
		for i := range a.days {
			s := &a.days[i]
			d := DailyDelta{AccountID: a.id, Day: dayString(s.day.Load())}
			any := false
			for q := range 3 {
				d.Messages[q] = s.messages[q].Swap(0)
				d.Bytes[q] = s.bytes[q].Swap(0)
				any = any || d.Messages[q] != 0
			}
			d.PoolUsed = s.poolUsed.Swap(0)
			d.Demotions = s.demotions.Swap(0)
			d.Refused = s.refused.Swap(0)
			for r := range s.drops {
				if n := s.drops[r].Swap(0); n != 0 && r < len(dropNames) {
					if d.Drops == nil {
						d.Drops = make(map[string]int64)
					}
					d.Drops[dropNames[r]] += n
				}
			}
			if any || d.PoolUsed != 0 || d.Demotions != 0 || d.Refused != 0 || d.Drops != nil {
				out = append(out, d)
			}
		}
	}
	var cout []ClientDelta
	for _, c := range clients {
		for i := range c.days {
			s := &c.days[i]
			d := ClientDelta{AccountID: c.account, ClientID: c.client, Day: dayString(s.day.Load())}
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
		s := &a.days[n%2]
		if s.day.Load() != n {
			continue // the slot moved on to a later day; cannot happen within two days
		}
		for q := range 3 {
			s.messages[q].Add(d.Messages[q])
			s.bytes[q].Add(d.Bytes[q])
		}
		s.poolUsed.Add(d.PoolUsed)
		s.demotions.Add(d.Demotions)
		s.refused.Add(d.Refused)
		for i, name := range dropNames {
			if v := d.Drops[name]; v != 0 && i < len(s.drops) {
				s.drops[i].Add(v)
			}
		}
	}
	for _, d := range clients {
		c := m.client(d.AccountID, d.ClientID)
		n := dayFromString(d.Day)
		s := &c.days[n%2]
		if s.day.Load() != n {
			continue
		}
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
