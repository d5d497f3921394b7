// Package adminauth guards the admin endpoints that change state (a reset
// of a client's counter) with a bearer token, read from a file or an
// environment variable and never from a configuration file's YAML.
//
// The token is compared in constant time, both sides hashed first so that
// not even its length leaks. A request without it, or with another, gets
// 401 and is counted through a hook. Refusals are logged at most once per
// interval, with the number not logged since.
package adminauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// MinLength is the shortest token accepted: a short token can be guessed.
const MinLength = 16

// Load reads the token from file, or when file is empty from the
// environment variable env. A trailing newline (or CRLF) in the file is not
// part of it. A token shorter than MinLength, or holding white space or
// control characters, is an error.
func Load(file, env string) (string, error) {
	var tok, from string
	switch {
	case file != "" && env != "":
		return "", errors.New("the token is given twice: by a file and by an environment variable")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		tok, from = strings.TrimRight(string(b), "\r\n"), file
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("the environment variable %s is not set", env)
		}
		tok, from = v, "$"+env
	default:
		return "", errors.New("no token: give a file or an environment variable")
	}
	if len(tok) < MinLength {
		return "", fmt.Errorf("the token in %s has %d characters: at least %d are needed", from, len(tok), MinLength)
	}
	for _, c := range []byte(tok) {
		if c <= ' ' || c == 0x7f {
			return "", fmt.Errorf("the token in %s holds white space or a control character", from)
		}
	}
	return tok, nil
}

// Guard checks bearer tokens against the token of the moment (a reload
// may change it). Its zero value is not usable: call New. It is safe for
// concurrent use.
type Guard struct {
	logger   *slog.Logger
	refused  func()
	interval time.Duration

	mu         sync.Mutex
	lastLog    time.Time
	suppressed int
}

// DefaultLogInterval is how often, at most, a Guard logs refusals.
const DefaultLogInterval = 10 * time.Second

// New returns a Guard that logs refusals to logger (nil: none) and calls
// refused (nil: nothing) for each.
func New(logger *slog.Logger, refused func()) *Guard {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Guard{logger: logger, refused: refused, interval: DefaultLogInterval}
}

// Allowed reports whether r carries "Authorization: Bearer <token>"; an
// empty token allows nothing.
func Allowed(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		got = ""
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && token != ""
}

// Authorize reports whether r carries the token; if not, it answers r with
// 401, counts and (at most once per interval) logs the refusal.
func (g *Guard) Authorize(w http.ResponseWriter, r *http.Request, token string) bool {
	if Allowed(r, token) {
		return true
	}
	if g.refused != nil {
		g.refused()
	}
	missing := r.Header.Get("Authorization") == ""
	g.mu.Lock()
	now := time.Now()
	log := now.Sub(g.lastLog) >= g.interval
	n := g.suppressed
	if log {
		g.lastLog, g.suppressed = now, 0
	} else {
		g.suppressed++
	}
	g.mu.Unlock()
	if log {
		g.logger.Warn("admin request refused: missing or wrong bearer token",
			"remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "token_missing", missing, "not_logged_since_last", n)
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="ratekeeper admin"`)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	fmt.Fprintln(w, `{"error":"missing or wrong bearer token (Authorization: Bearer <token>)"}`)
	return false
}
