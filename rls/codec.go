package rls

import (
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// codec is the gRPC server's codec: the protobuf wire format, as gRPC's
// own proto codec writes and reads it, with two messages done by hand.
// A RateLimitRequest of the usual shape (domain, descriptors of entries,
// hits_addend) is read in two allocations: one string that every string
// field is a part of, and one block for the messages. (proto.Unmarshal
// allocates each message, slice and string apart, and walks its
// reflection tables.) A RateLimitResponse of the fields the service sets
// is written in one allocation, without proto.Size's walk of the message.
// Anything else goes to gRPC's proto codec, so the answers are the same.
// So does a request the hand reader would have to judge: an unknown
// field, a wire type out of place, a string that is not UTF-8, a
// descriptor's limit override or hits_addend.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(grpcproto.Name)} }

// Name is the content subtype the codec answers to.
func (codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rlsv3.RateLimitResponse); ok {
		if b, ok := appendResponse(nil, r); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok {
		var b []byte
		if len(data) == 1 {
			b = data[0].ReadOnlyData()
		} else {
			b = data.Materialize()
		}
		if readRequest(b, r) {
			return nil
		}
	}
	return c.proto.Unmarshal(data, v)
}

// Field numbers of the messages read or written by hand.
const (
	reqDomain      = 1 // RateLimitRequest
	reqDescriptors = 2
	reqHitsAddend  = 3
	descEntries    = 1 // RateLimitDescriptor
	entryKey       = 1 // RateLimitDescriptor.Entry
	entryValue     = 2

	respOverallCode = 1 // RateLimitResponse
	respStatuses    = 2
	respHeaders     = 3
	stCode          = 1 // RateLimitResponse.DescriptorStatus
	stCurrentLimit  = 2
	stRemaining     = 3
	stReset         = 4
	limRPU          = 1 // RateLimitResponse.RateLimit
	limUnit         = 2
	limName         = 3
	durSeconds      = 1 // google.protobuf.Duration
	durNanos        = 2
	hdrKey          = 1 // config.core.v3.HeaderValue
	hdrValue        = 2
)

// requestBlock holds the messages of a request of one descriptor with up
// to two entries, the usual shape, allocated together.
type requestBlock struct {
	descPtrs  [1]*ratelimitv3.RateLimitDescriptor
	desc      [1]ratelimitv3.RateLimitDescriptor
	entryPtrs [2]*ratelimitv3.RateLimitDescriptor_Entry
	entries   [2]ratelimitv3.RateLimitDescriptor_Entry
}

// readRequest decodes b into r, which must be empty, and reports whether
// it could; when it could not, r is left empty for proto to decode.
func readRequest(b []byte, r *rlsv3.RateLimitRequest) bool {
	nd, ne, ok := requestShape(b)
	if ok {
		fillRequest(b, r, nd, ne)
	}
	return ok
}

// requestShape reports whether b holds only the fields readRequest reads,
// well formed, with valid UTF-8 strings. It counts the descriptors (nd)
// and their entries (ne).
func requestShape(b []byte) (nd, ne int, ok bool) {
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return 0, 0, false
		}
		rest = rest[n:]
		switch {
		case num == reqDomain && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 || !utf8.Valid(v) {
				return 0, 0, false
			}
			rest = rest[n:]
		case num == reqHitsAddend && typ == protowire.VarintType:
			_, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return 0, 0, false
			}
			rest = rest[n:]
		case num == reqDescriptors && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return 0, 0, false
			}
			rest = rest[n:]
			k, ok := countEntries(v)
			if !ok {
				return 0, 0, false
			}
			nd++
			ne += k
		default:
			return 0, 0, false
		}
	}
	return nd, ne, true
}

// fillRequest decodes b, which requestShape found to hold nd descriptors
// of ne entries, into r. Every string field is a part of one string, and
// the messages are one block (see requestMessages).
func fillRequest(b []byte, r *rlsv3.RateLimitRequest, nd, ne int) {
	s := string(b)
	m := newRequestMessages(nd, ne)
	d, e := 0, 0
	for off := 0; off < len(b); {
		num, _, n := protowire.ConsumeTag(b[off:])
		off += n
		switch num {
		case reqDomain:
			r.Domain, n = readString(b, s, off)
		case reqHitsAddend:
			var v uint64
			v, n = protowire.ConsumeVarint(b[off:])
			r.HitsAddend = uint32(v)
		case reqDescriptors:
			var v []byte
			v, n = protowire.ConsumeBytes(b[off:])
			e = m.readDescriptor(b, s, off+n-len(v), off+n, d, e)
			d++
		}
		off += n
	}
	if nd > 0 {
		r.Descriptors = m.descPtrs
	}
}

// requestMessages are the messages of a request, and the slices of
// pointers to them that the request holds.
type requestMessages struct {
	descPtrs  []*ratelimitv3.RateLimitDescriptor
	descs     []ratelimitv3.RateLimitDescriptor
	entryPtrs []*ratelimitv3.RateLimitDescriptor_Entry
	entries   []ratelimitv3.RateLimitDescriptor_Entry
}

// newRequestMessages allocates the messages of nd descriptors of ne
// entries: one requestBlock for the usual shape, else a slice each.
func newRequestMessages(nd, ne int) requestMessages {
	if nd <= 1 && ne <= len(requestBlock{}.entries) {
		blk := new(requestBlock)
		return requestMessages{blk.descPtrs[:nd], blk.desc[:nd], blk.entryPtrs[:ne], blk.entries[:ne]}
	}
	return requestMessages{
		make([]*ratelimitv3.RateLimitDescriptor, nd), make([]ratelimitv3.RateLimitDescriptor, nd),
		make([]*ratelimitv3.RateLimitDescriptor_Entry, ne), make([]ratelimitv3.RateLimitDescriptor_Entry, ne),
	}
}

