// Package grpclimit puts a ratekeeper limit in front of a gRPC server's
// calls: a unary and a stream server interceptor, keyed by method, by the
// peer's address or by request metadata. A refused call gets
// codes.ResourceExhausted, with the rate limit fields as trailers
// (ratelimit-policy, ratelimit, retry-after and the x-ratelimit-* ones);
// a call admitted gets the same fields, but retry-after, as headers. Their
// values are the gateway's for the same decision (docs/gateway.md, "What
// clients see").
//
//	lim, _ := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 100, Period: time.Second})
//	i, _ := grpclimit.New("per-client", lim, grpclimit.ByMetadata("x-api-key"))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(i.Unary()), grpc.ChainStreamInterceptor(i.Stream()))
//
// Several limits are several interceptors, chained. The package is the one
// that imports grpc: the root package and httplimit do not.
package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratefields"
)

// KeyFunc is the key a call is limited by. ok false leaves the call
// unlimited by this interceptor (a call without the metadata a key needs,
// a method the limit is not for).
type KeyFunc func(ctx context.Context, fullMethod string) (key string, ok bool)

// ByMethod keys a call by its full method name, /package.Service/Method:
// one limit per method for all clients. A name with a brace, which only a
// client's :path behind grpc.UnknownServiceHandler can hold, is hashed as
// ByMetadata's values are.
func ByMethod() KeyFunc {
	return func(_ context.Context, m string) (string, bool) {
		if m == "" {
			return m, true
		}
		return bounded(m), true
	}
}

// ByPeer keys a call by the client's address, without its port: an IPv4
// address whole, an IPv6 address by its /64. One host commonly holds a
// whole /64, and would otherwise pick a fresh key per call. A peer that is
// not an IP (a Unix socket) is one key. Behind a proxy every call comes
// from the proxy: key by metadata it sets instead.
func ByPeer() KeyFunc {
	return func(ctx context.Context, _ string) (string, bool) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", false
		}
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			a := ap.Addr().Unmap()
			if a.Is6() {
				pre, _ := a.Prefix(64)
				return pre.String(), true
			}
			return a.String(), true
		}
		if _, isTCP := p.Addr.(*net.TCPAddr); isTCP {
			return p.Addr.String(), true
		}
		return p.Addr.Network(), true
	}
}

// ByMetadata keys a call by the request metadata name (an API key, a user
// ID set by an authenticating proxy). Of several values, the last is the
// key. A proxy that appends its value rather than replacing the client's
// puts it last; the first would be the client's own choice of key. A call without it is not limited by this interceptor: pair it with
// another (FirstOf) when such calls must be limited too. A value with a
// brace is replaced by '#' and a hash of it, as the gateway's key parts
// are: Redis keeps a key's own hash tag, so "{k}" would be k's key there.
func ByMetadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, bool) {
		md, _ := metadata.FromIncomingContext(ctx)
		vs := md.Get(name)
		if len(vs) == 0 || vs[len(vs)-1] == "" {
			return "", false
		}
		return bounded(vs[len(vs)-1]), true
	}
}

// bounded is v, or '#' and the hex of 128 bits of its SHA-256 when v holds
// a brace or starts with '#'. A hash tag would choose its Redis Cluster
// slot, and share another client's key. No value is mistaken for a hash.
func bounded(v string) string {
	if strings.IndexAny(v, "{}") < 0 && v[0] != '#' {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return "#" + hex.EncodeToString(sum[:16])
}

// FirstOf keys a call by the first of fs that gives a key: ByMetadata of an
// API key, else ByPeer.
func FirstOf(fs ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) (string, bool) {
		for _, f := range fs {
			if k, ok := f(ctx, m); ok {
				return k, true
			}
		}
		return "", false
	}
}

