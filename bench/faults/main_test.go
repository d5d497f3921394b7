package faults

import (
	"os"
	"testing"
)

// TestMain removes the binary binaryPath built, once every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if binaryDir != "" {
		os.RemoveAll(binaryDir)
	}
	os.Exit(code)
}
