package broker

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
// The file is a header, an 8-byte magic (retainedLogMagic) and a 16-byte
// random key made for the file when it is written whole, then records,
// each
//
//	length uint32 LE | crc32c(key, body) uint32 LE | body (length bytes)
//
// with the body encoded as in retainedcodec.go. The checksum covers the
// file's key before the body: a tenant's payload can hold bytes shaped as
// records, but not their checksums, since no tenant knows the key, so the
// salvage below never takes a payload's bytes for records. A log written
// before the key (magic ...\x00\x01) still loads; its damage is not
// salvaged, and its first compaction writes it with a key. A torn last record (a
// crash during an append: cut short, with no record after it) is ignored
// and cut off before the next append. Any other damage (a record whose
// length, checksum or body is wrong) is salvaged: the damaged record is
// read again with the length its checksum gives, when its body is intact,
// and the records after it are found again (the first offset from which
// whole records with good checksums run to the end of the file); what
// cannot be read is skipped. The damaged file is kept aside at once, under
// a second name (.damaged-<UTC time>), the damage is logged as an error
// (offset, records read before it, records salvaged, bytes skipped), and
// the next save writes a compacted log; it never replaces a damaged file
// that could not be kept aside.

const (
	retainedLogMagic = "FMQRET\x00\x02"
	// retainedLogMagicV1 is the header of a log with unkeyed checksums
	// (crc32c of the body alone), with no key after it.
	retainedLogMagicV1 = "FMQRET\x00\x01"
	retainedLogKey     = 16 // bytes of key after the magic
)

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
	head      int64            // bytes of the file's header
	seed      uint32           // the checksum of the file's key, where every record's starts
	keyed     bool             // the file has a key: its damage can be salvaged
	live      map[string]int64 // topic -> size of its set record in the file
	liveBytes int64
	rewrite   bool // the next save writes a compacted log
	corrupt   bool // the file is damaged and not kept aside yet: keep it before rewriting it
	buf       []byte
}

func newRetainedLog(statePath string, log *slog.Logger) *retainedLog {
	return &retainedLog{path: statePath + ".retained", log: log, minCompact: defaultMinCompact, live: make(map[string]int64)}
}

