package upstream

import (
	"crypto/tls"
	"errors"
	"os"
	"time"
)

// readTLS reads tc with a deadline already passed, and reports whether
// it is clean: nothing came (the read timed out at once). It takes the
// records that crypto/tls holds, or that are whole on the socket. A
// post-handshake message (a TLS 1.3 session ticket) is handled and leaves
// the connection clean. Data the upstream sent unasked, or its
// close_notify, makes it dirty. A timed-out read leaves a TLS connection
// usable (the error is not sticky).
func readTLS(tc *tls.Conn, buf []byte) bool {
	tc.SetReadDeadline(time.Unix(1, 0))
	n, err := tc.Read(buf)
	tc.SetReadDeadline(time.Time{})
	return n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
}
