// Package canonjson writes the canonical form of a JSON document into a
// hash, streaming: the form encoding/json writes for the value decoded with
// UseNumber, object members sorted by name.
package canonjson

import (
	"bytes"
	"hash"
	"math"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that is
// canonicalised. A deeper body is hashed as its bytes: still one hash per
// request, only a retry that re-serialises it no longer matches. Real
// request bodies stay far below it, and the bound keeps the work of
// reordering nested objects linear in the body's size.
const MaxDepth = 64

// Write writes the canonical form of body to h as one framed part
// (8-byte length, then the bytes) and reports true; it reports false, having
// written to h what the caller must then throw away, when body is not exactly one valid UTF-8 JSON value, is
// nested deeper than MaxDepth, or holds an object with a repeated
// member name (which a handler's decoder may read as either value, so such
// a body is hashed as its bytes and never matches its deduplicated form).
//
// The canonical form is the one encoding/json writes for the value decoded
// with UseNumber (object members sorted by name, no white space, numbers as
// written, strings re-escaped uniformly, HTML characters not escaped), so
// hashes made before the canonicaliser streamed are unchanged. It is built
// in two passes over body: the first validates and measures (the length
// comes first in the frame), the second streams the bytes into h. Only
// objects are buffered, since their members must be sorted: memory stays
// within the size of the largest object plus, for nested objects that are
// not already in order, a second buffer of the largest such object, and
// four bytes per open member.
func Write(h hash.Hash, body []byte) bool {
	return WriteBuffered(h, body, nil)
}

// Buffers holds the emitting pass's buffers between calls, so that a
// caller that canonicalises many bodies allocates them once. A Buffers is
// used by one call at a time.
type Buffers struct {
	stage, out []byte
	members    []uint32
}

// keptBuffer is the largest buffer a Buffers keeps for the next call: a
// large body's buffers are left to the collector.
const keptBuffer = 64 << 10

// WriteBuffered is Write with its buffers taken from buf and kept there
// for the next call; nil buf is Write.
func WriteBuffered(h hash.Hash, body []byte, buf *Buffers) bool {
	if len(body) > math.MaxUint32/2 {
		return false
	}
	m := canonicaliser{src: body, measuring: true}
	if !m.document() {
		return false
	}
	if buf == nil {
		buf = &Buffers{}
	}
	e := canonicaliser{
		src:     body,
		h:       h,
		stage:   reuse(buf.stage, min(4096, m.n+8)),
		out:     reuse(buf.out, m.maxOuter),
		members: reuse(buf.members, m.maxOpenMembers),
		tempCap: m.maxNested,
	}
	defer func() {
		if cap(e.stage) <= keptBuffer && cap(e.out) <= keptBuffer && cap(e.members) <= keptBuffer {
			buf.stage, buf.out, buf.members = e.stage[:0], e.out[:0], e.members[:0]
		}
	}()
	writeLength(&e, m.n)
	if !e.document() || e.n != m.n+8 {
		return false // a repeated member name
	}
	e.flush()
	return true
}

// reuse returns b emptied when it holds n elements, else a new slice.
func reuse[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:0]
	}
	return make([]T, 0, n)
}

// writeLength starts the frame of a part of n bytes.
func writeLength(c *canonicaliser, n int) {
	var b [8]byte
	for i := range 8 {
		b[i] = byte(uint64(n) >> (56 - 8*i))
	}
	c.stage = append(c.stage, b[:]...)
	c.n += 8
}