// deadBytes is what the file holds beyond the header and live records.
func (l *retainedLog) deadBytes() int64 {
	return l.size - l.head - l.liveBytes
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
	switch string(head) {
	case retainedLogMagic:
		key := make([]byte, retainedLogKey)
		if _, err := io.ReadFull(r, key); err != nil {
			l.log.Warn("retained log: no records, rewritten at the next save", "path", l.path, "bytes", n)
			return nil
		}
		l.seed, l.keyed, l.head = crc32.Checksum(key, castagnoli), true, int64(len(retainedLogMagic)+retainedLogKey)
	case retainedLogMagicV1:
		l.seed, l.keyed, l.head = 0, false, int64(len(retainedLogMagicV1))
		l.rewrite = true // with a key
	default:
		return fmt.Errorf("%s: not a retained log (header %q)", l.path, head)
	}
	type last struct {
		msg  *Message // nil: cleared
		size int64
	}
	topics := make(map[string]last)
	off, total := l.head, fi.Size()
	var body []byte
	var bad string
	records := 0
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
		if crc32.Update(l.seed, castagnoli, body) != binary.LittleEndian.Uint32(h[4:]) {
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
		records++
	}
	l.size = off
	if bad != "" {
		rest := make([]byte, total-off)
		if _, err := f.ReadAt(rest, off); err != nil {
			return fmt.Errorf("%s: read the damaged part: %w", l.path, err)
		}
		var recs []salvaged
		skipped, torn := int64(len(rest)), cutShort(rest)
		if l.keyed {
			recs, skipped, torn = salvage(rest, l.seed)
		}
		if torn {
			// The last record: an append that a crash cut short.
			l.log.Warn("retained log: ignoring a torn last record", "path", l.path, "offset", off, "bytes", total-off)
		} else {
			for _, x := range recs {
				topics[x.topic] = last{msg: x.msg, size: x.size}
			}
			l.size = total
			l.corrupt, l.rewrite = true, true
			aside, err := l.keepAside()
			l.log.Error("retained log: damaged; the records found again after the damage are loaded, the rest is skipped, and the damaged file is kept aside",
				"path", l.path, "offset", off, "problem", bad, "records_read", records, "records_salvaged", len(recs),
				"bytes_skipped", skipped, "kept_as", aside, "error", err)
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
		binary.LittleEndian.PutUint32(b[start+4:], crc32.Update(l.seed, castagnoli, body))
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
	key := make([]byte, retainedLogKey)
	rand.Read(key)
	seed := crc32.Checksum(key, castagnoli)
	w.WriteString(retainedLogMagic)
	w.Write(key)
	live := make(map[string]int64, len(changes))
	size, liveBytes := int64(len(retainedLogMagic)+retainedLogKey), int64(0)
	b := l.buf[:0]
	for _, c := range changes {
		if c.msg.expired(now) {
			continue
		}
		b = appendSetRecord(append(b[:0], make([]byte, recordHeader)...), c.msg)
		body := b[recordHeader:]
		binary.LittleEndian.PutUint32(b, uint32(len(body)))
		binary.LittleEndian.PutUint32(b[4:], crc32.Update(seed, castagnoli, body))
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
		// Not kept aside at load: never replaced before it is.
		aside, err := l.keepAside()
		if err != nil {
			return fmt.Errorf("%s: keep the damaged log aside before replacing it: %w", l.path, err)
		}
		l.log.Warn("retained log: damaged file kept aside", "path", aside)
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	l.size, l.live, l.liveBytes = size, live, liveBytes
	l.head, l.seed, l.keyed = int64(len(retainedLogMagic)+retainedLogKey), seed, true
	l.rewrite, l.corrupt = false, false
	return nil
}

// keptDamaged is how many damaged logs are kept aside at most: each is a
// whole log, and a failing disk damages again and again.
const keptDamaged = 3

// keepAside gives the damaged log a second name beside it,
// PATH.retained.damaged-<UTC time>[-N] (a hard link, or a copy where links
// are not possible), so that no save replaces its bytes, and returns that
// name. Of the logs kept aside, the keptDamaged newest stay.
func (l *retainedLog) keepAside() (aside string, err error) {
	defer func() {
		if err == nil {
			l.pruneDamaged()
		}
	}()
	base := l.path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
	// After the last of this second's, even if older ones were removed
	// (pruneDamaged orders them by that number).
	first := 1
	same, _ := filepath.Glob(base + "*")
	for _, x := range same {
		_, n := l.damagedOrder(x)
		first = max(first, n+1)
	}
	for i := first; i < first+100; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		if err = os.Link(l.path, name); err == nil {
			l.corrupt = false
			return name, nil
		}
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err = copyFile(l.path, name); err == nil {
			l.corrupt = false
			return name, nil
		}
		return "", err
	}
	return "", err
}

// pruneDamaged removes the damaged logs kept aside but the keptDamaged
// newest (damagedOrder).
func (l *retainedLog) pruneDamaged() {
	names, _ := filepath.Glob(l.path + ".damaged-*")
	if len(names) <= keptDamaged {
		return
	}
	slices.SortFunc(names, func(a, b string) int {
		sa, na := l.damagedOrder(a)
		sb, nb := l.damagedOrder(b)
		return cmp.Or(strings.Compare(sa, sb), na-nb)
	})
	for _, old := range names[:len(names)-keptDamaged] {
		if err := os.Remove(old); err != nil {
			l.log.Warn("retained log: could not remove an old damaged log", "path", old, "error", err)
		}
	}
}

// damagedOrder is where a damaged log kept aside (PATH.damaged-<UTC
// time>[-N]) comes among them: its time, then N (1 without one).
func (l *retainedLog) damagedOrder(name string) (stamp string, n int) {
	stamp, suffix, _ := strings.Cut(strings.TrimPrefix(name, l.path+".damaged-"), "-")
	if n, _ = strconv.Atoi(suffix); n < 1 {
		n = 1
	}
	return stamp, n
}

// copyFile copies src to a new file dst and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// salvaged is a record read from the damaged part of a log.
type salvaged struct {
	topic string
	msg   *Message // nil: a clear
	size  int64
}

// salvage reads what it can of rest, the part of a retained log from a
// damaged record to the end: the records that verify, in order. A record
// that does not is read again with the length its checksum gives (a
// damaged length field); failing that, reading goes on from the first
// offset after it from which whole records run to the end of the file, and
// what lies between is skipped. torn reports a crash's torn last record
// instead: the damaged record is cut short and nothing after it verifies.
func salvage(rest []byte, seed uint32) (recs []salvaged, skipped int64, torn bool) {
	pos := 0
	for pos < len(rest) {
		if size := verifiedAt(rest, pos, seed); size > 0 {
			recs = appendSalvaged(recs, rest[pos+recordHeader:pos+size])
			pos += size
			continue
		}
		if end := relength(rest, pos, seed); end > 0 {
			recs = appendSalvaged(recs, rest[pos+recordHeader:end])
			pos = end
			continue
		}
		if cutShort(rest[pos:]) {
			// Its length runs past the end and no shorter body verifies:
			// a torn last record (a crash during an append), or a damaged
			// length over a damaged body (what follows is given up). Never
			// searched for records: its body may be a tenant's payload,
			// whose bytes can have the shape and checksum of records.
			if pos == 0 {
				return nil, 0, true
			}
			skipped += int64(len(rest) - pos)
			break
		}
		next := -1
		for q := pos + 1; q+recordHeader < len(rest) && next < 0; q++ {
			if runsToEnd(rest, q, seed) {
				next = q
			}
		}
		if next < 0 {
			if pos == 0 && cutShort(rest) {
				return nil, 0, true
			}
			skipped += int64(len(rest) - pos)
			break
		}
		skipped += int64(next - pos)
		pos = next
	}
	return recs, skipped, false
}

// verifiedAt returns the size of the record at b[pos:] when its length fits,
// its body has a record's shape and its checksum is right; 0 otherwise.
func verifiedAt(b []byte, pos int, seed uint32) int {
	if len(b)-pos < recordHeader {
		return 0
	}
	n := int64(binary.LittleEndian.Uint32(b[pos:]))
	if n > int64(len(b)-pos-recordHeader) {
		return 0
	}
	body := b[pos+recordHeader : pos+recordHeader+int(n)]
	if !recordShape(body) || crc32.Update(seed, castagnoli, body) != binary.LittleEndian.Uint32(b[pos+4:]) {
		return 0
	}
	return recordHeader + int(n)
}

// relength returns where the record at b[pos:] ends when its checksum
// and shape hold for a body of another length than its length field says
// (the field is damaged, the body is not); 0 when none does.
func relength(b []byte, pos int, seed uint32) int {
	if len(b)-pos <= recordHeader {
		return 0
	}
	want := binary.LittleEndian.Uint32(b[pos+4:])
	crc := seed
	start := pos + recordHeader
	for end := start + 1; end <= len(b); end++ {
		crc = crc32.Update(crc, castagnoli, b[end-1:end])
		if crc == want && recordShape(b[start:end]) {
			return end
		}
	}
	return 0
}

// runsToEnd reports whether whole records that verify run from b[q:] to
// the end of b.
func runsToEnd(b []byte, q int, seed uint32) bool {
	for q < len(b) {
		size := verifiedAt(b, q, seed)
		if size == 0 {
			return false
		}
		q += size
	}
	return true
}

// cutShort reports whether the record at the start of b is cut short by
// the end of b: a header cut short, or a length past the end.
func cutShort(b []byte) bool {
	return len(b) < recordHeader || int64(binary.LittleEndian.Uint32(b)) > int64(len(b)-recordHeader)
}

// appendSalvaged decodes a verified body onto recs (one that does not
// decode is left out).
func appendSalvaged(recs []salvaged, body []byte) []salvaged {
	topic, m, err := decodeRecord(body)
	if err != nil {
		return recs
	}
	return append(recs, salvaged{topic: topic, msg: m, size: int64(recordHeader + len(body))})
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
