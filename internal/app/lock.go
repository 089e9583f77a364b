package app

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the lock file of a data directory. Whoever holds its lock
// owns the directory: its broker state and, with SQLite, its database.
const LockFile = "fleetmq.lock"

// Lock is an exclusive flock(2) on a lock file that names its holder's
// pid. The kernel drops it when the process ends, however it ends (SIGKILL
// included), so a crash never leaves a directory locked.
type Lock struct{ f *os.File }

// InUseError is returned when another process holds a lock.
type InUseError struct {
	What string // "data directory ./data"
	Flag string // the flag that chooses another: "-data"
	PID  int    // the holder's pid; 0 when it could not be read
}

func (e *InUseError) Error() string {
	by := "another fleetmq"
	if e.PID > 0 {
		by += " (pid " + strconv.Itoa(e.PID) + ")"
	}
	return fmt.Sprintf("%s is in use by %s; stop it or choose another %s", e.What, by, e.Flag)
}

// LockDataDir creates the data directory if needed and locks it for this
// process, or returns an *InUseError naming the process that holds it.
func LockDataDir(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return lockFile(filepath.Join(dir, LockFile), &InUseError{What: "data directory " + dir, Flag: "-data"})
}

// LockStateFile locks a broker state file (through PATH.lock beside it)
// for this process, or returns an *InUseError naming the holder.
func LockStateFile(path string) (*Lock, error) {
	return lockFile(path+".lock", &InUseError{What: "state file " + path, Flag: "-state"})
}

func lockFile(path string, inUse *InUseError) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	// flock, not fcntl: its locks belong to the open file, so a second
	// open in the same process (a test) is refused like another process.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := io.ReadAll(io.LimitReader(f, 32))
			inUse.PID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, inUse
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release empties the lock file and unlocks it. The file stays: removing it
// could let a process that has just opened it lock a file no one else sees.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0) // the next holder writes its pid; until then none is shown
	err := l.f.Close()
	l.f = nil
	return err
}
