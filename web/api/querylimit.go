package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fleetmq/fleetmq"
)

// History queries cost the store more than any other request, so one
// account cannot take it from the others: at most QueriesPerAccount of its
// history requests run at once (a page or a whole export), and a page's
// query stops after QueryTimeout.
const (
	QueriesPerAccount = 2
	QueryTimeout      = 15 * time.Second
)

// querySlots counts the history requests running per account.
type querySlots struct {
	mu      sync.Mutex
	running map[string]int
}

// take reserves a slot for the account, or answers 429 when it has none
// free. The returned func gives the slot back.
func (q *querySlots) take(accountID string) (func(), *Problem) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running == nil {
		q.running = map[string]int{}
	}
	if q.running[accountID] >= QueriesPerAccount {
		p := newProblem(http.StatusTooManyRequests, fleetmq.CodeRateLimited,
			strconv.Itoa(QueriesPerAccount)+" history requests of this account are running already (a page or an export each); retry when one has finished")
		p.GetHeaders().Set("Retry-After", "1")
		return nil, p
	}
	q.running[accountID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			if q.running[accountID]--; q.running[accountID] <= 0 {
				delete(q.running, accountID)
			}
			q.mu.Unlock()
		})
	}, nil
}

// queryProblem turns a page query that ran out of its time (limit) into a
// 422 that says how to narrow it.
func queryProblem(ctx context.Context, err error, limit time.Duration) *Problem {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return newProblem(http.StatusUnprocessableEntity, fleetmq.CodeValidation,
			"the query ran longer than "+limit.String()+" and was stopped: narrow it with from and to, client_id, or a topic filter whose first levels are literal")
	}
	return nil
}
