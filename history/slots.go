package history

import "sync"

// RequestsPerAccount is how many history requests (a page, an export, a
// device page's history and chart) one account runs at once, across the
// REST API and the portal: history reads cost the store more than any
// other request, and the store's reads pool is shared by every tenant.
const RequestsPerAccount = 2

// Slots counts the history requests running per account. The zero value
// is ready to use; one Slots is shared by every door to history.
type Slots struct {
	mu      sync.Mutex
	running map[string]int
}

// Take reserves one of the account's RequestsPerAccount slots. It returns
// false when they are all taken; otherwise release gives the slot back
// (calling it more than once is harmless).
func (s *Slots) Take(accountID string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]int{}
	}
	if s.running[accountID] >= RequestsPerAccount {
		return nil, false
	}
	s.running[accountID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.running[accountID]--; s.running[accountID] <= 0 {
				delete(s.running, accountID)
			}
			s.mu.Unlock()
		})
	}, true
}
