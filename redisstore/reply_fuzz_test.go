package redisstore

import (
	"encoding/binary"
	"testing"
)

// FuzzNextReply: many.lua's reply, which comes from the server, is split
// without panicking whatever its bytes; each step consumes at least one
// byte, so a reply of k bytes yields at most k calls' replies; and a reply
// made of well-formed records yields exactly what was put in.
func FuzzNextReply(f *testing.F) {
	f.Add([]byte("r"), []byte("o\x02\x00\x00\x00ok"))
	f.Add([]byte("d"+string(make([]byte, decisionSize))), []byte("e\x03\x00\x00\x00ERR"))
	f.Add([]byte("o\xff\xff\xff\x7f"), []byte{})
	f.Fuzz(func(t *testing.T, raw, body []byte) {
		// Any bytes: no panic, and progress on every step.
		v := string(raw)
		for n := 0; len(v) > 0; n++ {
			if n > len(raw) {
				t.Fatalf("more replies than bytes in %q", raw)
			}
			_, _, rest, err := nextReply(v)
			if err != nil {
				break
			}
			if len(rest) >= len(v) {
				t.Fatalf("no progress on %q", v)
			}
			v = rest
		}
		// Well-formed records: the same replies back.
		dec := make([]byte, decisionSize)
		copy(dec, body)
		var b []byte
		b = append(b, 'd')
		b = append(b, dec...)
		b = append(b, 'r', 'o')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		b = append(b, 'e')
		b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		v = string(b)
		want := []struct {
			reply string
			isErr bool
		}{{string(dec), false}, {"", false}, {string(body), false}, {"", true}}
		for i, w := range want {
			reply, callErr, rest, err := nextReply(v)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if (callErr != nil) != w.isErr || reply != w.reply {
				t.Fatalf("record %d: %q, %v; want %q (error %v)", i, reply, callErr, w.reply, w.isErr)
			}
			if w.isErr && callErr.Error() != string(body) {
				t.Fatalf("record %d: error %q, want %q", i, callErr, body)
			}
			v = rest
		}
		if v != "" {
			t.Fatalf("%d bytes left", len(v))
		}
	})
}
