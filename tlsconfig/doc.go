// Package tlsconfig turns TLS settings that name files (certificates,
// keys, certificate authorities) into tls.Configs that follow those
// files. A certificate renewed on disk is served from the next handshake
// on, with no restart and no connection dropped.
//
// Server is a listener's side (the gateway's tls section, the decision
// service's TLS flags). It holds one or more certificates chosen by the
// name the client asks for (SNI), and a minimum version. It may hold the
// CA that client certificates must chain to (mutual TLS).
//
// Client is a dialer's side (upstream_tls, the store's tls). It holds the
// CA that the server's certificate must chain to, a client certificate,
// and the name to verify.
//
// The structs carry YAML tags because they are sections of the files;
// Resolve makes relative paths relative to a config file's directory.
// Problems lists what is wrong with a section, each naming its field. It
// loads the files, so that a file is refused at start and by `ratekeeper
// check` for the same reasons.
package tlsconfig
