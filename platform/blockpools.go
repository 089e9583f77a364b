package platform

import (
	"sync"
	"time"
)

// BlockPools spends the units of shared QoS 2 pools (a cluster's, in the
// database) on the message path without waiting for the database at each
// message: it takes units of an account's pool in blocks and hands them
// out one by one, fetching the next block in the background when half of
// the current one is spent. A message waits for the database only when
// its node has no unit left and the pool may have some (the first QoS 2
// message of the day on a node, or a burst faster than the fetches).
//
// The pool is never exceeded: every unit spent was taken from the shared
// pool first. The price is at the end of the pool: units a node took but
// has not spent are lost to the other nodes, up to one and a half blocks
// per node and account (they send at QoS 1 while that node still sends
// at QoS 2).
//
// Take's n is at most Block. Used reports what the shared pools say was
// taken (spent or held in blocks).
type BlockPools struct {
	Shared QoS2Pools
	Block  int64 // units taken at a time (default 16)

	mu     sync.Mutex
	blocks map[string]*block
}

// block is a node's units of one account's pool of one day.
type block struct {
	mu        sync.Mutex
	day       string
	left      int64 // taken from the shared pool, not spent
	dry       bool  // the shared pool gave less than asked: it is used up
	drySize   int64 // the pool's size when it ran dry (a larger one has room again)
	failedAt  time.Time
	failErr   error // the last fetch's error, given to takes for failWait
	fetching  bool
	fetchDone *sync.Cond // signalled when a fetch ends
}

// failWait is how long a failed fetch's error answers the takes that
// follow, so that publishers do not each wait for the database in turn.
const failWait = time.Second

// DefaultBlock is BlockPools.Block's default.
const DefaultBlock = 16

func (b *BlockPools) size() int64 {
	if b.Block > 0 {
		return b.Block
	}
	return DefaultBlock
}

func (b *BlockPools) block(account string) *block {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocks == nil {
		b.blocks = make(map[string]*block)
	}
	bl := b.blocks[account]
	if bl == nil {
		bl = &block{}
		bl.fetchDone = sync.NewCond(&bl.mu)
		b.blocks[account] = bl
	}
	return bl
}

// Take hands out up to n units of the account's pool of day.
func (b *BlockPools) Take(account, day string, n, size int64) (int64, error) {
	bl := b.block(account)
	bl.mu.Lock()
	defer bl.mu.Unlock()
	switch {
	case bl.day > day:
		return 0, nil // a past day's pool is closed
	case bl.day < day:
		for bl.fetching { // a fetch of the day before: let it end first
			bl.fetchDone.Wait()
		}
		bl.day, bl.left, bl.dry, bl.failErr = day, 0, false, nil
	}
	if bl.dry && size > bl.drySize {
		bl.dry = false // the plan's pool grew since
	}
	for bl.left < n && !bl.dry {
		if bl.fetching {
			bl.fetchDone.Wait()
			if bl.day != day {
				return 0, nil // the day ended meanwhile: its pool is closed
			}
			continue
		}
		if bl.failErr != nil && time.Since(bl.failedAt) < failWait {
			return 0, bl.failErr
		}
		ask := n - bl.left + b.size()
		bl.fetching = true
		bl.mu.Unlock()
		got, err := b.Shared.Take(account, day, ask, size)
		bl.mu.Lock()
		bl.fetching = false
		bl.fetchDone.Broadcast()
		if err != nil {
			bl.failErr, bl.failedAt = err, time.Now()
			return 0, err
		}
		bl.failErr = nil
		if bl.day == day {
			bl.left += got
			if bl.dry = got < ask; bl.dry {
				bl.drySize = size
			}
		}
	}
	took := min(n, bl.left)
	bl.left -= took
	if !bl.dry && !bl.fetching && bl.left <= b.size()/2 {
		bl.fetching = true
		go b.prefetch(bl, account, day, size)
	}
	return took, nil
}

// prefetch takes the account's next block in the background.
func (b *BlockPools) prefetch(bl *block, account, day string, size int64) {
	got, err := b.Shared.Take(account, day, b.size(), size)
	bl.mu.Lock()
	defer bl.mu.Unlock()
	bl.fetching = false
	bl.fetchDone.Broadcast()
	if err != nil || bl.day != day {
		return // the units of a day gone by are lost; an error took none
	}
	bl.left += got
	if bl.dry = got < b.size(); bl.dry {
		bl.drySize = size
	}
}

// Used reports the units of the account's pool of day spent as far as
// this node knows: those taken from the shared pool, less this node's
// block not spent yet (another node's unspent block counts as used until
// it spends it or the day ends). With the shared pool's count alone, one
// QoS 2 message of a pool of 2 read as both units used, and the pool as
// run out while this node still held a unit for the next.
func (b *BlockPools) Used(account, day string) (int64, error) {
	used, err := b.Shared.Used(account, day)
	if err != nil {
		return used, err
	}
	b.mu.Lock()
	bl := b.blocks[account]
	b.mu.Unlock()
	if bl != nil {
		bl.mu.Lock()
		if bl.day == day {
			used -= bl.left
		}
		bl.mu.Unlock()
	}
	return max(used, 0), nil
}
