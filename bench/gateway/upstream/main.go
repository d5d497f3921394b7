// Command upstream is the API behind every contender in the gateway
// benchmark: it answers every request with a short 200, as cheaply as
// net/http allows, so that what is measured is the proxy in front. With
// -cert and -key it serves HTTPS instead (HTTP/2 and HTTP/1.1 by ALPN, as
// net/http offers them): the TLS upstream of bench/run-tls.sh.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18081", "address")
	cert := flag.String("cert", "", "PEM certificate: serve HTTPS (with -key)")
	key := flag.String("key", "", "PEM private key of -cert")
	flag.Parse()
	body := []byte("ok\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	if *cert != "" || *key != "" {
		log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, h))
	}
	log.Fatal(http.ListenAndServe(*addr, h))
}
