package rules

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// maxOffsetValue bounds the offset header's value: longer is bad, read no
// further.
const maxOffsetValue = 32

// buildOffsetHeader compiles a rule's offset_header. It moves calendar
// windows only, so the rule's limit and every override's and tier's must
// be one.
func buildOffsetHeader(at string, rc RuleConfig, rl *Rule, ci ClientIP, fail func(string, string, ...any)) {
	if rc.OffsetHeader == "" {
		return
	}
	field := at + ".offset_header"
	name := proxyHeader(field, rc.OffsetHeader, ci, "give a client its offset", fail)
	switch {
	case name == "":
		return
	case rl.Limit.Calendar == "":
		fail(field, "moves the boundaries of a calendar window, and the rule's limit has no calendar: add calendar (%s) or remove offset_header", calendars)
	case name == rl.tierHeader:
		fail(field, "%s already names the tier (tiers.header): give the offset a header of its own", name)
	case rc.StoreMode != "":
		fail(at+".store_mode", "decides the limits the file writes, and a client's offset (offset_header) makes a limit of its own: remove store_mode or offset_header")
	}
	for _, a := range rl.Alts {
		if a.Limit.Calendar == "" {
			fail(a.field, "has no calendar, and offset_header moves calendar boundaries: write its calendar, or remove its period")
		}
	}
	rl.offsetHeader = name
	rl.offsetHexes = new(offsetHexes)
}

// clientOffset sets m's offset from the offset header of the request v,
// which only a trusted proxy may give. An override that writes its own
// offset keeps it; every other limit takes a good value. A bad one sets
// BadOffset, and the limit's own offset applies.
func (rl *Rule) clientOffset(m *Match, v view) {
	l := &rl.Limit
	if m.Alt > 0 {
		a := &rl.Alts[m.Alt-1]
		if a.ownOffset {
			return
		}
		l = &a.Limit
	}
	vs := v.r.Header[rl.offsetHeader]
	if len(vs) == 0 || !rl.clientIP.Trusts(v.r) {
		return
	}
	d, ok := headerOffset(vs, l.Calendar)
	if !ok {
		m.BadOffset = true
		return
	}
	m.Offset, m.OwnOffset = d, d != l.Offset
}

// headerOffset reads an offset header's values vs as an offset of a
// calendar c: one value, as the offset field writes it, from 0 up to less
// than c's unit, in whole microseconds. White space around it that HTTP
// does not trim (U+00A0) makes it bad: the upstream would get it.
func headerOffset(vs []string, c ratekeeper.Calendar) (time.Duration, bool) {
	if len(vs) != 1 || len(vs[0]) > maxOffsetValue || strings.TrimSpace(vs[0]) != strings.Trim(vs[0], " \t") {
		return 0, false
	}
	d, err := ParseDuration(vs[0])
	if err != nil || d < 0 || d >= c.MaxOffset() || d%time.Microsecond != 0 {
		return 0, false
	}
	return d, true
}

// offsetHexes caches the limit hashes of clients' offsets: each slot
// holds the last (limit, offset) that fell in it. A hit costs no hash and
// no allocation; the slots bound the memory. Slots follow days, hours and
// minutes, so that the 31 billing days of a month, or the 24 hours of a
// day, never share one.
type offsetHexes [128]atomic.Pointer[offsetHash]

// offsetHash is one cached hash: alt (Match.Alt) names the limit.
type offsetHash struct {
	alt    int
	offset time.Duration
	hex    [8]byte
}

// offsetHex is limitHex(l), where l is the limit of alt (Match.Alt)
// moved by a client's offset.
func (rl *Rule) offsetHex(alt int, l ratekeeper.Limit) [8]byte {
	const day = 24 * time.Hour
	days, rest := uint64(l.Offset/day), l.Offset%day
	i := (days + uint64(rest/time.Hour)*5 + uint64(rest%time.Hour/time.Minute)*11 + uint64(alt)*37) % uint64(len(rl.offsetHexes))
	slot := &rl.offsetHexes[i]
	if h := slot.Load(); h != nil && h.alt == alt && h.offset == l.Offset {
		return h.hex
	}
	h := &offsetHash{alt: alt, offset: l.Offset, hex: limitHex(l)}
	slot.Store(h)
	return h.hex
}
