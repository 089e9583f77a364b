package sqlstore_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetmq/fleetmq"
	"github.com/fleetmq/fleetmq/internal/contract"
	"github.com/fleetmq/fleetmq/internal/pgtest"
	"github.com/fleetmq/fleetmq/platform"
	"github.com/fleetmq/fleetmq/web/restauth"
)

// TestRESTCountersContract runs the REST rate-limit counters' contract on
// each backend: each case on a fresh database, each node with a store of
// its own on it, as nodes sharing one database have.
func TestRESTCountersContract(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		postgres := strings.HasPrefix(dsn, "postgres")
		contract.RESTCounters(t, func(t *testing.T) func(string) restauth.CounterStore {
			fresh := filepath.Join(t.TempDir(), "fleetmq.db")
			if postgres {
				fresh = pgtest.DSN(t)
			}
			return func(string) restauth.CounterStore {
				s := open(t, fresh)
				t.Cleanup(func() { s.Close() })
				return s
			}
		})
		contract.RESTReservations(t, func(t *testing.T) func(string) restauth.Reserver {
			fresh := filepath.Join(t.TempDir(), "fleetmq.db")
			if postgres {
				fresh = pgtest.DSN(t)
			}
			return func(string) restauth.Reserver {
				s := open(t, fresh)
				t.Cleanup(func() { s.Close() })
				return s
			}
		})
	})
}

// TestUsageContract runs the metering contract on each backend, each node
// with a store of its own on one fresh database per case.
func TestUsageContract(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		postgres := strings.HasPrefix(dsn, "postgres")
		contract.Usage(t, func(t *testing.T) func(string) fleetmq.UsageStore {
			fresh := filepath.Join(t.TempDir(), "fleetmq.db")
			if postgres {
				fresh = pgtest.DSN(t)
			}
			return func(string) fleetmq.UsageStore {
				s := open(t, fresh)
				t.Cleanup(func() { s.Close() })
				return s
			}
		})
	})
}

// TestQoS2PoolsContract runs the shared QoS 2 pools' contract on each
// backend, each node with a store of its own on one fresh database per
// case.
func TestQoS2PoolsContract(t *testing.T) {
	forEachDSN(t, func(t *testing.T, dsn string) {
		postgres := strings.HasPrefix(dsn, "postgres")
		contract.QoS2Pools(t, func(t *testing.T) func(string) platform.QoS2Pools {
			fresh := filepath.Join(t.TempDir(), "fleetmq.db")
			if postgres {
				fresh = pgtest.DSN(t)
			}
			return func(string) platform.QoS2Pools {
				s := open(t, fresh)
				t.Cleanup(func() { s.Close() })
				return s.QoS2Pools()
			}
		})
	})
}
