package sim_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim"
)

// A worker paces 3,000 items at 1,000 per second: the fixed window lets each
// second's quota through at once, the leaky bucket's queue (Wait pacing)
// spreads it evenly. The table is what `ratekeeper simulate` prints.
func ExampleRun() {
	c, err := sim.Scenario("custom", func(c *sim.Config) {
		c.Items = 3000
		c.Behaviour = sim.WaitPacing
		c.Algorithms = []ratekeeper.Algorithm{ratekeeper.FixedWindow, ratekeeper.LeakyBucket}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := sim.Run(context.Background(), c)
	if err != nil {
		fmt.Println(err)
		return
	}
	res.WriteTable(os.Stdout)
	// Output:
	// custom: 1 worker, 3,000 items at most 1,000/s (burst 1,000), Wait pacing; counted per 100ms
	//
	//      algorithm  items done  lost  finished after  max/tick  max/1s  CV per tick  decisions
	//   fixed_window        3000     0          2.000s      1000    1000        2.449       3002
	//   leaky_bucket        3000     0          2.999s       100    1000        0.000       3000
}
