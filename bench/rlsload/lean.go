package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
)

// The lean client speaks gRPC over h2c with golang.org/x/net/http2's
// Framer and hpack. It stands in for Envoy's C++ client. A call is one
// HEADERS frame of pre-encoded, indexed fields and one DATA frame of a
// request message encoded once per key. Many concurrent streams share a
// connection.
//
// Each connection has a writer goroutine and a reader goroutine. The writer
// writes the frames queued by the callers and flushes when the queue stays
// empty. So, as in Envoy's event loop, the calls that are ready together
// share a write system call. The reader answers SETTINGS and PING, returns
// flow-control credit, and hands each stream's response to its caller. The
// caller checks the :status, the grpc-status of the trailers and the
// message.
//
// What it does not do: compression, TLS, deadlines (grpc-timeout), server
// push, or responses larger than its stream window (1 MiB). A call whose
// context ends closes its connection. The load generator's contexts end
// only when a service stops answering.

const (
	// leanStreamWindow is the window the lean client gives each stream
	// (SETTINGS_INITIAL_WINDOW_SIZE) and leanConnWindow the connection's.
	leanStreamWindow = 1 << 20
	leanConnWindow   = 1 << 30
	// leanMaxFrame is the largest frame the lean client reads (the
	// default SETTINGS_MAX_FRAME_SIZE, which it does not change).
	leanMaxFrame = 16384
)

// errConnClosed is the error of calls on a connection that failed or was
// closed.
var errConnClosed = errors.New("lean: connection closed")

// leanConn is one HTTP/2 connection of the lean client. It is safe for
// concurrent use.
type leanConn struct {
	nc   net.Conn
	path string

	// Writing: the callers and the reader queue their frames under qmu
	// and wake the writer goroutine, the only one that writes to fr and bw
	// once the connection is set up.
	qmu     sync.Mutex
	queue   []leanWrite
	qerr    error // the writer has stopped: no more writes
	wake    chan struct{}
	bw      *bufio.Writer
	fr      *http2.Framer // writes on the writer goroutine, reads on the reader goroutine
	nextID  uint32
	first   []byte // the request header block that adds the fields to the server's HPACK table
	indexed []byte // the block of later requests: the same fields, indexed

	// smu guards the streams, the server's settings that bound them, and
	// the send window; cond waits for a free stream or send credit.
	smu        sync.Mutex
	cond       *sync.Cond
	streams    map[uint32]*leanCall
	active     uint32 // streams open or queued to open
	maxStreams uint32
	peerWindow int32 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	sendWindow int64 // the connection's send window
	err        error // set once: the connection is unusable

	unacked int64 // DATA bytes received and not yet returned by WINDOW_UPDATE (reader only)
}

// leanWrite is a queued write: a call's request (lc, msg) or a control
// frame.
type leanWrite struct {
	lc      *leanCall
	msg     []byte
	control func() error
}

// leanCall is one caller's call, reused from call to call: the reader fills
// it in and signals done.
type leanCall struct {
	done       chan struct{}
	id         uint32
	msg        []byte // the length-prefixed gRPC message received so far
	received   int32  // DATA bytes of this stream not yet returned to the server
	status     string // :status
	grpcStatus string
	grpcMsg    string
	trailers   bool // the header block being decoded is the trailers
	err        error
}

