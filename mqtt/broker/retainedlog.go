package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// The retained log (StatePath + ".retained") keeps the retained messages
// apart from the state file, as an append-only log of changes: each save
// appends a set record for every topic set or replaced since the last save
// and a clear record for every topic cleared or expired, then syncs the
// file. When the bytes of records that no longer count (replaced or
// cleared) exceed those of the live ones, and minCompact, the save writes
// a compacted log instead (temporary file, fsync, rename, fsync of the
// directory).
//
// The file is an 8-byte header (retainedLogMagic) and records, each
//
//	length uint32 LE | crc32c(body) uint32 LE | body (length bytes)
//
// with the body encoded as in retainedcodec.go. A record that is cut short
// or fails its checksum ends what is loaded: a torn last record (a crash
// during an append) is ignored and cut off before the next append; damage
// further up loses the records after it, is logged, and the next save
// writes a compacted log (the damaged file is kept as .corrupt).

const retainedLogMagic = "FMQRET\x00\x01"

const (
	recordHeader = 8 // length and checksum
	// defaultMinCompact is the least dead bytes worth a compaction.
	defaultMinCompact = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// retainedLog is the retained log of one server. Its methods run one at a
// time (the server's saves are serialized); a save holds the retained
// store's locks only to take the changes, never while it does I/O.
type retainedLog struct {
	path       string
	log        *slog.Logger
	minCompact int64

	size      int64            // bytes of the file that are valid records; 0: no usable file
	live      map[string]int64 // topic -> size of its set record in the file
	liveBytes int64
	rewrite   bool // the next save writes a compacted log
	corrupt   bool // the file is damaged: keep it aside when rewriting it
	buf       []byte
}

func newRetainedLog(statePath string, log *slog.Logger) *retainedLog {
	return &retainedLog{path: statePath + ".retained", log: log, minCompact: defaultMinCompact, live: make(map[string]int64)}
}

// deadBytes is what the file holds beyond the header and live records.
func (l *retainedLog) deadBytes() int64 {
	return l.size - int64(len(retainedLogMagic)) - l.liveBytes
}

// load reads the log and calls keep with each topic's last retained
// message (not for cleared topics). A missing file is an empty log; a file
// that is not a retained log is an error; a damaged one loads what
// precedes the damage.
func (l *retainedLog) load(keep func(*Message)) error {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	head := make([]byte, len(retainedLogMagic))
	n, _ := io.ReadFull(r, head)
	if n < len(head) && string(head[:n]) == retainedLogMagic[:n] {
		// Empty or a header cut short: nothing was ever saved in it.
		l.log.Warn("retained log: no records, rewritten at the next save", "path", l.path, "bytes", n)
		return nil
	}
	if string(head) != retainedLogMagic {
		return fmt.Errorf("%s: not a retained log (header %q)", l.path, head)
	}
	type last struct {
		msg  *Message // nil: cleared
		size int64
	}
	topics := make(map[string]last)
	off, total := int64(len(retainedLogMagic)), fi.Size()
	var body []byte
	var bad string
	for off < total {
		var h [recordHeader]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			bad = "a record header cut short"
			break
		}
		n := int64(binary.LittleEndian.Uint32(h[:4]))
		if n > total-off-recordHeader {
			bad = fmt.Sprintf("a record of %d bytes cut short", n)
			break
		}
		if int64(cap(body)) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return fmt.Errorf("%s: %w", l.path, err)
		}
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(h[4:]) {
			bad = "a record with a bad checksum"
			break
		}
		topic, m, err := decodeRecord(body)
		if err != nil {
			bad = "a record that does not decode"
			break
		}
		size := recordHeader + n
		topics[topic] = last{msg: m, size: size}
		off += size
	}
	l.size = off
	if bad != "" {
		end := off + recordHeader
		if n := total - off; n >= recordHeader {
			var h [recordHeader]byte
			if _, err := f.ReadAt(h[:], off); err == nil {
				end += int64(binary.LittleEndian.Uint32(h[:4]))
			}
		}
		if end >= total {
			// The last record: an append that a crash cut short.
			l.log.Warn("retained log: ignoring a torn last record", "path", l.path, "offset", off, "bytes", total-off)
		} else {
			l.log.Error("retained log: damaged; retained messages after the damage are lost (the file is kept as .corrupt at the next save)",
				"path", l.path, "offset", off, "problem", bad, "bytes_lost", total-off)
			l.corrupt, l.rewrite = true, true
		}
	}
	for topic, x := range topics {
		if x.msg == nil {
			continue
		}
		l.live[topic] = x.size
		l.liveBytes += x.size
		keep(x.msg)
	}
	return nil
}

