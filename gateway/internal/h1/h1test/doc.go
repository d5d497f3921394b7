// Package h1test is for the tests of the gateway's HTTP/1.1 layers what
// net/http/httptest is for net/http's: raw requests and responses to feed
// them, and upstreams to run them against.
package h1test