// dialLean opens a connection to addr for calls of method path (such as
// /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit): it sends
// the client preface and its settings and waits for the server's settings.
func dialLean(addr, path string) (*leanConn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &leanConn{
		nc:         nc,
		path:       path,
		bw:         bufio.NewWriterSize(nc, 32<<10),
		nextID:     1,
		wake:       make(chan struct{}, 1),
		streams:    make(map[uint32]*leanCall),
		maxStreams: math.MaxUint32,
		peerWindow: 65535,
		sendWindow: 65535,
	}
	c.cond = sync.NewCond(&c.smu)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 32<<10))
	c.fr.SetMaxReadFrameSize(leanMaxFrame)
	if _, err := c.bw.WriteString(http2.ClientPreface); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: leanStreamWindow},
	); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteWindowUpdate(0, leanConnWindow-65535); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	// The server's first frame is its SETTINGS: the header table size it
	// allows decides how the request headers are encoded.
	f, err := c.fr.ReadFrame()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("lean: reading the server's settings: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		nc.Close()
		return nil, fmt.Errorf("lean: the server's first frame is %v, not SETTINGS", f.Header().Type)
	}
	tableSize := uint32(4096)
	if err := sf.ForeachSetting(func(s http2.Setting) error {
		if s.ID == http2.SettingHeaderTableSize {
			tableSize = s.Val
		}
		return c.applySetting(s)
	}); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		nc.Close()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	c.first, c.indexed = requestHeaders(path, tableSize)
	go c.read()
	go c.write()
	return c, nil
}

// requestHeaders encodes the request header block twice with one HPACK
// encoder: the first block adds the fields to the server's dynamic table,
// the second refers to them by index, a few bytes, as Envoy's requests do
// after the first.
func requestHeaders(path string, tableSize uint32) (first, indexed []byte) {
	var buf []byte
	w := writerFunc(func(p []byte) (int, error) { buf = append(buf, p...); return len(p), nil })
	enc := hpack.NewEncoder(w)
	enc.SetMaxDynamicTableSizeLimit(min(tableSize, 4096))
	block := func() []byte {
		buf = nil
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path},
			{Name: ":authority", Value: "rlsload"},
			{Name: "content-type", Value: "application/grpc"},
			{Name: "te", Value: "trailers"},
		} {
			_ = enc.WriteField(f) // writes to a slice: cannot fail
		}
		return buf
	}
	return block(), block()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// applySetting records a setting of the server's. Called under smu or
// before the reader starts.
func (c *leanConn) applySetting(s http2.Setting) error {
	if err := s.Valid(); err != nil {
		return err
	}
	switch s.ID {
	case http2.SettingMaxConcurrentStreams:
		c.maxStreams = s.Val
	case http2.SettingInitialWindowSize:
		// Streams in flight have been sent their whole message: only new
		// streams see the change.
		c.peerWindow = int32(s.Val)
	}
	return nil
}

// call sends msg (a length-prefixed gRPC message) on a new stream and
// waits for its response, returning the response message without its
// prefix. The returned slice is valid until lc's next call.
func (c *leanConn) call(ctx context.Context, lc *leanCall, msg []byte) ([]byte, error) {
	// A stream and send credit for the message: the writer goroutine
	// waits for neither.
	c.smu.Lock()
	for c.err == nil && (c.active >= c.maxStreams || c.sendWindow < int64(len(msg))) {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.smu.Unlock()
		return nil, err
	}
	if int32(len(msg)) > c.peerWindow {
		c.smu.Unlock()
		return nil, fmt.Errorf("lean: a %d-byte message exceeds the server's stream window of %d", len(msg), c.peerWindow)
	}
	c.sendWindow -= int64(len(msg))
	c.active++
	c.smu.Unlock()
	lc.msg, lc.received, lc.status, lc.grpcStatus, lc.grpcMsg, lc.trailers, lc.err = lc.msg[:0], 0, "", "", "", false, nil
	c.enqueue(leanWrite{lc: lc, msg: msg})
	select {
	case <-lc.done:
	case <-ctx.Done():
		c.fail(fmt.Errorf("lean: a call's context ended: %w", ctx.Err()))
		return nil, ctx.Err()
	}
	if lc.err != nil {
		return nil, lc.err
	}
	if lc.status != "200" {
		return nil, fmt.Errorf("lean: HTTP status %q", lc.status)
	}
	if lc.grpcStatus != "0" {
		if lc.grpcStatus == "" {
			return nil, errors.New("lean: no grpc-status in the trailers")
		}
		return nil, fmt.Errorf("lean: grpc-status %s: %s", lc.grpcStatus, lc.grpcMsg)
	}
	if len(lc.msg) < 5 {
		return nil, fmt.Errorf("lean: a response of %d bytes, not a gRPC message", len(lc.msg))
	}
	if lc.msg[0] != 0 {
		return nil, errors.New("lean: a compressed response")
	}
	if n := binary.BigEndian.Uint32(lc.msg[1:5]); int(n) != len(lc.msg)-5 {
		return nil, fmt.Errorf("lean: a message of %d bytes announced, %d received", n, len(lc.msg)-5)
	}
	return lc.msg[5:], nil
}

