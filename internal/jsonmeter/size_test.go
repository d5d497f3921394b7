package jsonmeter

import (
	"testing"
	"unsafe"
)

// TestMeterSize holds docs/gateway.md's word: under 1 KiB a rule.
func TestMeterSize(t *testing.T) {
	if n := unsafe.Sizeof(Meter{}); n >= 1024 {
		t.Errorf("a Meter is %d bytes", n)
	} else {
		t.Logf("a Meter is %d bytes", n)
	}
}