// canonicaliser walks one JSON text. Measuring, it validates and counts the
// canonical bytes and the buffer sizes the emitting pass needs; emitting, it
// writes the canonical bytes into h (through stage), or into out while an
// object is open. A walk that fails part way has written part of a value
// into h; the caller then starts a new hash.
type canonicaliser struct {
	src       []byte
	pos       int
	measuring bool

	// n counts the canonical bytes written (measured) so far.
	n int

	// Measured sizes.
	maxOuter       int // largest outermost object's canonical size
	maxNested      int // largest nested object with members to sort
	maxOpenMembers int // most members open at once
	openMembers    int

	// Emitting state.
	h        hash.Hash
	stage    []byte   // bytes on their way to h
	out      []byte   // the open objects' bytes
	members  []uint32 // start in out of each member of each open object
	objects  int      // open objects
	temp     []byte   // reordering space for nested objects
	tempCap  int
	keyA     []byte // decoded names, for comparing escaped ones
	keyB     []byte
	repeated bool // an object holds a name twice
}

// document walks the whole body: one value between optional white space.
func (c *canonicaliser) document() bool {
	c.space()
	if !c.value(0) {
		return false
	}
	c.space()
	return c.pos == len(c.src) && !c.repeated
}

func (c *canonicaliser) space() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// emit writes b to wherever the canonical bytes go now.
func (c *canonicaliser) emit(b ...byte) {
	c.n += len(b)
	switch {
	case c.measuring:
	case c.objects > 0:
		c.out = append(c.out, b...)
	default:
		c.toHash(b)
	}
}

// toHash passes b on to h through stage, so that h sees few large writes
// and b, copied, never escapes to the heap.
func (c *canonicaliser) toHash(b []byte) {
	for len(b) > 0 {
		if len(c.stage) == cap(c.stage) {
			c.flush()
		}
		n := min(len(b), cap(c.stage)-len(c.stage))
		c.stage = append(c.stage, b[:n]...)
		b = b[n:]
	}
}

func (c *canonicaliser) flush() {
	if len(c.stage) > 0 {
		c.h.Write(c.stage)
		c.stage = c.stage[:0]
	}
}

func (c *canonicaliser) value(depth int) bool {
	if c.pos >= len(c.src) {
		return false
	}
	switch b := c.src[c.pos]; {
	case b == '{':
		return depth < MaxDepth && c.object(depth+1)
	case b == '[':
		return depth < MaxDepth && c.array(depth+1)
	case b == '"':
		return c.str()
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	default:
		return c.literal("true") || c.literal("false") || c.literal("null")
	}
}

func (c *canonicaliser) literal(word string) bool {
	if !bytes.HasPrefix(c.src[c.pos:], []byte(word)) {
		return false
	}
	c.emit(c.src[c.pos : c.pos+len(word)]...)
	c.pos += len(word)
	return true
}