// Join keys a call by all of fs together (ByMethod and ByPeer: a limit per
// method per client); a call that one of them gives no key is not limited.
func Join(fs ...KeyFunc) KeyFunc {
	return func(ctx context.Context, m string) (string, bool) {
		var b strings.Builder
		for i, f := range fs {
			k, ok := f(ctx, m)
			if !ok {
				return "", false
			}
			if i > 0 {
				b.WriteByte('|')
			}
			// Lengths keep "a|b"+"c" apart from "a"+"b|c".
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String(), true
	}
}

// Interceptor decides each call against one limit. Create it with New; it
// is safe for concurrent use.
type Interceptor struct {
	config
	name    string
	limiter *ratekeeper.Limiter
	key     KeyFunc
	policy  string // ratelimit-policy's value; "" for a calendar window, whose w varies
	limit   string // the most a call can cost
}

type config struct {
	cost    func(ctx context.Context, fullMethod string) int
	onError func(ctx context.Context, err error) error
	headers bool
	count   []codes.Code // WithCountOnly's; nil counts every call
	counts  uint32       // count as a set: bit c for code c
}

// Option configures an Interceptor.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithCost charges a call f's result instead of 1 (a costly method more).
// A cost above what the limit can ever admit at once refuses the call with
// codes.InvalidArgument, which a client must not retry.
func WithCost(f func(ctx context.Context, fullMethod string) int) Option {
	return optionFunc(func(c *config) { c.cost = f })
}

// WithErrorHandler decides what a call gets when the store fails (an error
// the store's own failure policy did not absorb): f's error refuses the
// call with it, nil lets it through. The default lets every such call
// through: a limiter whose store is down must not take the service down.
func WithErrorHandler(f func(ctx context.Context, err error) error) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithCountOnly counts a call only when it ends with one of cs. A call
// is admitted while its key has a unit left, taking nothing (Limiter.Peek),
// and takes one unit when it ends with a listed code. Calls admitted
// together each see the units left before any was counted, so a key
// passes its limit by at most its calls in flight when the limit was
// spent. It does not go with WithCost. Limit, which never sees the call
// end, refuses every call with codes.FailedPrecondition: use Unary and
// Stream.
func WithCountOnly(cs ...codes.Code) Option {
	return optionFunc(func(c *config) { c.count = append([]codes.Code{}, cs...) })
}

// WithoutHeaders sends the rate limit fields only with refusals (as
// trailers), not as headers of the calls admitted.
func WithoutHeaders() Option {
	return optionFunc(func(c *config) { c.headers = false })
}

// New returns an interceptor that limits the calls key gives a key to by
// l. name names the limit in the fields and messages; it must be a token
// (letters, digits and -._~).
func New(name string, l *ratekeeper.Limiter, key KeyFunc, opts ...Option) (*Interceptor, error) {
	if name == "" || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r))
	}) >= 0 {
		return nil, fmt.Errorf("grpclimit: name %q is not a token (letters, digits, -._~)", name)
	}
	if l == nil || key == nil {
		return nil, errors.New("grpclimit: a limiter and a key function are required")
	}
	c := config{headers: true}
	for _, o := range opts {
		o.apply(&c)
	}
	if err := c.countSet(); err != nil {
		return nil, err
	}
	i := &Interceptor{config: c, name: name, limiter: l, key: key, limit: strconv.Itoa(l.Limit().Capacity())}
	if l.Limit().Calendar == "" {
		i.policy = i.policyAt(time.Time{})
	}
	return i, nil
}

// policyAt is ratelimit-policy's value for a decision at at.
func (i *Interceptor) policyAt(at time.Time) string {
	if i.policy != "" {
		return i.policy
	}
	q, w := ratefields.Policy(i.limiter.Limit(), at)
	return fmt.Sprintf("%q;q=%d;w=%d", i.name, q, w)
}

// countSet builds counts from count, refusing what cannot work.
func (c *config) countSet() error {
	if c.count == nil {
		return nil
	}
	if len(c.count) == 0 {
		return errors.New("grpclimit: WithCountOnly needs the codes that count")
	}
	if c.cost != nil {
		return errors.New("grpclimit: WithCountOnly counts one unit a call: it does not go with WithCost")
	}
	for _, code := range c.count {
		if code > codes.Unauthenticated {
			return fmt.Errorf("grpclimit: WithCountOnly: %d is not a gRPC status code (0 to 16)", uint32(code))
		}
		c.counts |= 1 << code
	}
	return nil
}

// counted takes a unit for key's call that ended with err, when that
// counts (WithCountOnly). key is "" for a call not looked at.
func (i *Interceptor) counted(ctx context.Context, key string, err error) {
	if key == "" || i.counts&(1<<status.Code(err)) == 0 {
		return
	}
	// The call is over, its context may be done: the count must land.
	_, _ = i.limiter.Allow(context.WithoutCancel(ctx), key)
}

// Unary is the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, md, err := i.decide(ctx, info.FullMethod)
		if md != nil {
			if err != nil {
				_ = grpc.SetTrailer(ctx, md)
			} else {
				_ = grpc.SetHeader(ctx, md)
			}
		}
		if err != nil {
			return nil, err
		}
		resp, err := handler(ctx, req)
		i.counted(ctx, key, err)
		return resp, err
	}
}