// enqueue queues w for the writer goroutine.
func (c *leanConn) enqueue(w leanWrite) {
	c.qmu.Lock()
	if err := c.qerr; err != nil {
		c.qmu.Unlock()
		if w.lc != nil {
			w.lc.err = err
			w.lc.done <- struct{}{}
		}
		return
	}
	c.queue = append(c.queue, w)
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default: // the writer has been woken already
	}
}

// writeControl queues a frame of the reader's.
func (c *leanConn) writeControl(write func() error) {
	c.enqueue(leanWrite{control: write})
}

// write is the connection's writer goroutine. It takes the queue whole,
// opens its streams and writes their frames, and flushes once the queue
// is still empty after giving the callers woken meanwhile a chance to join
// (runtime.Gosched, as grpc-go's writer does before a small flush).
func (c *leanConn) write() {
	var batch []leanWrite
	for range c.wake {
		for yielded := false; ; {
			c.qmu.Lock()
			batch, c.queue = c.queue, batch[:0]
			c.qmu.Unlock()
			if len(batch) == 0 {
				if !yielded && c.bw.Buffered() > 0 {
					yielded = true
					runtime.Gosched()
					continue
				}
				break
			}
			yielded = false
			if err := c.writeBatch(batch); err != nil {
				c.fail(err)
			}
			clear(batch)
		}
		if c.bw.Buffered() > 0 {
			if err := c.bw.Flush(); err != nil {
				c.fail(err)
			}
		}
		c.smu.Lock()
		err := c.err
		c.smu.Unlock()
		if err != nil {
			// Calls queued after the failure: fail them here.
			c.qmu.Lock()
			batch, c.queue, c.qerr = c.queue, nil, err
			c.qmu.Unlock()
			for _, w := range batch {
				if w.lc != nil {
					w.lc.err = err
					w.lc.done <- struct{}{}
				}
			}
			return
		}
	}
}

// writeBatch writes the frames of batch, registering the streams of its
// calls first: an answer may come as soon as the frames are out.
func (c *leanConn) writeBatch(batch []leanWrite) error {
	c.smu.Lock()
	if err := c.err; err != nil {
		c.smu.Unlock()
		for _, w := range batch {
			if w.lc != nil {
				w.lc.err = err
				w.lc.done <- struct{}{}
			}
		}
		return err
	}
	for _, w := range batch {
		if w.lc != nil {
			w.lc.id = c.nextID
			c.nextID += 2
			c.streams[w.lc.id] = w.lc
		}
	}
	c.smu.Unlock()
	for _, w := range batch {
		if w.control != nil {
			if err := w.control(); err != nil {
				return err
			}
			continue
		}
		block := c.indexed
		if w.lc.id == 1 {
			block = c.first
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: w.lc.id, BlockFragment: block, EndHeaders: true}); err != nil {
			return err
		}
		if err := c.fr.WriteData(w.lc.id, true, w.msg); err != nil {
			return err
		}
	}
	return nil
}

