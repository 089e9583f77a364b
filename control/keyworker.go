package control

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/argon2"
)

// A KeyWorker derives argon2id keys in a child process of its own: the
// same executable, started with KeyWorkerEnv set, at the lowest CPU
// priority and with one Go processor.
//
// In the server's own process a lowered thread priority is not enough:
// argon2.IDKey computes its lanes on goroutines it starts itself, which
// the Go scheduler puts on any thread, at normal priority, beside the
// broker's connections; and a computation holds its processor for up to
// the scheduler's 10 ms time slice while goroutines queued behind it
// wait. In a child process at niceness 19 the kernel gives both cores to
// the server first and the hash gets what is left; its 19 MiB are not in
// the server's heap either.
//
// The child is started on first use and exits after keyWorkerIdle without
// a request (or when its input closes, as it does when the server exits).
// If it cannot be started or dies mid-request, the request is retried once
// with a fresh child and then computed in process (atLowPriority), so a
// sign-in never fails because of the worker.
type KeyWorker struct {
	exe    string
	logger *slog.Logger

	mu    sync.Mutex // one request at a time; guards the fields below
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	exits chan struct{} // closed when cmd has been waited for
}

// KeyWorkerEnv, set to "1" in a process's environment, makes
// ServeKeyWorkerIfAsked serve key requests on stdin and stdout instead of
// returning.
const KeyWorkerEnv = "FLEETMQ_KEY_WORKER"

// keyWorkerIdle is how long a worker waits for its next request before
// it exits (the next request starts a new one).
const keyWorkerIdle = 2 * time.Minute

// keyWorkerHello is the worker's first line, so the parent knows it
// started the right program.
const keyWorkerHello = "fleetmq key worker 1\n"

// Bounds on a request, checked on both sides: parameters come from stored
// hashes, and a worker never allocates more than this for one.
const (
	maxKeyMemory = 1 << 20 // KiB: 1 GiB
	maxKeyTime   = 64
	maxKeyLen    = 1024
	maxKeySalt   = 1024
	maxKeyPass   = 1 << 16
)

// NewKeyWorker returns a worker that runs exe (normally os.Executable())
// when it is first needed.
func NewKeyWorker(exe string, logger *slog.Logger) *KeyWorker {
	if logger == nil {
		logger = slog.Default()
	}
	return &KeyWorker{exe: exe, logger: logger}
}

// keyWorker is the process's worker, set by UseKeyWorker; nil computes in
// process.
var keyWorker atomic.Pointer[KeyWorker]

// UseKeyWorker makes HashPassword and CheckPassword derive their keys in w
// (nil: in process again). It is a process-wide choice, like the CPU
// priority it is about: "fleetmq serve" makes it at start-up.
func UseKeyWorker(w *KeyWorker) { keyWorker.Store(w) }

// deriveKey is argon2.IDKey, in the process's key worker if it has one.
func deriveKey(pw string, salt []byte, t, m uint32, p uint8, keyLen uint32) []byte {
	if w := keyWorker.Load(); w != nil {
		return w.Derive(pw, salt, t, m, p, keyLen)
	}
	return deriveInProcess(pw, salt, t, m, p, keyLen)
}

// deriveInProcess is argon2.IDKey on a thread of this process at the
// lowest priority (which its lanes' goroutines do not keep: see KeyWorker).
func deriveInProcess(pw string, salt []byte, t, m uint32, p uint8, keyLen uint32) []byte {
	var key []byte
	atLowPriority(func() { key = argon2.IDKey([]byte(pw), salt, t, m, p, keyLen) })
	return key
}

// Derive returns argon2.IDKey(pw, salt, t, m, p, keyLen), computed in the
// worker process (in process at low priority if the worker fails twice).
func (w *KeyWorker) Derive(pw string, salt []byte, t, m uint32, p uint8, keyLen uint32) []byte {
	req, err := encodeKeyRequest(pw, salt, t, m, p, keyLen)
	if err == nil {
		w.mu.Lock()
		var key []byte
		for attempt := 0; attempt < 2; attempt++ {
			if key, err = w.roundTrip(req, keyLen); err == nil {
				break
			}
			w.stopLocked()
		}
		w.mu.Unlock()
		if err == nil {
			return key
		}
	}
	w.logger.Warn("password hashing in the server process: the key worker failed", "error", err)
	return deriveInProcess(pw, salt, t, m, p, keyLen)
}

// roundTrip sends one request to the worker, starting it if needed, and
// reads the key. w.mu is held.
func (w *KeyWorker) roundTrip(req []byte, keyLen uint32) ([]byte, error) {
	if w.cmd == nil {
		if err := w.startLocked(); err != nil {
			return nil, err
		}
	}
	if _, err := w.in.Write(req); err != nil {
		return nil, fmt.Errorf("key worker: write: %w", err)
	}
	key := make([]byte, keyLen)
	if _, err := io.ReadFull(w.out, key); err != nil {
		return nil, fmt.Errorf("key worker: read: %w", err)
	}
	return key, nil
}

