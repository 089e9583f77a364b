package restauth

import (
	"math"
	"sync"
	"time"
)

// The secondary limits' defaults, per account over all its tokens (see
// AccountLimits).
const (
	// DefaultAccountConcurrency is the requests of one account in flight
	// at once: a dashboard loading its panels together is not refused;
	// history requests have their own, lower bound (history.Slots).
	DefaultAccountConcurrency = 10
	// DefaultAccountRate is the requests per second one account makes
	// once its burst is spent: 72,000 an hour, the hourly limit of 14
	// tokens.
	DefaultAccountRate = 20
	// DefaultAccountBurst is the requests one account may make at once
	// beyond the rate: a tenth of a token's hour. A client that spends
	// its whole hour at once still can, in about four minutes (500, then
	// 20 a second), and one account's burst stays short enough not to
	// be felt by the others.
	DefaultAccountBurst = DefaultRateLimit / 10
	// DefaultRefusalPause is how long a refused request waits for its
	// 429 (at most its Retry-After).
	DefaultRefusalPause = time.Second
)

// AccountLimits are the secondary limits of the REST API: beside each
// token's hourly limit (Limiter), every account's requests over all its
// tokens are bounded in how many are in flight at once and, by a token
// bucket, in how fast they come. Zero fields take the defaults.
type AccountLimits struct {
	Concurrency int // requests in flight at once
	Rate        int // requests per second, sustained
	Burst       int // the bucket: requests at once on top of the rate
	// RefusalPause is how long a request refused by a rate limit (these
	// or the token's hour) waits before its 429 is sent, at most its
	// Retry-After: deciding costs next to nothing, but a client that
	// ignores Retry-After and sends again at once would otherwise make
	// the cheap refusals by the thousand a second. Waiting holds no
	// request in flight.
	RefusalPause time.Duration
}

func (l AccountLimits) withDefaults() AccountLimits {
	if l.Concurrency <= 0 {
		l.Concurrency = DefaultAccountConcurrency
	}
	if l.Rate <= 0 {
		l.Rate = DefaultAccountRate
	}
	if l.Burst <= 0 {
		l.Burst = DefaultAccountBurst
	}
	if l.RefusalPause <= 0 {
		l.RefusalPause = DefaultRefusalPause
	}
	return l
}

// The secondary limit that refused a request.
const (
	RefusedConcurrency = "concurrency"
	RefusedRate        = "rate"
)

// AccountDecision is the outcome of AccountLimiter.Admit.
type AccountDecision struct {
	// Refused is "" when the request may go on, else the limit that
	// refused it (RefusedConcurrency or RefusedRate).
	Refused    string
	Limits     AccountLimits
	RetryAfter time.Duration // refused: when to try again (at least a second)
}

// AccountLimiter enforces AccountLimits per account, in memory, with a
// short lock per account and no I/O: a refusal costs next to nothing. It
// is safe for concurrent use.
type AccountLimiter struct {
	lim      AccountLimits
	accounts sync.Map // account id -> *accountState
}

// accountState is one account's requests in flight and its bucket.
type accountState struct {
	mu       sync.Mutex
	inFlight int
	tokens   float64   // the bucket's fill at filled
	filled   time.Time // zero: full
}

// NewAccountLimiter returns a limiter of lim (zero fields: the defaults).
func NewAccountLimiter(lim AccountLimits) *AccountLimiter {
	return &AccountLimiter{lim: lim.withDefaults()}
}

// Limits returns the limits in force.
func (l *AccountLimiter) Limits() AccountLimits { return l.lim }

func (l *AccountLimiter) state(accountID string) *accountState {
	if s, ok := l.accounts.Load(accountID); ok {
		return s.(*accountState)
	}
	s, _ := l.accounts.LoadOrStore(accountID, new(accountState))
	return s.(*accountState)
}

// Admit decides a request of the account at now. Admitted, it takes one
// of the account's requests in flight and one request from its bucket,
// and release must be called when the request has been answered (calling
// it again is harmless). A refused request takes nothing; an admitted one
// that another limit refuses is given back with Refund.
func (l *AccountLimiter) Admit(accountID string, now time.Time) (release func(), d AccountDecision) {
	d.Limits = l.lim
	s := l.state(accountID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight >= l.lim.Concurrency {
		d.Refused, d.RetryAfter = RefusedConcurrency, time.Second
		return nil, d
	}
	tokens := float64(l.lim.Burst)
	if !s.filled.IsZero() {
		// A clock that went back refills nothing.
		elapsed := max(now.Sub(s.filled), 0)
		tokens = min(s.tokens+elapsed.Seconds()*float64(l.lim.Rate), float64(l.lim.Burst))
	}
	if tokens < 1 {
		wait := time.Duration(math.Ceil((1 - tokens) / float64(l.lim.Rate) * float64(time.Second)))
		d.Refused, d.RetryAfter = RefusedRate, max(wait, time.Second)
		return nil, d
	}
	s.tokens = tokens - 1
	if now.After(s.filled) {
		s.filled = now
	}
	s.inFlight++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		})
	}, d
}

// Refund puts back in the account's bucket the request an admitted
// request took, when another limit (the token's hour) refused it: refused
// requests are not counted.
func (l *AccountLimiter) Refund(accountID string) {
	s := l.state(accountID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.filled.IsZero() {
		s.tokens = min(s.tokens+1, float64(l.lim.Burst))
	}
}
