package rules

import (
	"fmt"
	"mime"
	"net/http"
	"slices"

	"github.com/ratekeeper/ratekeeper/internal/jsonmeter"
)

// AfterResponse reports whether the cost is known after the response
// only: read from a response header or from the body.
func (c *Cost) AfterResponse() bool { return c.Response != "" || len(c.JSON) > 0 }

// BodyMeter reads a response's cost from its body as it streams by, in
// bounded memory. It is for one goroutine.
type BodyMeter struct {
	m *jsonmeter.Meter // nil: the body is not read
}

// Write reads p. It never fails.
func (b *BodyMeter) Write(p []byte) (int, error) {
	if b.m == nil {
		return len(p), nil
	}
	return b.m.Write(p)
}

// Meter is a BodyMeter for the response whose header is h: a
// text/event-stream is read event by event, any other body as one JSON
// value. A body with a Content-Encoding is not read.
func (c *Cost) Meter(h http.Header) *BodyMeter {
	if ce := h.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return &BodyMeter{}
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return &BodyMeter{m: jsonmeter.New(c.paths, mt == "text/event-stream")}
}

// FromBody is the cost of a response whose body b read, at most Max.
// Complete and read well, it is the sum of the paths' last values, or
// Default when none had one. A body cut short (the client or the upstream
// left) costs at least Default and Reserve. One that is not JSON, that gives
// a path a value other than a number from 0, or that was not read costs
// at least Default: ok is false then.
func (c *Cost) FromBody(b *BodyMeter, complete bool) (n int, ok bool) {
	if b == nil || b.m == nil {
		return c.Default, false
	}
	if complete {
		b.m.End()
	}
	r := b.m.Reading()
	v := r.Sum
	switch {
	case !complete:
		v = max(v, int64(c.Default), int64(c.Reserve))
	case r.Bad:
		v = max(v, int64(c.Default))
	case !r.Seen:
		v = int64(c.Default)
	}
	return int(min(v, int64(c.Max))), !r.Bad
}

// buildPaths compiles a cost's response_json paths.
func buildPaths(at string, written List, fail func(string, string, ...any)) ([]string, []jsonmeter.Path) {
	if len(written) > jsonmeter.MaxPaths {
		fail(at, "has %d paths; at most %d", len(written), jsonmeter.MaxPaths)
	}
	var ps []jsonmeter.Path
	for i, s := range written {
		p, err := jsonmeter.ParsePath(s)
		switch {
		case err != nil:
			fail(fmt.Sprintf("%s[%d]", at, i), "path %q %v", s, err)
		case slices.Contains(written[:i], s):
			fail(fmt.Sprintf("%s[%d]", at, i), "%q is given twice: it would be counted twice", s)
		default:
			ps = append(ps, p)
		}
	}
	return slices.Clone(written), ps
}

// isZero reports whether no cost is written.
func (c *CostConfig) isZero() bool {
	return c.Fixed == 0 && c.Header == "" && c.ResponseHeader == "" && len(c.ResponseJSON) == 0 && c.Reserve.isZero() && c.Max == 0 && c.Default == nil
}

// RequestBodyLimit is the most bytes of a request's body read for its
// reserve (ReserveJSON): a longer body reserves the default.
const RequestBodyLimit = 1 << 20

// ReadsRequest reports whether the reserve is read from the request's body.
func (c *Cost) ReadsRequest() bool { return len(c.reserve) > 0 }

// ReserveFrom is what a request whose whole JSON body is b takes at
// admission: the number at ReserveJSON, rounded up, in 1..Max. A body not
// read whole (whole is false), not JSON, or that does not give the path
// a number from 0 reserves Reserve.
func (c *Cost) ReserveFrom(b []byte, whole bool) int {
	if !c.ReadsRequest() || !whole {
		return c.Reserve
	}
	m := jsonmeter.New(c.reserve, false)
	m.Write(b)
	m.End()
	r := m.Reading()
	if r.Bad || !r.Seen {
		return c.Reserve
	}
	return int(min(max(r.Sum, 1), int64(c.Max)))
}
