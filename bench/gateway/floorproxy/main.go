// Command floorproxy is the least a Go HTTP/1.1 reverse proxy can do: no
// net/http, no limits, no header handling. Each client connection gets its
// own upstream connection, and each request's head is copied line by line
// and its body by Content-Length, then the response the same way back. It
// is not a proxy anyone should run: no chunked bodies, no X-Forwarded-For,
// no timeouts. It is the benchmark's floor: what any Go proxy pays on this
// machine for the goroutines, the netpoller and the four system calls of a
// proxied request. The figures of nginx and the gateway are read against it.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"log"
	"net"
	"strconv"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18087", "address")
	up := flag.String("upstream", "127.0.0.1:18081", "upstream host:port")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, *up)
	}
}

func serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	cr, cw := bufio.NewReader(c), bufio.NewWriter(c)
	ur, uw := bufio.NewReader(u), bufio.NewWriter(u)
	for {
		if copyMessage(uw, cr) != nil || uw.Flush() != nil {
			return
		}
		if copyMessage(cw, ur) != nil || cw.Flush() != nil {
			return
		}
	}
}

var contentLength = []byte("content-length:")

// copyMessage copies one message: its head, then Content-Length bytes.
func copyMessage(w *bufio.Writer, r *bufio.Reader) error {
	n := 0
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
			n, err = strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
			if err != nil || n < 0 {
				return errors.New("bad Content-Length")
			}
		}
		w.Write(line)
		if len(line) <= 2 {
			break
		}
	}
	for n > 0 {
		b, err := r.Peek(min(n, r.Size()))
		if len(b) == 0 {
			return err
		}
		w.Write(b)
		r.Discard(len(b))
		n -= len(b)
	}
	return nil
}