// fail makes the connection unusable and fails every call on it.
func (c *leanConn) fail(err error) {
	c.smu.Lock()
	if c.err == nil {
		c.err = err
	}
	streams := c.streams
	c.streams = map[uint32]*leanCall{}
	c.cond.Broadcast()
	c.smu.Unlock()
	c.nc.Close()
	select {
	case c.wake <- struct{}{}: // to fail the queued calls
	default:
	}
	for _, lc := range streams {
		lc.err = err
		lc.done <- struct{}{}
	}
}

// Close closes the connection; calls in flight fail.
func (c *leanConn) Close() error {
	c.fail(errConnClosed)
	return nil
}

// read is the connection's reader goroutine.
func (c *leanConn) read() {
	var cur *leanCall // the stream whose header block is being decoded
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if cur == nil {
			return
		}
		switch f.Name {
		case ":status":
			if !cur.trailers {
				cur.status = f.Value
			}
		case "grpc-status":
			cur.grpcStatus = f.Value
		case "grpc-message":
			cur.grpcMsg = f.Value
		}
	})
	// The stream of the header block in progress (CONTINUATION frames may
	// follow its HEADERS) and whether it ends the stream.
	var (
		blockID  uint32
		blockEnd bool
	)
	lookup := func(id uint32) *leanCall {
		c.smu.Lock()
		lc := c.streams[id]
		c.smu.Unlock()
		return lc
	}
	finish := func(id uint32, lc *leanCall, err error) {
		c.smu.Lock()
		_, ok := c.streams[id]
		if ok {
			delete(c.streams, id)
			c.active--
			c.cond.Broadcast()
		}
		c.smu.Unlock()
		if ok {
			lc.err = err
			lc.done <- struct{}{}
		}
	}
	endBlock := func() {
		if err := dec.Close(); err != nil {
			c.fail(fmt.Errorf("lean: %w", err))
			return
		}
		if blockEnd && cur != nil {
			finish(blockID, cur, nil)
		} else if cur != nil {
			cur.trailers = true // the next block of this stream
		}
		cur, blockID = nil, 0
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errConnClosed
			}
			c.fail(fmt.Errorf("lean: %w", err))
			return
		}
		if blockID != 0 && f.Header().Type != http2.FrameContinuation {
			c.fail(errors.New("lean: a header block interrupted"))
			return
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			blockID, blockEnd = f.StreamID, f.StreamEnded()
			cur = lookup(f.StreamID) // nil for a cancelled stream: decoded all the same, for HPACK's state
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				c.fail(fmt.Errorf("lean: %w", err))
				return
			}
			if f.HeadersEnded() {
				endBlock()
			}
		case *http2.ContinuationFrame:
			if f.StreamID != blockID {
				c.fail(errors.New("lean: CONTINUATION of another stream"))
				return
			}
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				c.fail(fmt.Errorf("lean: %w", err))
				return
			}
			if f.HeadersEnded() {
				endBlock()
			}
		case *http2.DataFrame:
			n := int64(f.Length) // padding included: it counts against the windows
			c.unacked += n
			lc := lookup(f.StreamID)
			var update uint32
			if lc != nil {
				lc.msg = append(lc.msg, f.Data()...)
				lc.received += int32(n)
				if !f.StreamEnded() && lc.received >= leanStreamWindow/2 {
					update, lc.received = uint32(lc.received), 0
				}
			}
			connUpdate := c.unacked >= leanConnWindow/2
			if connUpdate || update > 0 {
				unacked := uint32(c.unacked)
				if connUpdate {
					c.unacked = 0
				}
				id := f.StreamID
				c.writeControl(func() error {
					if connUpdate {
						if err := c.fr.WriteWindowUpdate(0, unacked); err != nil {
							return err
						}
					}
					if update > 0 {
						return c.fr.WriteWindowUpdate(id, update)
					}
					return nil
				})
			}
			if f.StreamEnded() && lc != nil {
				finish(f.StreamID, lc, nil) // no trailers: call reports the missing grpc-status
			}
		case *http2.RSTStreamFrame:
			if lc := lookup(f.StreamID); lc != nil {
				finish(f.StreamID, lc, fmt.Errorf("lean: stream reset by the server: %v", f.ErrCode))
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			c.smu.Lock()
			err := f.ForeachSetting(c.applySetting)
			c.cond.Broadcast()
			c.smu.Unlock()
			if err != nil {
				c.fail(fmt.Errorf("lean: %w", err))
				return
			}
			c.writeControl(c.fr.WriteSettingsAck)
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.writeControl(func() error { return c.fr.WritePing(true, data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.smu.Lock()
				c.sendWindow += int64(f.Increment)
				c.cond.Broadcast()
				c.smu.Unlock()
			}
			// A stream's window: each request is sent whole on its stream's
			// initial window, checked in call.
		case *http2.GoAwayFrame:
			c.fail(fmt.Errorf("lean: GOAWAY from the server: %v %s", f.ErrCode, f.DebugData()))
			return
		}
	}
}

