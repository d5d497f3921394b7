// Package jsonmeter reads numbers at given paths from a JSON body or an
// event stream of JSON events as it streams by, in bounded memory and
// bounded work per byte.
package jsonmeter

import (
	"errors"
	"fmt"
	"strings"
)

// Bounds of what a Meter reads.
const (
	// MaxPaths is the most paths one Meter reads.
	MaxPaths = 8
	// MaxPathKeys is the most keys in a path.
	MaxPathKeys = 16
	// MaxKey is the longest key of a path, in bytes.
	MaxKey = 64
	// MaxNesting is the deepest nesting of objects and arrays a document
	// may have; deeper, it is not read further.
	MaxNesting = 64
	// MaxNumber is the longest number read at a path, in bytes.
	MaxNumber = 64
)

// Path is a JSON path from the top object: object keys, outermost first.
// Arrays are never crossed.
type Path []string

// ParsePath reads a path written as keys joined by dots:
// "usage.total_tokens". Keys are printable ASCII, without dots, quotes,
// backslashes or spaces.
func ParsePath(s string) (Path, error) {
	if s == "" {
		return nil, errors.New("is empty")
	}
	keys := strings.Split(s, ".")
	if len(keys) > MaxPathKeys {
		return nil, fmt.Errorf("has %d keys; at most %d", len(keys), MaxPathKeys)
	}
	for _, k := range keys {
		if k == "" {
			return nil, errors.New("has an empty key")
		}
		if len(k) > MaxKey {
			return nil, fmt.Errorf("key %.10q... is longer than %d bytes", k, MaxKey)
		}
		for i := 0; i < len(k); i++ {
			if c := k[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
				return nil, errors.New("has a key that is not printable ASCII without spaces, quotes or backslashes")
			}
		}
	}
	return keys, nil
}

// String is the path as ParsePath reads it.
func (p Path) String() string { return strings.Join(p, ".") }
