// Package tlsconfig turns TLS settings that name files (certificates,
// keys, certificate authorities) into tls.Configs that follow those
// files: a certificate renewed on disk is served from the next handshake
// on, with no restart and no connection dropped.
//
// Server is a listener's side (the gateway's tls section, the decision
// service's TLS flags): one or more certificates chosen by the name the
// client asks for (SNI), a minimum version, and optionally the CA that
// client certificates must chain to (mutual TLS). Client is a dialer's
// side (upstream_tls, the store's tls): the CA that the server's
// certificate must chain to, a client certificate, the name to verify.
//
// The structs carry YAML tags because they are sections of the files;
// Resolve makes relative paths relative to a config file's directory.
// Problems lists what is wrong with a section, loading
// the files, so that a file is refused at start and by `ratekeeper check`
// for the same reasons, each naming its field.
package tlsconfig