// grpcMessage prefixes a marshalled message with gRPC's message header
// (uncompressed, its length).
func grpcMessage(b []byte) []byte {
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// leanClient is the lean connections shared by the callers, with a
// leanCall for each caller. Caller c's calls must not overlap.
type leanClient struct {
	conns []*leanConn
	calls []*leanCall
}

// newLeanClient opens n connections to addr for calls of method path by
// up to callers callers.
func newLeanClient(addr, path string, n, callers int) (*leanClient, error) {
	l := &leanClient{calls: make([]*leanCall, callers)}
	for i := range l.calls {
		l.calls[i] = &leanCall{done: make(chan struct{}, 1)}
	}
	for range n {
		c, err := dialLean(addr, path)
		if err != nil {
			l.Close()
			return nil, err
		}
		l.conns = append(l.conns, c)
	}
	return l, nil
}

// Close closes the connections.
func (l *leanClient) Close() {
	for _, c := range l.conns {
		c.Close()
	}
}

// call makes caller c's call with message msg (length-prefixed) on its
// connection and returns the response message, valid until c's next call.
func (l *leanClient) call(ctx context.Context, c int, msg []byte) ([]byte, error) {
	resp, err := l.conns[c%len(l.conns)].call(ctx, l.calls[c], msg)
	if err != nil && ctx.Err() != nil {
		// The reader may still hold the abandoned call: the caller's next
		// call gets a new one.
		l.calls[c] = &leanCall{done: make(chan struct{}, 1)}
	}
	return resp, err
}

// overallCode reads field 1 (overall_code) of an
// envoy.service.ratelimit.v3.RateLimitResponse without unmarshalling the
// rest: 0 (UNKNOWN) when it is absent.
func overallCode(b []byte) (uint64, error) {
	var code uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			code, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return code, nil
}

// gubernatorStatus reads a pb.gubernator.GetRateLimitsResp that must hold
// exactly one response: its status (0 UNDER_LIMIT, 1 OVER_LIMIT) and its
// error string.
func gubernatorStatus(b []byte) (status uint64, errText string, err error) {
	responses := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			resp, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, "", protowire.ParseError(n)
			}
			b = b[n:]
			responses++
			for len(resp) > 0 {
				num, typ, n := protowire.ConsumeTag(resp)
				if n < 0 {
					return 0, "", protowire.ParseError(n)
				}
				resp = resp[n:]
				switch {
				case num == 1 && typ == protowire.VarintType:
					status, n = protowire.ConsumeVarint(resp)
				case num == 5 && typ == protowire.BytesType:
					var s []byte
					s, n = protowire.ConsumeBytes(resp)
					errText = string(s)
				default:
					n = protowire.ConsumeFieldValue(num, typ, resp)
				}
				if n < 0 {
					return 0, "", protowire.ParseError(n)
				}
				resp = resp[n:]
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	if responses != 1 {
		return 0, "", errors.New(strconv.Itoa(responses) + " responses to one request")
	}
	return status, errText, nil
}
