// Package configerr is the error both configuration formats report (the
// gateway's rules and the decision service's descriptors): a problem
// located by file, line and field. rules.Error and rls.Error are this type.
package configerr

import (
	"strconv"
	"strings"
)

// Error is one problem in a configuration file, located as precisely as
// possible.
type Error struct {
	// File is the file's name as given ("" for bytes without a file).
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Field is the path to the field, like "rules[2].limit.period".
	Field string
	// Err is the problem.
	Err error
}

// Error renders "file:line: field: problem", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the problem.
func (e *Error) Unwrap() error { return e.Err }
