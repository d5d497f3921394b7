package configerr

import (
	"errors"
	"testing"
)

func TestError(t *testing.T) {
	problem := errors.New("bad duration")
	for _, c := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Field: "rules[0].limit.period", Err: problem}, "a.yaml:3: rules[0].limit.period: bad duration"},
		{Error{File: "a.yaml", Err: problem}, "a.yaml: bad duration"},
		{Error{Line: 7, Err: problem}, "7: bad duration"},
		{Error{Field: "domain", Err: problem}, "domain: bad duration"},
		{Error{Err: problem}, "bad duration"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
		if !errors.Is(&c.e, problem) {
			t.Errorf("%+v does not unwrap to its problem", c.e)
		}
	}
}
