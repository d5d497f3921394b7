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
	policy  string // ratelimit-policy's value
	limit   string // the most a call can cost
}

type config struct {
	cost    func(ctx context.Context, fullMethod string) int
	onError func(ctx context.Context, err error) error
	headers bool
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
	q, w := ratefields.Policy(l.Limit())
	return &Interceptor{
		config:  c,
		name:    name,
		limiter: l,
		key:     key,
		policy:  fmt.Sprintf("%q;q=%d;w=%d", name, q, w),
		limit:   strconv.Itoa(q),
	}, nil
}

// Unary is the unary server interceptor.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := i.decide(ctx, info.FullMethod)
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
		return handler(ctx, req)
	}
}

// Stream is the stream server interceptor: a stream is one call, decided
// when it opens; its messages are not counted.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := i.decide(ss.Context(), info.FullMethod)
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
		return handler(srv, ss)
	}
}

// Limit decides the call of ctx (its method from grpc.Method), for
// go-grpc-middleware v2's ratelimit interceptors, whose Limiter interface
// it satisfies without this package importing that module. A refusal's
// fields go out as trailers; the error is the interceptor's own status,
// which ratelimit wraps in its ResourceExhausted message.
func (i *Interceptor) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	md, err := i.decide(ctx, method)
	if md != nil && err != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return err
}

// decide takes the call's cost and returns the fields to send and, when
// the call is refused, its status error.
func (i *Interceptor) decide(ctx context.Context, method string) (metadata.MD, error) {
	key, ok := i.key(ctx, method)
	if !ok {
		return nil, nil
	}
	n := 1
	if i.cost != nil {
		n = i.cost(ctx, method)
	}
	d, err := i.limiter.AllowN(ctx, key, n)
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
	md := i.fields(f)
	if d.Allowed {
		return md, nil
	}
	secs := strconv.FormatInt(f.RetryAfter, 10)
	md.Set("retry-after", secs)
	return md, status.Errorf(codes.ResourceExhausted, "rate limit %q exceeded: retry in %s s", i.name, secs)
}

// fields are the rate limit fields of f, as the gateway sends them as
// headers.
func (i *Interceptor) fields(f ratefields.Figures) metadata.MD {
	return metadata.MD{
		"ratelimit-policy":      {i.policy},
		"ratelimit":             {fmt.Sprintf("%q;r=%d;t=%d", i.name, f.Remaining, f.T)},
		"x-ratelimit-limit":     {strconv.Itoa(f.Limit)},
		"x-ratelimit-remaining": {strconv.Itoa(f.Remaining)},
		"x-ratelimit-reset":     {strconv.FormatInt(f.Reset, 10)},
	}
}
