package jsonmeter

// state is where the scanner is in a JSON document.
type state uint8

const (
	stValue        state = iota // a value is due
	stValueOrClose              // after '[': a value or ']'
	stKeyOrClose                // after '{': a key or '}'
	stKey                       // after ',' in an object: a key
	stColon                     // after a key
	stAfter                     // after a value inside a container
	stString                    // in a string
	stEscape                    // after a backslash in a string
	stUnicode                   // in a \u escape
	stNeg                       // number states, in the order of the grammar
	stZero
	stInt
	stDot
	stFrac
	stE
	stESign
	stExp
	stLiteral    // in true, false or null
	stDeep       // in a container past MaxNesting, passed over unread
	stDeepString // in a string there
	stDeepEscape // after a backslash in a string there
	stEnd        // the top value is complete
	stBroken     // not JSON, or past a bound: nothing more is read
)

// scanner is the state of one document: bounded by MaxNesting, MaxKey
// and MaxNumber.
type scanner struct {
	st      state
	depth   int
	arrays  uint64                // bit d-1: the container at depth d is an array
	ctx     [MaxNesting + 1]uint8 // ctx[d]: the paths the object at depth d is on
	cur     uint8                 // the paths the value due is on
	inKey   bool
	key     [MaxKey]byte
	keyLen  int // > MaxKey: the key matches no path
	hex     int
	code    rune
	lit     string // the rest of the literal
	num     [MaxNumber]byte
	numLen  int // > MaxNumber: too long to read
	numMask uint8
	deep    int // the containers open past MaxNesting (stDeep)
}

// feed scans p as part of the document.
func (m *Meter) feed(p []byte) {
	s := &m.doc
	for i := 0; i < len(p) && s.st != stBroken; i++ {
		c := p[i]
		if s.st == stString && !s.inKey || s.st == stDeepString {
			// The run of a value string, the body's bulk, in a tight loop.
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				j++
			}
			if j == len(p) {
				return
			}
			i, c = j, p[j]
		}
		m.step(c)
	}
}

// step scans one byte.
func (m *Meter) step(c byte) {
	s := &m.doc
	switch s.st {
	case stValue, stValueOrClose:
		if s.st == stValueOrClose && c == ']' {
			m.close(c)
			return
		}
		m.value(c)
	case stKeyOrClose, stKey:
		switch {
		case isSpace(c):
		case c == '"':
			s.st, s.inKey, s.keyLen = stString, true, 0
		case c == '}' && s.st == stKeyOrClose:
			m.close(c)
		default:
			s.st = stBroken
		}
	case stColon:
		switch {
		case isSpace(c):
		case c == ':':
			s.st = stValue
		default:
			s.st = stBroken
		}
	case stAfter:
		m.after(c)
	case stString, stEscape, stUnicode:
		m.str(c)
	case stLiteral:
		if c != s.lit[0] {
			s.st = stBroken
		} else if s.lit = s.lit[1:]; s.lit == "" {
			m.valueDone()
		}
	case stDeep, stDeepString, stDeepEscape:
		m.deepByte(c)
	case stEnd:
		if !isSpace(c) {
			s.st = stBroken
		}
	default:
		m.numberByte(c)
	}
}

// value starts the value due with c.
func (m *Meter) value(c byte) {
	s := &m.doc
	at := s.cur & m.full[s.depth] // the paths that end here
	switch {
	case isSpace(c):
		return
	case c == '-' || (c >= '0' && c <= '9'):
		s.numMask, s.numLen = at, 0
		s.st = stNeg
		m.numberByte(c)
		return
	case c == 'n':
		s.st, s.lit = stLiteral, "ull"
		return
	}
	if at != 0 {
		m.bad = true // a path's value is not a number
	}
	switch c {
	case '"':
		s.st, s.inKey = stString, false
	case 't':
		s.st, s.lit = stLiteral, "rue"
	case 'f':
		s.st, s.lit = stLiteral, "alse"
	case '{', '[':
		m.open(c)
	default:
		s.st = stBroken
	}
}

// open enters an object or array.
func (m *Meter) open(c byte) {
	s := &m.doc
	if s.depth == MaxNesting {
		s.st, s.deep = stDeep, 1
		return
	}
	inner := s.cur & m.longer[s.depth]
	s.depth++
	if c == '[' {
		s.arrays |= 1 << (s.depth - 1)
		s.st, s.cur = stValueOrClose, 0
		return
	}
	s.arrays &^= 1 << (s.depth - 1)
	s.ctx[s.depth] = inner
	s.st = stKeyOrClose
}

// close leaves a container with c, which must be its closing bracket.
func (m *Meter) close(c byte) {
	s := &m.doc
	if (c == ']') != (s.arrays&(1<<(s.depth-1)) != 0) {
		s.st = stBroken
		return
	}
	s.depth--
	m.valueDone()
}