// number copies a number as written, after checking its grammar.
func (c *canonicaliser) number() bool {
	start := c.pos
	digits := func() int {
		n := 0
		for c.pos < len(c.src) && c.src[c.pos] >= '0' && c.src[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	if c.src[c.pos] == '-' {
		c.pos++
	}
	switch {
	case c.pos < len(c.src) && c.src[c.pos] == '0':
		c.pos++
	case digits() == 0:
		return false
	}
	if c.pos < len(c.src) && c.src[c.pos] == '.' {
		c.pos++
		if digits() == 0 {
			return false
		}
	}
	if c.pos < len(c.src) && (c.src[c.pos] == 'e' || c.src[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.src) && (c.src[c.pos] == '+' || c.src[c.pos] == '-') {
			c.pos++
		}
		if digits() == 0 {
			return false
		}
	}
	c.emit(c.src[start:c.pos]...)
	return true
}

func (c *canonicaliser) array(depth int) bool {
	c.pos++
	c.emit('[')
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == ']' {
		c.pos++
		c.emit(']')
		return true
	}
	for {
		c.space()
		if !c.value(depth) {
			return false
		}
		c.space()
		if c.pos >= len(c.src) {
			return false
		}
		switch c.src[c.pos] {
		case ',':
			c.pos++
			c.emit(',')
		case ']':
			c.pos++
			c.emit(']')
			return true
		default:
			return false
		}
	}
}

func (c *canonicaliser) object(depth int) bool {
	c.pos++
	outermost := c.objects == 0
	// The outermost object's opening brace goes straight on; inside an
	// object everything is buffered.
	c.emit('{')
	c.objects++
	start, base, sizeBefore := len(c.out), len(c.members), c.n
	members := 0
	c.space()
	if c.pos < len(c.src) && c.src[c.pos] == '}' {
		c.pos++
	} else {
		for {
			c.space()
			if c.pos >= len(c.src) || c.src[c.pos] != '"' {
				return false
			}
			if members > 0 {
				c.emit(',')
			}
			members++
			c.openMembers++
			c.maxOpenMembers = max(c.maxOpenMembers, c.openMembers)
			if !c.measuring {
				c.members = append(c.members, uint32(len(c.out)))
			}
			if !c.str() {
				return false
			}
			c.space()
			if c.pos >= len(c.src) || c.src[c.pos] != ':' {
				return false
			}
			c.pos++
			c.emit(':')
			c.space()
			if !c.value(depth) {
				return false
			}
			c.space()
			if c.pos >= len(c.src) {
				return false
			}
			if c.src[c.pos] == '}' {
				c.pos++
				break
			}
			if c.src[c.pos] != ',' {
				return false
			}
			c.pos++
		}
	}
	c.openMembers -= members
	size := c.n - sizeBefore // members and commas
	switch {
	case c.measuring:
		if outermost {
			c.maxOuter = max(c.maxOuter, size)
		} else if members > 1 {
			c.maxNested = max(c.maxNested, size)
		}
	case members > 1:
		c.order(start, base, outermost)
	case outermost:
		c.toHash(c.out)
	}
	c.members = c.members[:base]
	c.objects--
	if outermost {
		c.out = c.out[:0]
	}
	c.emit('}')
	return !c.repeated
}

// order puts the members of the object whose members are listed in
// members[base:] (each at its start in out) in name order: into h for the
// outermost object, in place in out (from start) for a nested one. It sets
// repeated, and stops, when two members share a name.
func (c *canonicaliser) order(start, base int, outermost bool) {
	starts := c.members[base:]
	sorted := true
	for i := 1; i < len(starts) && sorted; i++ {
		sorted = c.compareNames(starts[i-1], starts[i]) < 0
	}
	if !sorted {
		slices.SortFunc(starts, c.compareNames)
	}
	for i := 1; i < len(starts); i++ {
		if c.compareNames(starts[i-1], starts[i]) == 0 {
			c.repeated = true
			return
		}
	}
	switch {
	case outermost && sorted:
		c.toHash(c.out)
	case outermost:
		for i, s := range starts {
			if i > 0 {
				c.toHash([]byte{','})
			}
			c.toHash(c.out[s:c.memberEnd(int(s))])
		}
	case !sorted:
		if c.temp == nil {
			c.temp = make([]byte, 0, c.tempCap)
		}
		c.temp = c.temp[:0]
		for i, s := range starts {
			if i > 0 {
				c.temp = append(c.temp, ',')
			}
			c.temp = append(c.temp, c.out[s:c.memberEnd(int(s))]...)
		}
		copy(c.out[start:], c.temp)
	}
}

// memberEnd returns the end in out of the canonical member starting at i.
func (c *canonicaliser) memberEnd(i int) int {
	i = skipCanonical(c.out, i) + 1 // name and colon
	return skipCanonical(c.out, i)
}

// skipCanonical returns the end of the canonical value starting at b[i].
func skipCanonical(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// compareNames orders two members of out by their decoded names, as
// encoding/json orders map keys.
func (c *canonicaliser) compareNames(a, b uint32) int {
	na, nb := canonicalName(c.out, int(a)), canonicalName(c.out, int(b))
	if bytes.IndexByte(na, '\\') < 0 && bytes.IndexByte(nb, '\\') < 0 {
		return bytes.Compare(na, nb)
	}
	c.keyA = unescapeCanonical(c.keyA[:0], na)
	c.keyB = unescapeCanonical(c.keyB[:0], nb)
	return bytes.Compare(c.keyA, c.keyB)
}

// canonicalName returns the escaped name, without quotes, of the member
// starting at b[i].
func canonicalName(b []byte, i int) []byte {
	end := skipCanonical(b, i)
	return b[i+1 : end-1]
}

// unescapeCanonical decodes the escapes the canonical form writes.
func unescapeCanonical(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			dst = utf8.AppendRune(dst, rune(hex4(s[i+1:i+5])))
			i += 4
		default: // '"' and '\\'
			dst = append(dst, s[i])
		}
	}
	return dst
}

// str re-escapes a string the way encoding/json writes a decoded one.
func (c *canonicaliser) str() bool {
	c.pos++ // opening quote
	c.emit('"')
	for {
		// Copy a run of bytes that stay as they are.
		run := c.pos
		for c.pos < len(c.src) {
			b := c.src[c.pos]
			if b < 0x20 || b == '"' || b == '\\' || b >= utf8.RuneSelf {
				break
			}
			c.pos++
		}
		if run < c.pos {
			c.emit(c.src[run:c.pos]...)
		}
		if c.pos >= len(c.src) {
			return false
		}
		switch b := c.src[c.pos]; {
		case b == '"':
			c.pos++
			c.emit('"')
			return true
		case b < 0x20:
			return false // a raw control character is not JSON
		case b == '\\':
			r, ok := c.escape()
			if !ok {
				return false
			}
			c.rune(r)
		default:
			r, size := utf8.DecodeRune(c.src[c.pos:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			if r == '\u2028' || r == '\u2029' {
				c.rune(r)
			} else {
				c.emit(c.src[c.pos : c.pos+size]...)
			}
			c.pos += size
		}
	}
}

// escape decodes the escape at src[pos] as encoding/json does: a valid
// surrogate pair is one rune, any other surrogate is U+FFFD.
func (c *canonicaliser) escape() (rune, bool) {
	if c.pos+1 >= len(c.src) {
		return 0, false
	}
	c.pos += 2
	switch c.src[c.pos-1] {
	case '"', '\\', '/':
		return rune(c.src[c.pos-1]), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r := c.u4(c.pos - 2)
		if r < 0 {
			return 0, false
		}
		c.pos += 4
		if utf16.IsSurrogate(r) {
			if dec := utf16.DecodeRune(r, c.u4(c.pos)); dec != utf8.RuneError {
				c.pos += 6
				return dec, true
			}
			return utf8.RuneError, true
		}
		return r, true
	}
	return 0, false
}

// u4 reads a \uXXXX escape at src[i], or returns -1.
func (c *canonicaliser) u4(i int) rune {
	if i+6 > len(c.src) || c.src[i] != '\\' || c.src[i+1] != 'u' {
		return -1
	}
	return hex4(c.src[i+2 : i+6])
}

func hex4(b []byte) rune {
	var r rune
	for _, d := range b[:4] {
		switch {
		case d >= '0' && d <= '9':
			d -= '0'
		case d >= 'a' && d <= 'f':
			d = d - 'a' + 10
		case d >= 'A' && d <= 'F':
			d = d - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(d)
	}
	return r
}

const hexDigits = "0123456789abcdef"

// rune writes r as encoding/json writes it inside a string.
func (c *canonicaliser) rune(r rune) {
	switch {
	case r == '"' || r == '\\':
		c.emit('\\', byte(r))
	case r == '\b':
		c.emit('\\', 'b')
	case r == '\f':
		c.emit('\\', 'f')
	case r == '\n':
		c.emit('\\', 'n')
	case r == '\r':
		c.emit('\\', 'r')
	case r == '\t':
		c.emit('\\', 't')
	case r < 0x20:
		c.emit('\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	case r == '\u2028' || r == '\u2029':
		c.emit('\\', 'u', '2', '0', '2', hexDigits[r&0xf])
	default:
		var b [utf8.UTFMax]byte
		c.emit(b[:utf8.EncodeRune(b[:], r)]...)
	}
}