// startLocked starts the worker process and reads its greeting. The fork
// happens on a thread at the lowest priority, whose niceness the child and
// every thread it starts inherit.
func (w *KeyWorker) startLocked() error {
	cmd := exec.Command(w.exe)
	cmd.Env = append(os.Environ(), KeyWorkerEnv+"=1", "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	atLowPriority(func() { err = cmd.Start() })
	if err != nil {
		return fmt.Errorf("key worker: start %s: %w", w.exe, err)
	}
	exits := make(chan struct{})
	go func() { cmd.Wait(); close(exits) }()
	out := bufio.NewReader(outPipe)
	hello := make(chan error, 1)
	go func() {
		line, err := out.ReadString('\n')
		if err == nil && line != keyWorkerHello {
			err = fmt.Errorf("unexpected greeting %q", line)
		}
		hello <- err
	}()
	select {
	case err = <-hello:
	case <-time.After(5 * time.Second):
		err = errors.New("no greeting in 5 s")
	}
	if err != nil {
		cmd.Process.Kill()
		<-exits
		return fmt.Errorf("key worker %s: %w", w.exe, err)
	}
	w.cmd, w.in, w.out, w.exits = cmd, in, out, exits
	return nil
}

// stopLocked ends the worker process, if any. w.mu is held.
func (w *KeyWorker) stopLocked() {
	if w.cmd == nil {
		return
	}
	w.in.Close() // the worker exits when its input closes
	select {
	case <-w.exits:
	case <-time.After(time.Second):
		w.cmd.Process.Kill()
		<-w.exits
	}
	w.cmd, w.in, w.out, w.exits = nil, nil, nil, nil
}

// Close ends the worker process, if it runs. The worker can be used again
// (it starts a new process).
func (w *KeyWorker) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopLocked()
}

// pid is the worker process's id, 0 if none runs (tests).
func (w *KeyWorker) pid() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return 0
	}
	return w.cmd.Process.Pid
}

// A request is, in little-endian order: time u32, memory u32 (KiB),
// threads u8, key length u32, salt length u16 and the salt, password
// length u32 and the password. The answer is the key's bytes.
func encodeKeyRequest(pw string, salt []byte, t, m uint32, p uint8, keyLen uint32) ([]byte, error) {
	if err := checkKeyParams(t, m, p, keyLen, len(salt), len(pw)); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 19+len(salt)+len(pw))
	b = binary.LittleEndian.AppendUint32(b, t)
	b = binary.LittleEndian.AppendUint32(b, m)
	b = append(b, p)
	b = binary.LittleEndian.AppendUint32(b, keyLen)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(salt)))
	b = append(b, salt...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(pw)))
	return append(b, pw...), nil
}

func checkKeyParams(t, m uint32, p uint8, keyLen uint32, salt, pw int) error {
	switch {
	case t < 1 || t > maxKeyTime, m < 8*uint32(p) || m > maxKeyMemory, p < 1,
		keyLen < 1 || keyLen > maxKeyLen, salt > maxKeySalt, pw > maxKeyPass:
		return fmt.Errorf("argon2 parameters out of bounds (t=%d m=%d p=%d key=%d salt=%d password=%d)", t, m, p, keyLen, salt, pw)
	}
	return nil
}

// ServeKeyWorkerIfAsked returns at once unless KeyWorkerEnv is "1"; then
// it serves key requests on stdin and stdout until stdin closes, or none
// comes for keyWorkerIdle, and exits the process. The fleetmq binary calls
// it first thing in main.
func ServeKeyWorkerIfAsked() {
	if os.Getenv(KeyWorkerEnv) != "1" {
		return
	}
	idle := time.AfterFunc(keyWorkerIdle, func() { os.Exit(0) })
	err := serveKeys(os.Stdin, os.Stdout, func() { idle.Reset(keyWorkerIdle) }, func() { idle.Stop() })
	if !errors.Is(err, io.EOF) { // EOF: the server closed our input
		fmt.Fprintln(os.Stderr, "fleetmq key worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveKeys greets, then answers requests from r on w until r ends (an
// io.EOF error) or a request is refused. busy is called when a request
// starts, done when it has been answered.
func serveKeys(r io.Reader, w io.Writer, done, busy func()) error {
	if _, err := io.WriteString(w, keyWorkerHello); err != nil {
		return err
	}
	br := bufio.NewReader(r)
	var head [15]byte
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return err
		}
		busy()
		t := binary.LittleEndian.Uint32(head[0:])
		m := binary.LittleEndian.Uint32(head[4:])
		p := head[8]
		keyLen := binary.LittleEndian.Uint32(head[9:])
		saltLen := binary.LittleEndian.Uint16(head[13:])
		salt := make([]byte, saltLen)
		if _, err := io.ReadFull(br, salt); err != nil {
			return err
		}
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return err
		}
		pwLen := binary.LittleEndian.Uint32(n[:])
		if err := checkKeyParams(t, m, p, keyLen, int(saltLen), int(pwLen)); err != nil {
			return err
		}
		pw := make([]byte, pwLen)
		if _, err := io.ReadFull(br, pw); err != nil {
			return err
		}
		if _, err := w.Write(argon2.IDKey(pw, salt, t, m, p, keyLen)); err != nil {
			return err
		}
		done()
	}
}