// save writes the retained changes since the last save (or, when due,
// a compacted log of every retained message) and syncs the file. When it
// fails, the changes it took are marked dirty again for the next save.
func (l *retainedLog) save(rs *MemoryRetained, now time.Time) error {
	if l.rewrite || l.size == 0 {
		return l.compact(rs, now)
	}
	changes := rs.takeDirty(false)
	if len(changes) == 0 {
		return nil
	}
	b := l.buf[:0]
	sizes := make([]int64, len(changes))
	for i, c := range changes {
		start := len(b)
		b = append(b, make([]byte, recordHeader)...)
		switch {
		case c.msg != nil && !c.msg.expired(now):
			b = appendSetRecord(b, c.msg)
		case l.live[c.topic] > 0:
			b = appendClearRecord(b, c.topic)
		default:
			b = b[:start] // cleared before it was ever saved
			sizes[i] = -1
			continue
		}
		body := b[start+recordHeader:]
		binary.LittleEndian.PutUint32(b[start:], uint32(len(body)))
		binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
		sizes[i] = int64(len(b) - start)
	}
	l.buf = b[:0]
	if len(b) > 0 {
		if err := l.append(b); err != nil {
			rs.markDirty(topicsOf(changes))
			return err
		}
	}
	for i, c := range changes {
		if sizes[i] < 0 {
			continue
		}
		l.liveBytes -= l.live[c.topic]
		if c.msg != nil && !c.msg.expired(now) {
			l.live[c.topic] = sizes[i]
			l.liveBytes += sizes[i]
		} else {
			delete(l.live, c.topic)
		}
	}
	if dead := l.deadBytes(); dead > l.liveBytes && dead >= l.minCompact {
		if err := l.compact(rs, now); err != nil {
			// The changes are in the log; the next save tries again.
			l.rewrite = true
			l.log.Error("retained log: compaction failed", "path", l.path, "error", err)
		}
	}
	if cap(l.buf) > 1<<20 {
		l.buf = nil // a burst of changes does not pin its buffer
	}
	return nil
}

// append writes records at the end of the valid part of the file (cutting
// off a torn tail first) and syncs it.
func (l *retainedLog) append(b []byte) error {
	f, err := os.OpenFile(l.path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < l.size {
		err := fmt.Errorf("%s: file shrank to %d bytes, want at least %d", l.path, fi.Size(), l.size)
		l.rewrite = true // write it whole next time
		return err
	}
	if fi.Size() > l.size {
		if err := f.Truncate(l.size); err != nil {
			return err
		}
	}
	if _, err := f.WriteAt(b, l.size); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	l.size += int64(len(b))
	return nil
}

// compact writes every retained message to a fresh log that replaces the
// old one.
func (l *retainedLog) compact(rs *MemoryRetained, now time.Time) (err error) {
	changes := rs.takeDirty(true)
	defer func() {
		if err != nil {
			l.rewrite = true // and everything again next time
		}
	}()
	dir := filepath.Dir(l.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".retained-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := bufio.NewWriterSize(tmp, 256<<10)
	w.WriteString(retainedLogMagic)
	live := make(map[string]int64, len(changes))
	size, liveBytes := int64(len(retainedLogMagic)), int64(0)
	b := l.buf[:0]
	for _, c := range changes {
		if c.msg.expired(now) {
			continue
		}
		b = appendSetRecord(append(b[:0], make([]byte, recordHeader)...), c.msg)
		body := b[recordHeader:]
		binary.LittleEndian.PutUint32(b, uint32(len(body)))
		binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(body, castagnoli))
		if _, err := w.Write(b); err != nil {
			return err
		}
		live[c.topic] = int64(len(b))
		liveBytes += int64(len(b))
		size += int64(len(b))
	}
	l.buf = b[:0]
	if err := w.Flush(); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if l.corrupt {
		// A second name for the damaged file, so no crash leaves no log.
		aside := l.path + ".corrupt"
		os.Remove(aside)
		if err := os.Link(l.path, aside); err != nil {
			l.log.Error("retained log: cannot keep the damaged file aside", "path", l.path, "error", err)
		} else {
			l.log.Warn("retained log: damaged file kept aside", "path", aside)
		}
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	l.size, l.live, l.liveBytes = size, live, liveBytes
	l.rewrite, l.corrupt = false, false
	return nil
}

func topicsOf(changes []retainedChange) []string {
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = c.topic
	}
	return out
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
