package jsonmeter

import "bytes"

// lineState is where the framing is in a line of an event stream.
type lineState uint8

const (
	lnStart lineState = iota // at the start of a line
	lnField                  // in a field name
	lnSpace                  // after "data:": one space is skipped
	lnData                   // in a data line's value
	lnSkip                   // in another field's line
)

// framing is the state of an event stream's lines: a data line's value
// goes to the event's document, the blank line after it ends the event.
type framing struct {
	ln      lineState
	field   [4]byte
	nameLen int  // > 4: not "data"
	cr      bool // the last byte was a CR: a LF after it ends no line
	hasData bool // the event has a data line
}

// frame reads p as part of an event stream.
func (m *Meter) frame(p []byte) {
	f := &m.sse
	for i := 0; i < len(p); i++ {
		c := p[i]
		if f.cr {
			f.cr = false
			if c == '\n' {
				continue
			}
		}
		if c == '\n' || c == '\r' {
			f.cr = c == '\r'
			m.lineEnd()
			continue
		}
		switch f.ln {
		case lnStart, lnField:
			if f.ln == lnStart {
				f.ln, f.nameLen = lnField, 0
			}
			m.fieldByte(c)
		case lnSpace, lnData:
			if f.ln == lnSpace {
				f.ln = lnData
				if c == ' ' {
					continue
				}
			}
			j := i + bytes.IndexByte(p[i:], '\n')
			if j < i {
				j = len(p)
			}
			if k := bytes.IndexByte(p[i:j], '\r'); k >= 0 {
				j = i + k
			}
			if m.doc.st != stBroken {
				m.feed(p[i:j])
			}
			i = j - 1
		}
	}
}

// fieldByte reads c in a field name; a colon ends the name.
func (m *Meter) fieldByte(c byte) {
	f := &m.sse
	if c != ':' {
		if f.nameLen < len(f.field) {
			f.field[f.nameLen] = c
		}
		f.nameLen++
		return
	}
	if m.isData() {
		m.dataLine()
		f.ln = lnSpace
	} else {
		f.ln = lnSkip
	}
}

func (m *Meter) isData() bool {
	f := &m.sse
	return f.nameLen == 4 && string(f.field[:]) == "data"
}

// dataLine starts a data line: lines of one event are joined by a LF.
func (m *Meter) dataLine() {
	if m.sse.hasData && m.doc.st != stBroken {
		m.step('\n')
	}
	m.sse.hasData = true
}

// lineEnd ends a line; a blank one ends the event.
func (m *Meter) lineEnd() {
	f := &m.sse
	switch f.ln {
	case lnStart:
		if f.hasData {
			m.endDoc()
			m.startDoc()
			f.hasData = false
		}
	case lnField:
		if m.isData() { // "data" alone is a data line with no value
			m.dataLine()
		}
	}
	f.ln = lnStart
}