// readDescriptor decodes descriptor d, whose entries are b[start:end], into
// m, its entries from index e on. It returns the index after them.
func (m *requestMessages) readDescriptor(b []byte, s string, start, end, d, e int) int {
	desc := &m.descs[d]
	m.descPtrs[d] = desc
	first := e
	for p := start; p < end; {
		_, _, n := protowire.ConsumeTag(b[p:])
		p += n
		v, n := protowire.ConsumeBytes(b[p:])
		fields := p + n - len(v)
		p += n
		ent := &m.entries[e]
		m.entryPtrs[e] = ent
		e++
		for q := fields; q < p; {
			num, _, n := protowire.ConsumeTag(b[q:])
			q += n
			str, n := readString(b, s, q)
			q += n
			if num == entryKey {
				ent.Key = str
			} else {
				ent.Value = str
			}
		}
	}
	if e > first {
		desc.Entries = m.entryPtrs[first:e:e]
	}
	return e
}

// readString reads the bytes field at b[off:] as a part of s, which is b
// as a string, and its length on the wire.
func readString(b []byte, s string, off int) (string, int) {
	v, n := protowire.ConsumeBytes(b[off:])
	return s[off+n-len(v) : off+n], n
}

// countEntries checks that a descriptor holds entries (of a key and a
// value, UTF-8) and nothing else, and counts them.
func countEntries(b []byte) (int, bool) {
	k := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != descEntries || typ != protowire.BytesType {
			return 0, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 || (num != entryKey && num != entryValue) || typ != protowire.BytesType {
				return 0, false
			}
			v = v[n:]
			s, n := protowire.ConsumeBytes(v)
			if n < 0 || !utf8.Valid(s) {
				return 0, false
			}
			v = v[n:]
		}
		k++
	}
	return k, true
}

// appendResponse appends r's encoding, as proto.Marshal writes it, to b,
// and reports whether it could. A response with fields the service never
// sets (request headers, raw body, dynamic metadata, quotas, unit
// multipliers, raw header values) is left to proto.
func appendResponse(b []byte, r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.RequestHeadersToAdd) > 0 || len(r.RawBody) > 0 || r.DynamicMetadata != nil || r.Quota != nil {
		return nil, false
	}
	size := 0
	if r.OverallCode != 0 {
		size += 1 + protowire.SizeVarint(uint64(r.OverallCode))
	}
	for _, st := range r.Statuses {
		n, ok := statusSize(st)
		if !ok {
			return nil, false
		}
		size += 1 + protowire.SizeBytes(n)
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h == nil || len(h.RawValue) > 0 {
			return nil, false
		}
		size += 1 + protowire.SizeBytes(headerSize(h.Key, h.Value))
	}
	if b == nil {
		b = make([]byte, 0, size)
	}
	if r.OverallCode != 0 {
		b = protowire.AppendTag(b, respOverallCode, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.OverallCode))
	}
	for _, st := range r.Statuses {
		n, _ := statusSize(st)
		b = protowire.AppendTag(b, respStatuses, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = appendStatus(b, st)
	}
	for _, h := range r.ResponseHeadersToAdd {
		b = protowire.AppendTag(b, respHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h.Key, h.Value)))
		b = appendString(b, hdrKey, h.Key)
		b = appendString(b, hdrValue, h.Value)
	}
	return b, true
}

func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) (int, bool) {
	if st == nil || st.Quota != nil {
		return 0, false
	}
	n := 0
	if st.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.Code))
	}
	if l := st.CurrentLimit; l != nil {
		if l.UnitMultiplier != nil {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(limitSize(l))
	}
	if st.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		n += 1 + protowire.SizeBytes(durationSize(d.Seconds, d.Nanos))
	}
	return n, true
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	if st.Code != 0 {
		b = protowire.AppendTag(b, stCode, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(st.Code))
	}
	if l := st.CurrentLimit; l != nil {
		b = protowire.AppendTag(b, stCurrentLimit, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l)))
		if l.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, limRPU, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.RequestsPerUnit))
		}
		if l.Unit != 0 {
			b = protowire.AppendTag(b, limUnit, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(l.Unit))
		}
		b = appendString(b, limName, l.Name)
	}
	if st.LimitRemaining != 0 {
		b = protowire.AppendTag(b, stRemaining, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, stReset, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d.Seconds, d.Nanos)))
		if d.Seconds != 0 {
			b = protowire.AppendTag(b, durSeconds, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Seconds))
		}
		if d.Nanos != 0 {
			b = protowire.AppendTag(b, durNanos, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
		}
	}
	return b
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) int {
	n := 0
	if l.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.RequestsPerUnit))
	}
	if l.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(l.Unit))
	}
	if l.Name != "" {
		n += 1 + protowire.SizeBytes(len(l.Name))
	}
	return n
}

func durationSize(seconds int64, nanos int32) int {
	n := 0
	if seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(seconds))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}

func headerSize(key, value string) int {
	n := 0
	if key != "" {
		n += 1 + protowire.SizeBytes(len(key))
	}
	if value != "" {
		n += 1 + protowire.SizeBytes(len(value))
	}
	return n
}

// appendString appends a string field, proto3 style: nothing when empty.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}
