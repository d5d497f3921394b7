// Package archmap keeps docs/architecture.md's map of the packages true:
// its test draws the graph of the module's imports, and the table of the
// outside modules each package imports, from `go list`, and fails when the
// document shows another (UPDATE=1 rewrites it).
package archmap
