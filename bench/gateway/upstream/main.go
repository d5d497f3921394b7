// Command upstream is the API behind every contender in the gateway
// benchmark: it answers every request with a short 200, as cheaply as
// net/http allows, so that what is measured is the proxy in front.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18081", "address")
	flag.Parse()
	body := []byte("ok\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
