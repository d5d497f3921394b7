// Package archmap keeps docs/architecture.md's map of the packages true.
// Its test draws the graph of the module's imports, and the table of the
// outside modules each package imports, from `go list`. It fails when the
// document shows another (UPDATE=1 rewrites it). It also holds the imports
// to the declared layers: none may run from a lower layer to a higher one.
package archmap
