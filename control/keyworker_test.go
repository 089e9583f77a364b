package control

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/fleetmq/fleetmq/internal/testkit"
)

// TestMain lets the tests start this test binary as a key worker, as
// "fleetmq serve" starts the fleetmq binary.
func TestMain(m *testing.M) {
	ServeKeyWorkerIfAsked()
	os.Exit(m.Run())
}

// useTestWorker makes this test binary the process's key worker for the
// test.
func useTestWorker(t *testing.T) *KeyWorker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := NewKeyWorker(exe, nil)
	UseKeyWorker(w)
	t.Cleanup(func() { UseKeyWorker(nil); w.Close() })
	return w
}

// procNices returns the niceness of every thread of process pid.
func procNices(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no threads for pid %d: %v", pid, err)
	}
	var nices []int
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		var n int
		if _, err := fmt.Sscan(f[16], &n); err != nil {
			t.Fatal(err)
		}
		nices = append(nices, n)
	}
	return nices
}

// TestKeyWorkerHashesInAChildAtLowestPriority: with a worker, passwords
// hash and check as before (hashes made in process check in the worker and
// the other way round), the work happens in another process, and every
// thread of that process runs at niceness 19.
func TestKeyWorkerHashesInAChildAtLowestPriority(t *testing.T) {
	before, err := HashPassword("made in process")
	if err != nil {
		t.Fatal(err)
	}
	w := useTestWorker(t)
	if ok, err := CheckPassword(before, "made in process"); !ok || err != nil {
		t.Fatalf("worker check of an in-process hash = %v, %v", ok, err)
	}
	h, err := HashPassword("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	pid := w.pid()
	if pid == 0 || pid == os.Getpid() {
		t.Fatalf("worker pid %d (ours %d): not a child process", pid, os.Getpid())
	}
	for _, n := range procNices(t, pid) {
		if n != idleNice {
			t.Fatalf("worker thread niceness %v, want all %d", procNices(t, pid), idleNice)
		}
	}
	if ok, err := CheckPassword(h, "correct horse battery staple"); !ok || err != nil {
		t.Fatalf("right password: %v, %v", ok, err)
	}
	if ok, err := CheckPassword(h, "wrong"); ok || err != nil {
		t.Fatalf("wrong password: %v, %v", ok, err)
	}
	UseKeyWorker(nil)
	if ok, err := CheckPassword(h, "correct horse battery staple"); !ok || err != nil {
		t.Fatalf("in-process check of a worker hash = %v, %v", ok, err)
	}
	// Older parameters (several lanes) give argon2's own answer too.
	salt := []byte("0123456789abcdef")
	if got, want := w.Derive("pw", salt, 3, 256, 2, 32), argon2.IDKey([]byte("pw"), salt, 3, 256, 2, 32); !bytes.Equal(got, want) {
		t.Fatalf("worker key %x, argon2 %x", got, want)
	}
}

// TestKeyWorkerRestartsAfterItsChildDies: a worker process killed between
// requests (or that exited idle) is replaced at the next request.
func TestKeyWorkerRestartsAfterItsChildDies(t *testing.T) {
	w := useTestWorker(t)
	salt := []byte("salt salt salt!!")
	want := argon2.IDKey([]byte("pw"), salt, 1, 64, 1, 32)
	if got := w.Derive("pw", salt, 1, 64, 1, 32); !bytes.Equal(got, want) {
		t.Fatalf("first key %x, want %x", got, want)
	}
	first := w.pid()
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !testkit.Within(5*time.Second, func() bool { return procState(first) == 0 || procState(first) == 'Z' }) {
		t.Fatal("the killed worker is still running after 5 s")
	}
	if got := w.Derive("pw", salt, 1, 64, 1, 32); !bytes.Equal(got, want) {
		t.Fatalf("key after the worker died %x, want %x", got, want)
	}
	if second := w.pid(); second == 0 || second == first {
		t.Fatalf("worker pid after restart %d (was %d)", second, first)
	}
	w.Close()
	if w.pid() != 0 {
		t.Fatal("Close left a worker process")
	}
}

// procState is the state letter of process pid ('Z' for a zombie), 0 if
// it is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[0][0]
}

// TestKeyWorkerFallsBackInProcess: a worker that cannot start (no such
// program, or a program that is not a key worker) costs a log line, not a
// sign-in.
func TestKeyWorkerFallsBackInProcess(t *testing.T) {
	salt := []byte("0123456789abcdef")
	want := argon2.IDKey([]byte("pw"), salt, 1, 64, 1, 32)
	for _, exe := range []string{filepath.Join(t.TempDir(), "missing"), "/bin/true"} {
		w := NewKeyWorker(exe, nil)
		if got := w.Derive("pw", salt, 1, 64, 1, 32); !bytes.Equal(got, want) {
			t.Fatalf("%s: key %x, want %x", exe, got, want)
		}
		if w.pid() != 0 {
			t.Fatalf("%s: a failed worker was kept", exe)
		}
	}
}

// TestKeyWorkerRefusesOutOfBoundsParameters: a request for more memory or
// passes than any hash here uses ends the worker before it allocates.
func TestKeyWorkerRefusesOutOfBoundsParameters(t *testing.T) {
	if _, err := encodeKeyRequest("pw", nil, 1, maxKeyMemory+1, 1, 32); err == nil {
		t.Fatal("the parent encoded a request for more than 1 GiB")
	}
	var req bytes.Buffer
	ok, _ := encodeKeyRequest("pw", []byte("salt"), 1, 64, 1, 32)
	req.Write(ok)
	bad, _ := encodeKeyRequest("pw", []byte("salt"), 1, 64, 1, 32)
	bad[4], bad[5], bad[6], bad[7] = 0xff, 0xff, 0xff, 0x7f // memory: 2 TiB
	req.Write(bad)
	var out bytes.Buffer
	err := serveKeys(&req, &out, func() {}, func() {})
	if err == nil || !strings.Contains(err.Error(), "out of bounds") {
		t.Fatalf("serveKeys error %v, want out of bounds", err)
	}
	if got, want := out.String(), keyWorkerHello+string(argon2.IDKey([]byte("pw"), []byte("salt"), 1, 64, 1, 32)); got != want {
		t.Fatalf("worker wrote %q, want the greeting and the first key only", got)
	}
	if err := serveKeys(strings.NewReader(""), io.Discard, func() {}, func() {}); !errors.Is(err, io.EOF) {
		t.Fatalf("serveKeys on a closed input: %v, want EOF (the worker's normal end)", err)
	}
}