// deepByte reads c in a container nested past MaxNesting. No path reaches
// there (a path has at most MaxPathKeys keys), so it is passed over: only
// its strings and brackets are followed, to find where it closes.
func (m *Meter) deepByte(c byte) {
	s := &m.doc
	switch {
	case s.st == stDeepEscape:
		s.st = stDeepString
	case s.st == stDeepString:
		switch c {
		case '"':
			s.st = stDeep
		case '\\':
			s.st = stDeepEscape
		}
	case c == '"':
		s.st = stDeepString
	case c == '[' || c == '{':
		s.deep++
	case c == ']' || c == '}':
		if s.deep--; s.deep == 0 {
			m.valueDone()
		}
	}
}

// after reads what follows a value inside a container.
func (m *Meter) after(c byte) {
	s := &m.doc
	switch {
	case isSpace(c):
	case c == ',' && s.arrays&(1<<(s.depth-1)) != 0:
		s.st, s.cur = stValue, 0
	case c == ',':
		s.st = stKey
	case c == ']' || c == '}':
		m.close(c)
	default:
		s.st = stBroken
	}
}

// valueDone moves past a complete value.
func (m *Meter) valueDone() {
	s := &m.doc
	if s.depth == 0 {
		s.st = stEnd
	} else {
		s.st = stAfter
	}
}

// str reads one byte of a string: a key's bytes are kept, up to MaxKey.
func (m *Meter) str(c byte) {
	s := &m.doc
	switch s.st {
	case stString:
		switch {
		case c == '"' && s.inKey:
			m.keyDone()
		case c == '"':
			m.valueDone()
		case c == '\\':
			s.st = stEscape
		case c < 0x20:
			s.st = stBroken
		default:
			s.keyByte(c)
		}
	case stEscape:
		s.st = stString
		switch c {
		case '"', '\\', '/':
			s.keyByte(c)
		case 'b', 'f', 'n', 'r', 't':
			s.keyByte(0) // a control character: no path has one
		case 'u':
			s.st, s.hex, s.code = stUnicode, 0, 0
		default:
			s.st = stBroken
		}
	case stUnicode:
		h := hexValue(c)
		if h < 0 {
			s.st = stBroken
			return
		}
		s.code, s.hex = s.code<<4|rune(h), s.hex+1
		if s.hex == 4 {
			s.st = stString
			if s.code >= 0x80 {
				s.keyLen = MaxKey + 1 // not ASCII: no path has it
			}
			s.keyByte(byte(s.code))
		}
	}
}

// keyByte adds c to the key being read.
func (s *scanner) keyByte(c byte) {
	if !s.inKey {
		return
	}
	if s.keyLen < MaxKey && c < 0x80 {
		s.key[s.keyLen] = c
		s.keyLen++
	} else {
		s.keyLen = MaxKey + 1
	}
}

// keyDone sets the paths the key's value is on.
func (m *Meter) keyDone() {
	s := &m.doc
	s.st, s.inKey, s.cur = stColon, false, 0
	if s.keyLen > MaxKey {
		return
	}
	key := s.key[:s.keyLen]
	for i, p := range m.paths {
		if s.ctx[s.depth]&(1<<i) != 0 && p[s.depth-1] == string(key) {
			s.cur |= 1 << i
		}
	}
}

// numberByte reads c in a number, by JSON's grammar. A byte that cannot
// continue it ends it, and is read as what follows.
func (m *Meter) numberByte(c byte) {
	s := &m.doc
	digit := c >= '0' && c <= '9'
	next := stBroken
	switch s.st {
	case stNeg:
		if s.numLen == 0 && c == '-' {
			next = stNeg
		} else if c == '0' {
			next = stZero
		} else if digit {
			next = stInt
		}
	case stZero, stInt:
		switch {
		case digit && s.st == stInt:
			next = stInt
		case c == '.':
			next = stDot
		case c == 'e' || c == 'E':
			next = stE
		}
	case stDot, stFrac:
		if digit {
			next = stFrac
		} else if s.st == stFrac && (c == 'e' || c == 'E') {
			next = stE
		}
	case stE:
		if c == '+' || c == '-' {
			next = stESign
		} else if digit {
			next = stExp
		}
	case stESign, stExp:
		if digit {
			next = stExp
		}
	}
	if next != stBroken {
		s.st = next
		if s.numMask != 0 && s.numLen < MaxNumber {
			s.num[s.numLen] = c
		}
		s.numLen++
		return
	}
	if s.st == stZero || s.st == stInt || s.st == stFrac || s.st == stExp {
		m.endNumber()
		m.step(c)
		return
	}
	s.st = stBroken
}

// endNumber records a complete number at the paths it is on.
func (m *Meter) endNumber() {
	s := &m.doc
	if s.st != stZero && s.st != stInt && s.st != stFrac && s.st != stExp {
		s.st = stBroken
		return
	}
	m.valueDone()
	if s.numMask == 0 {
		return
	}
	v, ok := number(s.num[:min(s.numLen, MaxNumber)])
	if !ok || s.numLen > MaxNumber {
		m.bad = true
		return
	}
	m.record(s.numMask, v)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
