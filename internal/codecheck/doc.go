// Package codecheck holds tests of how the product code reads: functions
// that do one thing, and comments in short sentences (STYLE.md). It has no
// code.
package codecheck