// Stream is the stream server interceptor: a stream is one call, decided
// when it opens; its messages are not counted.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		key, md, err := i.decide(ss.Context(), info.FullMethod)
		if md != nil {
			if err != nil {
				ss.SetTrailer(md)
			} else {
				_ = ss.SetHeader(md)
			}
		}
		if err != nil {
			return err
		}
		err = handler(srv, ss)
		i.counted(ss.Context(), key, err)
		return err
	}
}

// Limit decides the call of ctx (its method from grpc.Method), for
// go-grpc-middleware v2's ratelimit interceptors, whose Limiter interface
// it satisfies without this package importing that module. A refusal's
// fields go out as trailers; the error is the interceptor's own status,
// which ratelimit wraps in its ResourceExhausted message.
func (i *Interceptor) Limit(ctx context.Context) error {
	if i.counts != 0 {
		return status.Errorf(codes.FailedPrecondition, "rate limit %q counts calls by how they end, which Limit never sees: use the Unary and Stream interceptors", i.name)
	}
	method, _ := grpc.Method(ctx)
	_, md, err := i.decide(ctx, method)
	if md != nil && err != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return err
}

// decide takes the call's cost and returns the fields to send and, when
// the call is refused, its status error. With WithCountOnly it takes
// nothing, and returns the key of an admitted call, to count when it ends.
func (i *Interceptor) decide(ctx context.Context, method string) (string, metadata.MD, error) {
	key, ok := i.key(ctx, method)
	if !ok {
		return "", nil, nil
	}
	if i.counts == 0 {
		md, err := i.take(ctx, key, method)
		return "", md, err
	}
	d, err := i.limiter.Peek(ctx, key)
	md, err := i.answer(ctx, d, err, 0)
	if err != nil {
		return "", md, err
	}
	return key, md, nil
}

// take decides a call that counts when it starts: it takes the cost.
func (i *Interceptor) take(ctx context.Context, key, method string) (metadata.MD, error) {
	n := 1
	if i.cost != nil {
		n = i.cost(ctx, method)
	}
	d, err := i.limiter.AllowN(ctx, key, n)
	return i.answer(ctx, d, err, n)
}

// answer turns the decision d (or the store's err) for a call of cost n
// into the fields to send and, when the call is refused, its error.
func (i *Interceptor) answer(ctx context.Context, d ratekeeper.Decision, err error, n int) (metadata.MD, error) {
	switch {
	case errors.Is(err, ratekeeper.ErrCost):
		return nil, status.Errorf(codes.InvalidArgument, "rate limit %q: a cost of %d can never pass: at most %s at once", i.name, n, i.limit)
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		if i.onError != nil {
			return nil, i.onError(ctx, err)
		}
		return nil, nil
	}
	if d.Fallback == ratekeeper.FallbackUncounted {
		if d.Allowed {
			return nil, nil // nothing was counted: no figures to send
		}
		secs := strconv.FormatInt(max(1, ratefields.Ceil(d.RetryAfter)), 10)
		return metadata.Pairs("retry-after", secs),
			status.Errorf(codes.Unavailable, "the rate limiter's store is unavailable: retry in %s s", secs)
	}
	if d.Allowed && !i.headers {
		return nil, nil
	}
	f := ratefields.Of(d)
	md := i.fields(f, d.At)
	if d.Allowed {
		return md, nil
	}
	secs := strconv.FormatInt(f.RetryAfter, 10)
	md.Set("retry-after", secs)
	return md, status.Errorf(codes.ResourceExhausted, "rate limit %q exceeded: retry in %s s", i.name, secs)
}

// fields are the rate limit fields of f, as the gateway sends them as
// headers.
func (i *Interceptor) fields(f ratefields.Figures, at time.Time) metadata.MD {
	return metadata.MD{
		"ratelimit-policy":      {i.policyAt(at)},
		"ratelimit":             {fmt.Sprintf("%q;r=%d;t=%d", i.name, f.Remaining, f.T)},
		"x-ratelimit-limit":     {strconv.Itoa(f.Limit)},
		"x-ratelimit-remaining": {strconv.Itoa(f.Remaining)},
		"x-ratelimit-reset":     {strconv.FormatInt(f.Reset, 10)},
	}
}
