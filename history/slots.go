package history

import (
	"context"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq"
)

// RequestsPerAccount is how many history requests (a page, an export, a
// device page's history and chart) one account runs at once, across the
// REST API and the portal: history reads cost the store more than any
// other request, and the store's reads pool is shared by every tenant.
const RequestsPerAccount = 2

// StoreTimeBurst bounds the store time one account's history reads take
// beyond the rate of one store-second per second: each account has this
// much credit, spent by the time its reads spend in the store and earned
// back at one second per second. A lone request (an export reads one batch
// at a time) runs at full speed whatever it costs; two at once, each
// keeping a database process busy, share one second per second once the
// burst is spent, so that one tenant's reads take at most one of the
// store's cores from the others' commits. A request that finds its
// account's credit spent is refused with the time until it is earned
// back.
const StoreTimeBurst = 2 * time.Second

// Slots counts the history requests running per account and the store
// time they spend. The zero value is ready to use; one Slots is shared by
// every door to history.
type Slots struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu       sync.Mutex
	accounts map[string]*slotAccount
}

// slotAccount is one account's running requests and store-time credit (as
// of at).
type slotAccount struct {
	running int
	credit  time.Duration
	at      time.Time
}

// accountLocked returns the account's entry with its credit brought up to
// now. s.mu is held.
func (s *Slots) accountLocked(accountID string) *slotAccount {
	now := s.now()
	if s.accounts == nil {
		s.accounts = map[string]*slotAccount{}
	}
	a := s.accounts[accountID]
	if a == nil {
		a = &slotAccount{credit: StoreTimeBurst, at: now}
		s.accounts[accountID] = a
	}
	if d := now.Sub(a.at); d > 0 {
		a.credit = min(StoreTimeBurst, a.credit+d)
	}
	a.at = now
	return a
}

func (s *Slots) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// forgetLocked drops an account's entry when it says nothing: no request
// running and the whole credit. s.mu is held.
func (s *Slots) forgetLocked(accountID string, a *slotAccount) {
	if a.running == 0 && a.credit >= StoreTimeBurst {
		delete(s.accounts, accountID)
	}
}

// Take reserves one of the account's RequestsPerAccount slots. It returns
// ok false when they are all taken (retry 0), or when the account's reads
// have spent their store time (retry: until it is earned back); otherwise
// release gives the slot back (calling it more than once is harmless).
func (s *Slots) Take(accountID string) (release func(), retry time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accountLocked(accountID)
	switch {
	case a.credit <= 0:
		return nil, -a.credit + time.Millisecond, false
	case a.running >= RequestsPerAccount:
		return nil, 0, false
	}
	a.running++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			a := s.accountLocked(accountID)
			a.running--
			s.forgetLocked(accountID, a)
			s.mu.Unlock()
		})
	}, 0, true
}

// RetrySeconds is a Retry-After value for a wait of d: whole seconds,
// rounded up, at least 1.
func RetrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Charge spends d of the account's store-time credit (it may go below
// zero: the account's next requests wait until it is earned back).
func (s *Slots) Charge(accountID string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.accountLocked(accountID)
	a.credit -= d
	s.forgetLocked(accountID, a)
}

// Charged returns st with the time of each history read it serves charged
// to the account: the store's side of a request, not the time its client
// takes to read the answer (an export writes a batch only after the
// store's call has returned).
func (s *Slots) Charged(accountID string, st fleetmq.HistoryStore) fleetmq.HistoryStore {
	return chargedStore{HistoryStore: st, slots: s, account: accountID}
}

type chargedStore struct {
	fleetmq.HistoryStore
	slots   *Slots
	account string
}

func (c chargedStore) QueryHistory(ctx context.Context, q *fleetmq.HistoryQuery, fn func(*fleetmq.Record) error) error {
	start := c.slots.now()
	defer func() { c.slots.Charge(c.account, c.slots.now().Sub(start)) }()
	return c.HistoryStore.QueryHistory(ctx, q, fn)
}

func (c chargedStore) LatestHistory(ctx context.Context, accountID, clientID string) ([]*fleetmq.Record, error) {
	start := c.slots.now()
	defer func() { c.slots.Charge(c.account, c.slots.now().Sub(start)) }()
	return c.HistoryStore.LatestHistory(ctx, accountID, clientID)
}
