// Command rlsref runs Envoy's reference rate limit service
// (github.com/envoyproxy/ratelimit), built from its Go module, so that
// bench/run-rls.sh can measure ratekeeper serve against it side by side. It
// is configured as the reference documents, through its environment
// variables (run-rls.sh sets them).
package main

import (
	"github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	"github.com/envoyproxy/ratelimit/src/settings"
)

func main() {
	r := runner.NewRunner(settings.NewSettings())
	r.Run()
}
